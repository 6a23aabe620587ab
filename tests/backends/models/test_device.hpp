#pragma once

// The device and precision the golden model tests run on: $ARBITER_TEST_DEVICE ("cuda",
// "cuda:1"; default "cpu") and $ARBITER_TEST_DTYPE ("f32", the default, "bf16" or "f16"). In
// f32 the tolerances against transformers are the CPU ones; below f32 each check names its own,
// looser bound, set for bf16 (f16's 11-bit mantissa meets it with room; docs/deployment.md's
// GPU section says why each holds). On a GPU machine:
//   ARBITER_TEST_DEVICE=cuda build/tests/models_tests
//   ARBITER_TEST_DEVICE=cuda ARBITER_TEST_DTYPE=bf16 build/tests/models_tests

#include <cstdlib>
#include <string>

#include "backends/models/bert_embedder.hpp"

namespace arbiter::backends::models::test_support {

inline std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

inline model_options test_options() {
  model_options options;
  options.device = env_or("ARBITER_TEST_DEVICE", "cpu");
  options.dtype = env_or("ARBITER_TEST_DTYPE", "f32");
  return options;
}

/// The same device in f32: the reference a bf16 run's greedy steps are checked against.
inline model_options f32_options() {
  auto options = test_options();
  options.dtype = "f32";
  return options;
}

inline bool low_precision() { return test_options().dtype != "f32"; }

/// A check's bound: `f32` in f32, `bf16` in bf16 or f16 (bf16's 8 bits of mantissa: about 4e-3
/// relative per rounding, grown through the layers).
inline double tolerance(double f32, double bf16) { return low_precision() ? bf16 : f32; }

} // namespace arbiter::backends::models::test_support
