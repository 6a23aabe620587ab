// libFuzzer target: the `POST /v1/score` decoder (net/score_codec.hpp) on arbitrary bodies.
// Invariants: a body is either decoded into valid items or refused with a 4xx naming a field;
// a decoded request's items respect the batch limit, carry a resolved reward and capability
// and an `extra_info` that is one JSON object; its answer encodes to one JSON document.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "net/score_codec.hpp"

using namespace arbiter;

namespace {

const backends::reward_catalog& catalog() {
  static const backends::reward_catalog c{fuzz::fuzz_config()};
  return c;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const net::codec_context ctx = fuzz::fuzz_context(catalog());
  std::string_view body{reinterpret_cast<const char*>(data), size};

  net::score_request_body out;
  net::codec_error err;
  if (!net::decode_score_request(body, ctx, out, err)) {
    fuzz::check_refusal(err);
    return 0;
  }
  fuzz::check(!out.items.empty(), "decoded a request without items");
  fuzz::check(out.items.size() <= ctx.max_batch_items, "decoded past max_batch_items");
  fuzz::check(out.priority < ctx.priorities.size(), "priority out of range");
  fuzz::check(out.deadline.count() > 0 && out.deadline <= ctx.max_deadline,
              "deadline out of range");
  for (const auto& item : out.items) {
    fuzz::check(catalog().find(item.reward) != nullptr, "item with an unknown reward",
                item.reward);
    fuzz::check(!item.kind.empty() && !item.capability.empty(), "item without kind",
                item.reward);
    // An item may come without references ([] or {"target": []}): since 2d726ee that is its
    // own matter (search_r1 scores it, other rewards fail it), not a 400 for the batch.
    if (!item.extra_info.empty()) {
      auto extra = nlohmann::json::parse(item.extra_info, nullptr, false);
      fuzz::check(extra.is_object(), "extra_info is not one JSON object", item.extra_info);
    }
  }
  auto reply = net::encode_score_response(fuzz::results_for(out.items));
  fuzz::check(fuzz::is_json(reply), "the answer is not JSON", reply);
  return 0;
}
