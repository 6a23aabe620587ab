// libFuzzer target: the trainer protocols (net/trainer_codec.hpp): OpenRLHF's `/get_reward`
// and slime's `/remote_rm` decoders, and the query and response helpers they use.
//
// Input: one selector byte, then the body. The selector's low two bits pick the decoder
// (0 OpenRLHF, 1 slime, 2 `query_parameter` and `response_of`), the rest the reward.
// Invariants: a body is decoded into items of the reward asked for, within the batch limit,
// with an `extra_info` that is one JSON object, or refused with a 4xx naming a field; answers
// encode to JSON; `response_of` returns a piece of the query.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "net/trainer_codec.hpp"

using namespace arbiter;

namespace {

const backends::reward_catalog& catalog() {
  static const backends::reward_catalog c{fuzz::fuzz_config()};
  return c;
}

void check_item(const score_item& item, const backends::reward_entry& reward) {
  fuzz::check(item.reward == reward.name, "item of another reward", item.reward);
  if (!item.extra_info.empty()) {
    auto extra = nlohmann::json::parse(item.extra_info, nullptr, false);
    fuzz::check(extra.is_object(), "extra_info is not one JSON object", item.extra_info);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const net::codec_context ctx = fuzz::fuzz_context(catalog());
  static const std::vector<backends::reward_entry> rewards = catalog().rewards();
  if (size < 1) {
    return 0;
  }
  const unsigned mode = data[0] & 3u;
  const auto& reward = rewards[(data[0] >> 2) % rewards.size()];
  std::string_view body{reinterpret_cast<const char*>(data) + 1, size - 1};
  net::failure_policy policy;
  policy.score = 0.0;
  net::codec_error err;

  if (mode == 0) {
    std::vector<score_item> items;
    if (!net::decode_openrlhf_request(body, reward, ctx, items, err)) {
      fuzz::check_refusal(err);
      return 0;
    }
    fuzz::check(items.size() <= ctx.max_batch_items, "decoded past max_batch_items");
    for (const auto& item : items) {
      check_item(item, reward);
    }
    auto reply = net::encode_openrlhf_response(fuzz::results_for(items), policy);
    fuzz::check(fuzz::is_json(reply), "the OpenRLHF answer is not JSON", reply);
  } else if (mode == 1) {
    score_item item;
    if (!net::decode_slime_request(body, reward, item, err)) {
      fuzz::check_refusal(err);
      return 0;
    }
    check_item(item, reward);
    auto results = fuzz::results_for({item, item});
    for (const auto& result : results) {
      for (const std::string key : {"", "score"}) {
        auto reply = net::encode_slime_response(result, key, policy);
        fuzz::check(fuzz::is_json(reply), "the slime answer is not JSON", reply);
      }
    }
  } else {
    // A request target, and a query and prompt split at the first NUL.
    if (auto value = net::query_parameter(body, "reward")) {
      fuzz::check(value->size() <= body.size(), "a query parameter longer than the target");
    }
    auto cut = body.find('\0');
    auto query = body.substr(0, cut);
    auto prompt = cut == std::string_view::npos ? std::string_view{} : body.substr(cut + 1);
    auto response = net::response_of(query, prompt);
    fuzz::check(query.find(response) != std::string_view::npos,
                "response_of returned text that is not in the query", response);
  }
  return 0;
}
