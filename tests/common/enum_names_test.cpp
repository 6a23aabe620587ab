#include "common/enum_names.hpp"

#include <string_view>

#include <gtest/gtest.h>

#include "common/capability.hpp"
#include "common/errc.hpp"
#include "common/log.hpp"
#include "common/score_types.hpp"

using namespace arbiter;

namespace {

enum class fruit : uint8_t { apple, pear, plum };

constexpr auto fruit_names = names_of<fruit::plum>("apple", "pear", "plum");

} // namespace

TEST(EnumNames, SpellsAndParsesEveryValue) {
  for (auto f : {fruit::apple, fruit::pear, fruit::plum}) {
    auto parsed = fruit_names.parse(fruit_names[f]);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_STREQ(fruit_names[fruit::pear], "pear");
  static_assert(std::string_view{fruit_names[fruit::plum]} == "plum");
}

TEST(EnumNames, AValueOutsideTheEnumIsUnknownAndAnUnknownSpellingParsesToNothing) {
  EXPECT_STREQ(fruit_names[static_cast<fruit>(7)], "unknown");
  EXPECT_FALSE(fruit_names.parse("Pear").has_value());
  EXPECT_FALSE(fruit_names.parse("").has_value());
  EXPECT_FALSE(fruit_names.parse("unknown").has_value());
}

TEST(EnumNames, TheProjectsTablesKeepTheirSpellings) {
  EXPECT_EQ(to_string(errc::upstream_rejected), "upstream_rejected");
  EXPECT_EQ(to_string(errc::none), "none");
  EXPECT_STREQ(to_string(item_status::fallback), "fallback");
  log::level lvl = log::level::info;
  ASSERT_TRUE(log::parse_level("warn", lvl));
  EXPECT_EQ(lvl, log::level::warn);
  EXPECT_FALSE(log::parse_level("loud", lvl));
  EXPECT_EQ(lvl, log::level::warn);
}

TEST(Capability, ARoutingKeyIsItsNameNarrowedByASuffix) {
  EXPECT_EQ(arbiter::routing_key(arbiter::capability::chat), "chat");
  EXPECT_EQ(arbiter::routing_key(arbiter::capability::embed, "@model:m"), "embed@model:m");
  EXPECT_TRUE(arbiter::keys_capability("chat", arbiter::capability::chat));
  EXPECT_TRUE(arbiter::keys_capability("chat@judge", arbiter::capability::chat));
  EXPECT_FALSE(arbiter::keys_capability("chatty", arbiter::capability::chat));
  EXPECT_FALSE(arbiter::keys_capability("generate", arbiter::capability::chat));
  EXPECT_FALSE(arbiter::keys_capability("em_ig", arbiter::capability::ig));
  for (auto c : arbiter::remote_capabilities) {
    EXPECT_EQ(arbiter::capability_names.parse(arbiter::name_of(c)), c);
  }
  EXPECT_FALSE(arbiter::capability_names.parse("embedding").has_value());
}
