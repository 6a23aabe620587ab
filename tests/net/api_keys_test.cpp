#include "net/api_keys.hpp"

#include <gtest/gtest.h>

namespace arbiter::net {
namespace {

TEST(ApiKeys, NoKeysLetEveryRequestThrough) {
  const api_keys none;
  EXPECT_FALSE(none.required());
  EXPECT_TRUE(none.accepts(""));
  EXPECT_TRUE(none.accepts("Bearer anything"));
}

TEST(ApiKeys, OnlyABearerHeaderWithOneOfTheKeysIsAccepted) {
  const api_keys keys{{"sk-one-123", "sk-two-456"}};
  EXPECT_TRUE(keys.required());
  EXPECT_TRUE(keys.accepts("Bearer sk-one-123"));
  EXPECT_TRUE(keys.accepts("Bearer sk-two-456"));
  EXPECT_TRUE(keys.accepts("bearer sk-two-456"));
  EXPECT_TRUE(keys.accepts("BEARER   sk-one-123 "));
  for (const char* wrong :
       {"", "Bearer", "Bearer ", "Bearer  ", "sk-one-123", "Basic sk-one-123",
        "Bearersk-one-123", "Bearer sk-one-12", "Bearer sk-one-1234", "Bearer SK-ONE-123",
        "Bearer sk-one-123,sk-two-456", "Token sk-one-123"}) {
    EXPECT_FALSE(keys.accepts(wrong)) << wrong;
  }
}

} // namespace
} // namespace arbiter::net
