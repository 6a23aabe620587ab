#include "common/text_excerpt.hpp"

#include <gtest/gtest.h>

using arbiter::quote_opening;
using arbiter::utf8_prefix;

TEST(Utf8Prefix, CutsOnACodePointBoundary) {
  EXPECT_EQ(utf8_prefix("abc", 10), "abc");
  EXPECT_EQ(utf8_prefix("abc", 2), "ab");
  // "é" is two bytes, "€" three, "🙂" four: a cut inside one backs up to its start.
  EXPECT_EQ(utf8_prefix("aé", 2), "a");
  EXPECT_EQ(utf8_prefix("a€b", 3), "a");
  EXPECT_EQ(utf8_prefix("a€b", 4), "a€");
  EXPECT_EQ(utf8_prefix("🙂x", 3), "");
  EXPECT_EQ(utf8_prefix("", 0), "");
}

TEST(QuoteOpening, QuotesShowsControlsAsSpacesAndMarksACut) {
  EXPECT_EQ(quote_opening("ok", 80), "\"ok\"");
  EXPECT_EQ(quote_opening("a\nb\tc", 80), "\"a b c\"");
  EXPECT_EQ(quote_opening("abcdef", 3), "\"abc\"...");
  EXPECT_EQ(quote_opening("aé", 2), "\"a\"...");
}
