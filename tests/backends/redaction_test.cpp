#include "backends/remote/redaction.hpp"

#include <gtest/gtest.h>

#include "backends/remote/remote_codec.hpp"

namespace arbiter::backends::remote {
namespace {

TEST(Redaction, BlanksTheShapesKeysComeIn) {
  const std::pair<const char*, const char*> cases[] = {
      {"Incorrect API key provided: sk-proj-Zq8vYp4LmN2xR7tK9wB3.",
       "Incorrect API key provided: [redacted]."},
      {"got Authorization: Bearer abc.def-123", "got Authorization: [redacted] [redacted]"},
      {"bearer tok3n", "bearer [redacted]"},
      {"Basic dXNlcjpwYXNz", "Basic [redacted]"},
      {R"({"api_key": "hunter2", "model": "m"})", R"({"api_key": "[redacted]", "model": "m"})"},
      {"apiKey=abc&x=1", "apiKey=[redacted]&x=1"},
      {"x-api-key: k1 rejected", "x-api-key: [redacted] rejected"},
      {"access_token=eyJhbGciOi.eyJzdWIi.sig", "access_token=[redacted]"},
      {"password: 'p@ss' wrong", "password: '[redacted]' wrong"},
      {"key AKIAIOSFODNN7EXAMPLE denied", "key [redacted] denied"},
      {"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln here", "jwt [redacted] here"},
      {"id 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c is bad", "id [redacted] is bad"},
  };
  for (const auto& [in, out] : cases) {
    EXPECT_EQ(redact_secrets(in), out) << in;
  }
}

TEST(Redaction, LeavesOrdinaryErrorTextAlone) {
  for (const char* text :
       {"model 'Qwen/Qwen3-32B' not found", "max_tokens: must be at most 4096 (got 8192)",
        "Rate limit reached for requests per minute: limit 600, used 600",
        "This model's maximum context length is 32768 tokens", "(empty body)",
        "an extraordinarilylongwordwithoutanydigitsatallinsideit stays",
        "HTTP 503: upstream connect error or disconnect/reset before headers"}) {
    EXPECT_EQ(redact_secrets(text), text);
  }
}

TEST(Redaction, TheSourcesOwnKeyGoesWhateverItLooksLike) {
  EXPECT_EQ(redact_secrets("you sent hello-world twice: hello-world", "hello-world"),
            "you sent [redacted] twice: [redacted]");
  EXPECT_EQ(redact_secrets("nothing here", "hello-world"), "nothing here");
}

TEST(Redaction, ExcerptsAreCutAfterRedactingSoNoKeyIsHalfShown) {
  const std::string body = "prefix sk-abcdefghijklmnopqrstuvwxyz0123456789 suffix";
  EXPECT_EQ(redacted_excerpt(body, 16), "prefix [redacted...");
  EXPECT_EQ(redacted_excerpt("short", 16), "short");
  // A cut never splits a UTF-8 character.
  EXPECT_EQ(redacted_excerpt("\xc3\xa9\xc3\xa9\xc3\xa9", 3), "\xc3\xa9...");
}

TEST(Redaction, ErrorMessagesFromBodiesAreShortAndClean) {
  const std::string echoed =
      R"({"error": {"message": "Incorrect API key provided: sk-live-0123456789abcdefABCDEF.",)"
      R"( "type": "invalid_request_error", "code": "invalid_api_key"}})";
  EXPECT_EQ(error_message(echoed), "Incorrect API key provided: [redacted].");
  const std::string long_text(5000, 'a');
  const auto cut = error_message(R"({"message": ")" + long_text + R"("})");
  EXPECT_EQ(cut.size(), 203u);
  EXPECT_EQ(cut.substr(200), "...");
  EXPECT_EQ(error_message("<html>token=abc123secret</html>" + std::string(400, ' ')).rfind(
              "<html>token=[redacted]</html>", 0),
            0u);
}

} // namespace
} // namespace arbiter::backends::remote
