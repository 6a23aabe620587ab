#include "common/errc.hpp"

#include <set>
#include <string>

#include <gtest/gtest.h>

using namespace arbiter;

TEST(Errc, EveryCodeHasADistinctStableName) {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(errc::client_closed); ++i) {
    names.insert(std::string{to_string(static_cast<errc>(i))});
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(errc::client_closed) + 1);
  EXPECT_EQ(to_string(errc::deadline_exceeded), "deadline_exceeded");
  EXPECT_EQ(to_string(errc::invalid_request), "invalid_request");
}

