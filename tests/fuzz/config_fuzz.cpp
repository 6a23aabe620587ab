// libFuzzer target: the TOML configuration loader (config/config.hpp), `arbiter serve
// --config` and `check-config`. Invariants: loading never throws; every problem names a field
// and a reason; a configuration loaded without problems is usable: its reward catalog builds,
// every `data_source` prefix resolves to a reward, the priority weights are positive, and it
// passes validation again.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "backends/reward_catalog.hpp"
#include "config/config.hpp"
#include "fuzz/fuzz_support.hpp"

using namespace arbiter;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text{reinterpret_cast<const char*>(data), size};
  std::vector<config::config_problem> problems;
  config::arbiter_config cfg;
  try {
    cfg = config::load_string(text, "fuzz.toml", problems);
  } catch (const std::exception& e) {
    fuzz::check(false, "load_string threw", e.what());
  }
  if (!problems.empty()) {
    for (const auto& p : problems) {
      fuzz::check(!p.field.empty(), "a problem without a field", p.reason);
      fuzz::check(!p.reason.empty(), "a problem without a reason", p.field);
    }
    fuzz::check(!config::describe(problems).empty(), "describe() of problems is empty");
    return 0;
  }
  std::vector<config::config_problem> again;
  config::validate(cfg, again);
  fuzz::check(again.empty(), "a loaded configuration fails validation",
              again.empty() ? "" : again[0].field + ": " + again[0].reason);
  const backends::reward_catalog catalog{cfg};
  for (const auto& [prefix, reward] : cfg.data_sources) {
    fuzz::check(catalog.find(reward) != nullptr, "a data_source naming no reward", prefix);
    fuzz::check(catalog.for_data_source(prefix) != nullptr, "a data_source that does not resolve",
                prefix);
  }
  for (double w : config::class_weights(cfg.scheduler.priorities)) {
    fuzz::check(std::isfinite(w) && w > 0, "a priority weight that is not positive");
  }
  return 0;
}
