// libFuzzer target: what Arbiter parses from upstream providers (backends/remote/
// remote_codec.hpp) — foreign input. `parse_reply` gets arbitrary 2xx bodies for a call that
// `prepare_call` built; `error_message` arbitrary error bodies; `extract_judge_score`
// arbitrary judge replies.
//
// Input: one selector byte, then the body. Selector % 8: 0 chat (n = 2), 1 chat through
// /v1/completions, 2 generate (n = 2), 3 OpenAI embedding, 4 TEI embedding, 5 TEI NLI,
// 6 IG service, 7 error_message and extract_judge_score.
// Invariants: parse_reply answers every item of the batch, in order, or throws bad_reply
// (never another exception); a scored item has a finite score and the outputs its call asked
// for; a failed one says why. error_message never comes back empty nor longer than 500 bytes.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/remote/remote_codec.hpp"
#include "fuzz/fuzz_support.hpp"

using namespace arbiter;
using namespace arbiter::backends::remote;

namespace {

shared_item reward_item(std::string kind, std::string solution, std::vector<std::string> truth,
                        std::string extra_info = {}) {
  auto item = std::make_shared<score_item>();
  item->reward = kind;
  item->kind = std::move(kind);
  item->capability = item->kind;
  item->solution_str = std::move(solution);
  item->ground_truth = std::move(truth);
  item->extra_info = std::move(extra_info);
  return item;
}

shared_item call_item(std::string kind, std::string prompt, uint32_t n,
                      std::string hypothesis = {}) {
  auto item = std::make_shared<score_item>();
  item->reward = "graph";
  item->kind = std::move(kind);
  item->capability = item->kind;
  model_call call;
  call.prompt = std::move(prompt);
  call.hypothesis = std::move(hypothesis);
  call.n = n;
  item->call = std::make_shared<const model_call>(std::move(call));
  return item;
}

/// One call setup per selector: the API, the source's settings and the batch.
struct setup {
  api_kind api;
  endpoint_options opts;
  std::vector<shared_item> items;
  prepared_call call;
};

std::vector<setup> make_setups() {
  std::vector<setup> s(7);
  s[0] = {api_kind::openai, {}, {call_item("chat", "Grade: 4", 2)}, {}};
  s[1] = {api_kind::openai, {}, {call_item("chat", "Grade: 4", 1)}, {}};
  s[1].opts.use_completions = true;
  s[2] = {api_kind::openai, {}, {call_item("generate", "Q: 2+2?\nA:", 2)}, {}};
  s[3] = {api_kind::openai,
          {},
          {reward_item("embedding", "c0", {"r0a", "r0b"}), reward_item("embedding", "c1", {"r1"})},
          {}};
  s[4] = {api_kind::tei,
          {},
          {reward_item("embedding", "c0", {"Paris", "Lyon"}, R"({"target_gt":"Lyon"})"),
           reward_item("embedding", "c1", {})},
          {}};
  s[5] = {api_kind::tei,
          {},
          {call_item("nli", "A man plays.", 1, "Someone plays."),
           call_item("nli", "It rains.", 1, "It is dry.")},
          {}};
  s[6] = {api_kind::ig_service,
          {},
          {reward_item("info_gain", "four", {"4"}, R"({"question":"2+2?"})"),
           reward_item("info_gain", "five", {"5", "five"}, R"({"question":"2+3?"})")},
          {}};
  for (auto& one : s) {
    one.call = prepare_call(one.api, one.opts, one.items);
  }
  return s;
}

void check_outcomes(const setup& s, const std::vector<item_outcome>& outcomes) {
  fuzz::check(outcomes.size() == s.items.size(), "not one outcome per item");
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const auto& o = outcomes[i];
    if (o.code != errc::none) {
      fuzz::check(!o.error.empty(), "a failed item without a reason");
      continue;
    }
    fuzz::check(std::isfinite(o.score), "a scored item with a score that is not finite",
                std::to_string(o.score));
    const auto& item = *s.items[i];
    if (item.call) {
      fuzz::check(o.output != nullptr, "a model call answered without its output");
      if (item.kind == "chat" || item.kind == "generate") {
        fuzz::check(o.output->texts.size() >= item.call->n, "fewer texts than the call's n");
      }
    }
    if (!o.detail.empty()) {
      fuzz::check(fuzz::is_json(o.detail), "detail is not JSON", o.detail);
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<setup> setups = make_setups();
  if (size < 1) {
    return 0;
  }
  const unsigned mode = data[0] % 8u;
  std::string_view body{reinterpret_cast<const char*>(data) + 1, size - 1};

  if (mode == 7) {
    auto message = error_message(body);
    fuzz::check(!message.empty(), "error_message came back empty");
    fuzz::check(message.size() <= 500, "error_message longer than 500 bytes");
    if (auto score = extract_judge_score(body)) {
      fuzz::check(!std::isnan(*score), "a judge score that is NaN");
    }
    return 0;
  }
  const auto& s = setups[mode];
  try {
    check_outcomes(s, parse_reply(s.api, s.opts, s.call, s.items, body));
  } catch (const bad_reply& e) {
    fuzz::check(std::string_view{e.what()}.size() > 0, "a bad_reply that says nothing");
  } catch (const std::exception& e) {
    fuzz::check(false, "parse_reply threw something other than bad_reply", e.what());
  }
  return 0;
}
