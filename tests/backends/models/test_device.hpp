#pragma once

// The device the golden model tests run on: $ARBITER_TEST_DEVICE ("cuda", "cuda:1"; default
// "cpu"), always in f32 so that the tolerances against transformers hold. On a GPU machine:
//   ARBITER_TEST_DEVICE=cuda build-cuda/tests/models_tests

#include <cstdlib>
#include <string>

#include "backends/models/bert_embedder.hpp"

namespace arbiter::backends::models::test_support {

inline model_options test_options() {
  model_options options;
  const char* device = std::getenv("ARBITER_TEST_DEVICE");
  options.device = device != nullptr && *device != '\0' ? device : "cpu";
  options.dtype = "f32";
  return options;
}

} // namespace arbiter::backends::models::test_support
