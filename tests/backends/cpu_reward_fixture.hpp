#pragma once

// The corpus of Python-computed expectations for the CPU rewards, written by
// tests/backends/make_cpu_reward_fixtures.py.

#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace arbiter::testing {

inline constexpr const char* cpu_reward_fixture_path =
  ARBITER_SOURCE_DIR "/tests/backends/fixtures/cpu_reward_cases.json";

/// The parsed fixture, or an empty object (and a test failure) when it cannot be read.
inline nlohmann::json load_cpu_reward_fixture() {
  std::ifstream in(cpu_reward_fixture_path);
  if (!in) {
    ADD_FAILURE() << "cannot open " << cpu_reward_fixture_path;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(in);
}

} // namespace arbiter::testing
