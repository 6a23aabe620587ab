// libFuzzer target: `POST /compute_info_gain` (net/info_gain_codec.hpp), the IG service's
// protocol at the ingress. Invariants: a body is refused with a 4xx naming a field, or every
// request item is either scorable (a position into `items`, no error) or answered with an
// error (position -1); at most the batch limit of items; the answer encodes to JSON.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "net/info_gain_codec.hpp"

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

  net::info_gain_request_body out;
  net::codec_error err;
  if (!net::decode_info_gain_request(body, ctx, out, err)) {
    fuzz::check_refusal(err);
    return 0;
  }
  fuzz::check(out.positions.size() == out.errors.size(), "positions and errors differ");
  fuzz::check(out.positions.size() <= ctx.max_batch_items, "decoded past max_batch_items");
  fuzz::check(out.priority < ctx.priorities.size(), "priority out of range");
  size_t scorable = 0;
  for (size_t i = 0; i < out.positions.size(); ++i) {
    auto at = out.positions[i];
    if (at < 0) {
      fuzz::check(at == -1 && !out.errors[i].empty(), "an unscorable item without a reason");
      continue;
    }
    fuzz::check(out.errors[i].empty(), "a scorable item with an error", out.errors[i]);
    fuzz::check(static_cast<size_t>(at) == scorable, "positions out of order");
    ++scorable;
  }
  fuzz::check(scorable == out.items.size(), "items and positions differ");
  for (const auto& item : out.items) {
    fuzz::check(catalog().find(item.reward) != nullptr, "item with an unknown reward",
                item.reward);
  }
  auto reply = net::encode_info_gain_response(out, fuzz::results_for(out.items));
  fuzz::check(fuzz::is_json(reply), "the answer is not JSON", reply);
  return 0;
}
