#pragma once

// What the libFuzzer targets share: an invariant check that stops the run with a message
// (libFuzzer then saves the input as a crash), the server's codec context over a catalog with
// a configured reward and data-source prefix, and stand-in results for the encoders.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/reward_catalog.hpp"
#include "common/score_types.hpp"
#include "config/config.hpp"
#include "net/score_codec.hpp"

namespace arbiter::fuzz {

/// Aborts with `what` when `ok` is false: an invariant of the code under test was broken.
inline void check(bool ok, const char* what, std::string_view detail = {}) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s%s%.*s\n", what, detail.empty() ? "" : ": ",
                 static_cast<int>(detail.size()), detail.data());
    std::abort();
  }
}

/// Whether `text` is one JSON document (as the encoders must write).
inline bool is_json(std::string_view text) {
  return nlohmann::json::accept(text.begin(), text.end());
}

/// A refusal names a field, says why, and is a 4xx.
inline void check_refusal(const net::codec_error& err) {
  check(!err.field.empty(), "a refusal names no field", err.message);
  check(!err.message.empty(), "a refusal says nothing", err.field);
  const auto status = net::refusal_answer_for(err.why).status;
  // 4xx: the body can never be served; a model only lost nodes serve may be back (503).
  check((status >= 400 && status < 500) || err.why == net::refusal::model_away,
        "a refusal that is not a 4xx", err.field);
}

/// The embedded default plus a configured exact-match reward with options and a
/// `data_source` prefix, as a deployment would have.
inline config::arbiter_config fuzz_config() {
  auto cfg = config::embedded_default();
  config::reward_config squad;
  squad.name = "squad_em";
  squad.kind = "exact_match";
  cfg.rewards["squad_em"] = squad;
  cfg.data_sources["squad"] = "squad_em";
  config::reward_config emb;
  emb.name = "sts";
  emb.kind = "embedding";
  emb.options = R"({"length_penalty":"none"})";
  cfg.rewards["sts"] = emb;
  return cfg;
}

/// The server's decoder context over `catalog` (small batch limit, so the limit is reached).
inline net::codec_context fuzz_context(const backends::reward_catalog& catalog) {
  net::codec_context ctx;
  ctx.catalog = &catalog;
  ctx.priorities = {"high", "normal", "low"};
  ctx.default_priority = 1;
  ctx.max_batch_items = 16;
  return ctx;
}

/// One result per item, alternating a score and a failure whose reason quotes the item's
/// text, so the encoders escape what the decoders let in.
inline std::vector<item_result> results_for(const std::vector<score_item>& items) {
  std::vector<item_result> results;
  for (size_t i = 0; i < items.size(); ++i) {
    item_result r;
    if (i % 2 == 0) {
      r.status = item_status::ok;
      r.score = 0.25 * static_cast<double>(i);
      r.source = items[i].reward;
    } else {
      r.status = item_status::failed;
      r.code = errc::reward_failed;
      r.error = "bad: " + items[i].solution_str;
    }
    results.push_back(std::move(r));
  }
  return results;
}

} // namespace arbiter::fuzz
