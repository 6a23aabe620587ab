// Numbers as labels: python_number_text against what Python itself gives. The expected texts
// were computed by `str(json.loads(token))` in tests/net/make_number_text_cases.py.

#include "net/number_text.hpp"

#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::net;

TEST(NumberText, MatchesPythonStrOfJsonLoadsForEveryFixtureToken) {
  std::ifstream in{std::string{ARBITER_SOURCE_DIR} + "/tests/net/fixtures/number_text_cases.json"};
  ASSERT_TRUE(in) << "run tests/net/make_number_text_cases.py";
  std::stringstream text;
  text << in.rdbuf();
  auto doc = nlohmann::json::parse(text.str());
  const auto& cases = doc.at("cases");
  ASSERT_GT(cases.size(), 2000u);
  size_t numbers = 0;
  for (const auto& c : cases) {
    auto token = c.at(0).get<std::string>();
    auto got = python_number_text(token);
    if (c.at(1).is_null()) {
      EXPECT_FALSE(got.has_value()) << "'" << token << "' is not a JSON number, got " << *got;
    } else {
      ++numbers;
      ASSERT_TRUE(got.has_value()) << "'" << token << "'";
      EXPECT_EQ(*got, c.at(1).get<std::string>()) << "'" << token << "'";
    }
  }
  EXPECT_GT(numbers, 2000u);
}

TEST(NumberText, TheIssuesExamples) {
  EXPECT_EQ(python_number_text("72"), "72");
  EXPECT_EQ(python_number_text("-0"), "0");
  EXPECT_EQ(python_number_text("123456789012345678901234567890"),
            "123456789012345678901234567890");
  EXPECT_EQ(python_number_text("1.0"), "1.0");
  EXPECT_EQ(python_number_text("1e16"), "1e+16");
  EXPECT_EQ(python_number_text("1e-05"), "1e-05");
  EXPECT_EQ(python_number_text("100.0"), "100.0");
  EXPECT_EQ(python_number_text("0.0001"), "0.0001");
  EXPECT_EQ(python_number_text("1.5e300"), "1.5e+300");
  EXPECT_EQ(python_number_text("1E400"), "inf");
  EXPECT_EQ(python_number_text("true"), std::nullopt);
  EXPECT_EQ(python_number_text("NaN"), std::nullopt);
}

TEST(NumberText, FloatReprOfValuesJsonCannotSpell) {
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float_repr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
}
