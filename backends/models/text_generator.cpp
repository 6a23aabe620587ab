#include "backends/models/text_generator.hpp"

#include <algorithm>
#include <fstream>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "backends/models/devices.hpp"
#include "backends/rewards/text_similarity.hpp"
#include "backends/tokenizers/tokenizer.hpp"

namespace arbiter::backends::models {

namespace {

using json = nlohmann::json;

/// One message's text: a string, or its text parts joined with "\n" as vLLM joins them. A
/// part of any other type is refused, as is a message without content: this text-only model
/// would otherwise answer as if it had seen them.
std::string message_text(const json& m, size_t i) {
  const auto where = "messages[" + std::to_string(i) + "].content";
  auto c = m.find("content");
  if (c != m.end() && c->is_string()) {
    return c->get<std::string>();
  }
  if (c == m.end() || !c->is_array()) {
    throw std::invalid_argument{where + ": expected a string or a list of text parts"};
  }
  std::string content;
  for (size_t j = 0; j < c->size(); ++j) {
    const auto& part = (*c)[j];
    auto type = part.is_object() && part.contains("type") && part["type"].is_string()
                  ? part["type"].get<std::string>()
                  : std::string{};
    auto at = where + "[" + std::to_string(j) + "]";
    if (type == "text" && !(part.contains("text") && part["text"].is_string())) {
      throw std::invalid_argument{at + ".text: expected a string"};
    }
    if (type != "text") {
      // Dropping it would answer as if the image (or audio, ...) had been seen.
      throw std::invalid_argument{
        at + ": "
        + (type.empty() ? std::string{"a part without a type"} : "a part of type '" + type + "'")
        + "; this local model reads text parts only"};
    }
    content += (j == 0 ? "" : "\n") + part["text"].get<std::string>();
  }
  return content;
}

/// ChatML, as Qwen's template writes it, with the generation prompt. Roles other than
/// system, user and assistant are refused: the template would drop them unseen.
std::string render_chatml(const model_call& call) {
  if (!call.extra_body.empty()) {
    const auto extra = json::parse(call.extra_body);
    std::string names;
    for (auto at = extra.begin(); at != extra.end(); ++at) {
      names += (names.empty() ? "" : ", ") + at.key();
    }
    throw std::invalid_argument{names + ": a local generator cannot honour them (only a "
                                        "remote source gets them)"};
  }
  std::string out;
  auto add = [&out](const std::string& role, const std::string& content) {
    out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  };
  if (!call.messages.empty()) {
    auto messages = json::parse(call.messages);
    for (size_t i = 0; i < messages.size(); ++i) {
      const auto& m = messages[i];
      auto role = m.value("role", std::string{});
      if (role != "system" && role != "user" && role != "assistant") {
        throw std::invalid_argument{"messages[" + std::to_string(i) + "].role: '" + role
                                    + "' is not one of system, user, assistant, the roles "
                                      "this local model reads"};
      }
      add(role, message_text(m, i));
    }
  } else {
    add("user", call.prompt);
  }
  out += "<|im_start|>assistant\n";
  if (call.enable_thinking && !*call.enable_thinking) {
    out += "<think>\n\n</think>\n\n";
  }
  return out;
}

} // namespace

text_generator::~text_generator() = default;

std::shared_ptr<const text_generator> text_generator::load(const std::string& folder,
                                                           const model_options& options) {
  std::shared_ptr<text_generator> out{new text_generator{}};
  out->model_ = qwen_decoder::load(folder, options);
  out->tokenizer_ = std::make_unique<tokenizers::tokenizer>(
    tokenizers::tokenizer::from_file(folder + "/tokenizer.json"));
  for (const char* token : {"<|endoftext|>", "<|im_end|>"}) {
    if (auto id = out->tokenizer_->token_id(token)) {
      out->end_ids_.push_back(*id);
    }
  }
  std::ifstream in{folder + "/config.json"};
  auto cfg = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_object() && cfg.contains("eos_token_id")) {
    const auto& eos = cfg["eos_token_id"];
    for (const auto& id : eos.is_array() ? eos : json::array({eos})) {
      if (id.is_number_integer()) {
        out->end_ids_.push_back(id.get<int64_t>());
      }
    }
  }
  return out;
}

generation_request text_generator::prepare(const model_call& call, bool chat) const {
  const std::string prompt = chat ? render_chatml(call) : call.prompt;
  generation_request req;
  req.prompt = tokenizer_->encode_plain(prompt);
  if (req.prompt.empty()) {
    throw std::invalid_argument{"the prompt is empty"};
  }
  auto& options = req.options;
  options.temperature = call.temperature.value_or(1.0);
  options.top_p = call.top_p.value_or(1.0);
  options.max_new_tokens = call.max_tokens.value_or(256);
  if (req.prompt.size() + options.max_new_tokens > model_->info().max_tokens) {
    throw std::invalid_argument{
      "prompt of " + std::to_string(req.prompt.size()) + " tokens plus "
      + std::to_string(options.max_new_tokens) + " new ones (max_tokens"
      + (call.max_tokens ? std::string{} : std::string{", unset: the default"})
      + ") exceeds the model's " + std::to_string(model_->info().max_tokens)
      + "; send a shorter prompt or a smaller max_tokens"};
  }
  options.stop_ids = end_ids_;
  size_t longest_stop = 0;
  for (const auto& stop : call.stop) {
    longest_stop = std::max(longest_stop, stop.size());
  }
  if (longest_stop > 0) {
    // A sequence ends at the token that completes a stop string, as vLLM's do, rather than
    // decoding to max_tokens for a text cut there anyway. A new occurrence ends in the newest
    // token, so it lies within the last longest_stop tokens (each non-empty one at least a
    // byte); a few more cover tokens that decode to nothing. The whole text confirms it.
    const size_t window = longest_stop + 8;
    options.stop_when = [this, stops = call.stop, window](const std::vector<int64_t>& tokens) {
      auto holds_stop = [&stops](const std::string& text) {
        return std::any_of(stops.begin(), stops.end(), [&](const std::string& stop) {
          return !stop.empty() && text.find(stop) != std::string::npos;
        });
      };
      const size_t from = tokens.size() > window ? tokens.size() - window : 0;
      return holds_stop(tokenizer_->decode({tokens.begin() + static_cast<long>(from),
                                            tokens.end()}))
             && holds_stop(tokenizer_->decode(tokens));
    };
  }
  options.seed = call.seed ? *call.seed : std::random_device{}();
  req.n = call.n;
  return req;
}

model_output text_generator::finish(const model_call& call, bool chat, size_t prompt_tokens,
                                    std::vector<generation>& generations) const {
  model_output out;
  out.prompt_tokens = static_cast<uint32_t>(prompt_tokens);
  for (auto& g : generations) {
    bool ended = g.finish_reason == "stop";
    // An end token is not text; a stop string's last token is (the text is cut below).
    const bool end_token =
      ended && !g.tokens.empty()
      && std::find(end_ids_.begin(), end_ids_.end(), g.tokens.back()) != end_ids_.end();
    size_t kept = end_token ? g.tokens.size() - 1 : g.tokens.size();
    std::string text = tokenizer_->decode({g.tokens.begin(), g.tokens.begin() + static_cast<long>(kept)});
    // A stop string ends the text where it starts; the tokens kept are those whose text
    // begins before it.
    size_t cut = std::string::npos;
    for (const auto& s : call.stop) {
      if (!s.empty()) {
        cut = std::min(cut, text.find(s));
      }
    }
    if (cut != std::string::npos) {
      text.resize(cut);
      ended = true;
      size_t n = 0;
      while (n < kept && tokenizer_->decode({g.tokens.begin(), g.tokens.begin() + static_cast<long>(n)}).size() < cut) {
        ++n;
      }
      kept = n;
    }
    generated_text t;
    t.text = chat ? text : std::string{rewards::python_strip(text)};
    // Every text carries at least its first token's log-probability.
    size_t counted = std::max<size_t>(kept, 1);
    double sum = 0.0;
    for (size_t i = 0; i < counted; ++i) {
      sum += g.logprobs[i];
    }
    t.mean_logprob = sum / static_cast<double>(counted);
    t.tokens = static_cast<uint32_t>(counted);
    t.finish_reason = ended ? "stop" : "length";
    out.completion_tokens += static_cast<uint32_t>(g.tokens.size());
    out.texts.push_back(std::move(t));
  }
  return out;
}

model_output text_generator::complete(const model_call& call, bool chat) const {
  auto done = complete_all({{&call, chat}});
  if (!done[0].output) {
    throw std::invalid_argument{done[0].error};
  }
  return std::move(*done[0].output);
}

std::vector<text_generator::completion> text_generator::complete_all(
  const std::vector<call_ref>& calls, size_t max_batch_tokens, size_t* batches) const {
  std::vector<completion> out(calls.size());
  std::vector<generation_request> requests(calls.size());
  std::vector<size_t> ready;
  for (size_t i = 0; i < calls.size(); ++i) {
    try {
      requests[i] = prepare(*calls[i].call, calls[i].chat);
      ready.push_back(i);
    } catch (const std::exception& e) {
      out[i].error = e.what();
      out[i].rejected = true;
    }
  }
  // Similar prompt lengths together; a pass holds calls while its padded size — every
  // sequence as long as the longest prompt plus the most new tokens — stays in the budget (a
  // call bigger than the budget runs alone).
  std::stable_sort(ready.begin(), ready.end(), [&](size_t a, size_t b) {
    return requests[a].prompt.size() < requests[b].prompt.size();
  });
  size_t passes = 0;
  size_t start = 0;
  while (start < ready.size()) {
    size_t rows = 0;
    size_t longest = 0;
    size_t end = start;
    while (end < ready.size()) {
      const auto& req = requests[ready[end]];
      size_t r = rows + req.n;
      size_t l = std::max(longest, req.prompt.size() + req.options.max_new_tokens);
      if (end > start && r * l > max_batch_tokens) {
        break;
      }
      rows = r;
      longest = l;
      ++end;
    }
    std::vector<generation_request> pass;
    for (size_t k = start; k < end; ++k) {
      pass.push_back(requests[ready[k]]);
    }
    auto run = [&](size_t from, size_t to, const std::vector<generation_request>& these) {
      try {
        auto generations = model_->generate(these);
        for (size_t k = from; k < to; ++k) {
          const size_t i = ready[k];
          out[i].output = finish(*calls[i].call, calls[i].chat, requests[i].prompt.size(),
                                 generations[k - from]);
        }
        return true;
      } catch (const std::exception& e) {
        for (size_t k = from; k < to; ++k) {
          out[ready[k]].error = without_backtrace(e.what());
        }
        return false;
      }
    };
    if (!run(start, end, pass) && end - start > 1) {
      // One call's failure is its own: the others run again, each alone.
      for (size_t k = start; k < end; ++k) {
        out[ready[k]].output.reset();
        out[ready[k]].error.clear();
        run(k, k + 1, {requests[ready[k]]});
      }
    }
    ++passes;
    start = end;
  }
  if (batches != nullptr) {
    *batches = passes;
  }
  return out;
}

} // namespace arbiter::backends::models
