#pragma once

// Text in, completions out: a causal LM folder's tokenizer (tokenizer.json) in front of the
// native Qwen decoder, serving the `generate` and `chat` model calls of reward graphs (ΔIG's
// samples, a judge's votes) and of /v1/chat/completions.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/models/qwen_decoder.hpp"
#include "common/score_types.hpp"

namespace arbiter::backends::tokenizers {
class tokenizer;
}

namespace arbiter::backends::models {

class text_generator {
public:
  /// Loads the decoder and `folder`/tokenizer.json; throws std::runtime_error naming the file.
  static std::shared_ptr<const text_generator> load(const std::string& folder,
                                                    const model_options& options = {});
  ~text_generator();

  /// Runs one call: `call.n` completions of its prompt (`chat`: rendered with the ChatML
  /// template, `call.messages` when set, with an empty think block when enable_thinking is
  /// false). Unset fields: temperature 1, top_p 1, 256 new tokens, a fresh seed. Generation
  /// stops at the model's end tokens or a `call.stop` string (cut from the text); each text
  /// carries the mean log-probability of its tokens and their count. Throws
  /// std::invalid_argument for a prompt longer than the model takes.
  model_output complete(const model_call& call, bool chat) const;

  /// A call to run with others: `chat` says whether it is rendered with ChatML.
  struct call_ref {
    const model_call* call = nullptr;
    bool chat = false;
  };
  /// A call's output, or why it failed (its prompt too long or empty, or the pass failing).
  struct completion {
    std::optional<model_output> output;
    std::string error;
    /// The call itself cannot run here (its prompt is empty, too long, or holds a part this
    /// model cannot read), as a provider's 400 says; else the model failed.
    bool rejected = false;
  };

  /// Runs several calls as `complete` does, together: calls of similar prompt length share a
  /// left-padded decode batch as long as its padded size (sequences × (longest prompt + most
  /// new tokens)) stays within `max_batch_tokens`. Each call keeps its own sampling options and
  /// seed; the others reach it only through float rounding (see qwen_decoder::generate).
  /// `batches`, when given, gets the number of decode passes.
  std::vector<completion> complete_all(const std::vector<call_ref>& calls,
                                       size_t max_batch_tokens = 16384,
                                       size_t* batches = nullptr) const;

  const model_info& info() const noexcept {
    return model_->info();
  }

private:
  text_generator() = default;
  generation_request prepare(const model_call& call, bool chat) const;
  model_output finish(const model_call& call, bool chat, size_t prompt_tokens,
                      std::vector<generation>& generations) const;
  std::unique_ptr<tokenizers::tokenizer> tokenizer_;
  std::unique_ptr<qwen_decoder> model_;
  std::vector<int64_t> end_ids_;
};

} // namespace arbiter::backends::models
