// libFuzzer target: the pass-through decoders (net/openai_codec.hpp): OpenAI's chat
// completions and embeddings, TEI's `/embed` and `/predict`.
//
// Input: one selector byte (low two bits: 0 chat, 1 OpenAI embeddings, 2 TEI embed, 3 TEI
// predict), then the body. Invariants: a body becomes model-call items within the batch limit
// routed to a model the server knows, or is refused with a 4xx naming a field; the answers
// built from those items encode to JSON, and vectors are shaped to the dimensions asked for.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "net/openai_codec.hpp"

using namespace arbiter;

namespace {

const backends::reward_catalog& catalog() {
  static const backends::reward_catalog c{fuzz::fuzz_config()};
  return c;
}

/// A scored model call: two completions, an embedding of 8 values and NLI probabilities.
item_result model_result(size_t i) {
  item_result r;
  r.status = item_status::ok;
  r.source = "a";
  auto out = std::make_shared<model_output>();
  out->texts = {{"REWARD: 1", 0.0, 0, "stop", {}, {}, false},
                {"second \"choice\"", 0.0, 0, "", "reasoning", "refusal", true}};
  for (int k = 0; k < 8; ++k) {
    out->embedding.push_back(static_cast<float>(k + i) - 3.5f);
  }
  out->entailment = 0.7;
  out->neutral = 0.2;
  out->contradiction = 0.1;
  out->prompt_tokens = 5;
  r.output = std::move(out);
  return r;
}

std::vector<item_result> model_results(size_t n) {
  std::vector<item_result> results;
  for (size_t i = 0; i < n; ++i) {
    results.push_back(model_result(i));
  }
  return results;
}

void check_items(const std::vector<score_item>& items, size_t max_items) {
  fuzz::check(!items.empty(), "decoded a request without items");
  fuzz::check(items.size() <= max_items, "decoded past max_batch_items");
  for (const auto& item : items) {
    fuzz::check(item.call != nullptr, "a pass-through item without its call");
    fuzz::check(!item.capability.empty(), "a pass-through item without a capability");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const net::codec_context codec = fuzz::fuzz_context(catalog());
  static const std::vector<net::model_entry> models{
    {"judge-8b", {capability::chat}, {"a", "b"}, {}},
    {"embedder", {capability::embed}, {"e"}, {}},
    {"nli", {capability::nli}, {"n"}, {}},
    {"away", {capability::chat, capability::embed}, {}, "node 'n' was lost: killed"}};
  static const net::passthrough_context ctx{&codec, &models, {}};
  if (size < 1) {
    return 0;
  }
  const unsigned mode = data[0] & 3u;
  std::string_view body{reinterpret_cast<const char*>(data) + 1, size - 1};
  net::codec_error err;

  if (mode == 0) {
    net::chat_request_body out;
    if (!net::decode_chat_request(body, ctx, out, err)) {
      fuzz::check_refusal(err);
      return 0;
    }
    check_items({out.item}, 1);
    fuzz::check(out.n >= 1 && out.item.call->n == out.n, "chat n is not the call's n");
    fuzz::check(out.item.capability.rfind("chat", 0) == 0, "a chat item that is not chat",
                out.item.capability);
    auto reply = net::encode_chat_response(out, model_result(0), "chatcmpl-1", 1700000000);
    fuzz::check(fuzz::is_json(reply), "the chat answer is not JSON", reply);
  } else if (mode == 1 || mode == 2) {
    net::embed_request_body out;
    bool ok = mode == 1 ? net::decode_openai_embeddings(body, ctx, out, err)
                        : net::decode_tei_embed(body, ctx, out, err);
    if (!ok) {
      fuzz::check_refusal(err);
      return 0;
    }
    check_items(out.items, codec.max_batch_items);
    auto results = model_results(out.items.size());
    for (const auto& result : results) {
      auto v = net::shaped_vector(out, result);
      fuzz::check(out.dimensions == 0 || v.size() <= out.dimensions,
                  "a vector longer than the dimensions asked for");
    }
    auto reply = mode == 1 ? net::encode_openai_embeddings(out, results)
                           : net::encode_tei_embed(out, results);
    fuzz::check(fuzz::is_json(reply), "the embeddings answer is not JSON", reply);
  } else {
    net::predict_request_body out;
    if (!net::decode_tei_predict(body, ctx, out, err)) {
      fuzz::check_refusal(err);
      return 0;
    }
    check_items(out.items, codec.max_batch_items);
    fuzz::check(!out.single || out.items.size() == 1, "a single pair with several items");
    auto reply = net::encode_tei_predict(out, model_results(out.items.size()));
    fuzz::check(fuzz::is_json(reply), "the predict answer is not JSON", reply);
  }
  return 0;
}
