#include "backends/remote/remote_codec.hpp"

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter;
using namespace arbiter::backends::remote;
using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

shared_item make_item(std::string kind, std::string solution, std::vector<std::string> truth,
                      std::string extra_info = {}) {
  auto item = std::make_shared<score_item>();
  item->reward = kind;
  item->kind = std::move(kind);
  item->capability = item->kind;
  item->solution_str = std::move(solution);
  item->ground_truth = std::move(truth);
  item->extra_info = std::move(extra_info);
  return item;
}

std::vector<shared_item> one_judge_item() {
  return {make_item("judge", "x = 4", {"x = 4"}, R"({"problem":"Solve 2x = 8."})")};
}

/// A chat completion whose message content is `content` (a JSON value).
std::string chat_reply(const json& content) {
  json message = {{"role", "assistant"}, {"content", content}};
  json choice = {{"index", 0}, {"message", message}, {"finish_reason", "stop"}};
  return json{{"object", "chat.completion"}, {"choices", json::array({choice})}}.dump();
}

/// The outcome of a judge call whose reply says `content`.
item_outcome judge(const std::string& content) {
  endpoint_options opts;
  auto items = one_judge_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  auto outcomes = parse_reply(api_kind::openai, opts, call, items, chat_reply(content));
  EXPECT_EQ(outcomes.size(), 1u);
  return outcomes.at(0);
}

/// The message of the bad_reply `f` throws, or "no throw".
template <typename F>
std::string bad_reply_message(F&& f) {
  try {
    f();
  } catch (const bad_reply& e) {
    return e.what();
  }
  return "no throw";
}

size_t whitespace_words(const std::string& text) {
  std::istringstream in{text};
  std::string word;
  size_t n = 0;
  while (in >> word) {
    ++n;
  }
  return n;
}

} // namespace

// ---- api kinds -----------------------------------------------------------------------------

TEST(RemoteCodec, ApiKindNamesRoundTrip) {
  for (auto k : {api_kind::openai, api_kind::tei, api_kind::ig_service}) {
    EXPECT_EQ(parse_api_kind(to_string(k)), k);
  }
  EXPECT_EQ(parse_api_kind("OpenAI"), std::nullopt);
  EXPECT_EQ(parse_api_kind(""), std::nullopt);
}

TEST(RemoteCodec, SupportsTheDocumentedKinds) {
  EXPECT_TRUE(supports(api_kind::openai, "judge"));
  EXPECT_TRUE(supports(api_kind::openai, "embedding"));
  EXPECT_FALSE(supports(api_kind::openai, "info_gain"));
  EXPECT_TRUE(supports(api_kind::tei, "embedding"));
  EXPECT_FALSE(supports(api_kind::tei, "judge"));
  EXPECT_TRUE(supports(api_kind::ig_service, "info_gain"));
  EXPECT_FALSE(supports(api_kind::ig_service, "embedding"));
  EXPECT_FALSE(supports(api_kind::openai, "lexical"));
}

// ---- requests ------------------------------------------------------------------------------

TEST(RemoteCodec, JudgeChatRequestCarriesThePromptAndSampling) {
  endpoint_options opts;
  opts.model = "judge-model";
  opts.max_tokens = 256;
  opts.temperature = 0.5;
  opts.top_p = 0.9;
  opts.enable_thinking = false;
  opts.stop = {"\n\n\n"};
  auto call = prepare_call(api_kind::openai, opts, one_judge_item());
  EXPECT_EQ(call.path, "/v1/chat/completions");
  auto body = json::parse(call.body);
  EXPECT_EQ(body["model"], "judge-model");
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  auto prompt = body["messages"][0]["content"].get<std::string>();
  EXPECT_EQ(prompt, judge_prompt(*one_judge_item()[0]));
  EXPECT_THAT(prompt, HasSubstr("Problem: Solve 2x = 8.\nReference: x = 4\nCandidate: x = 4"));
  EXPECT_EQ(body["temperature"], 0.5);
  EXPECT_EQ(body["top_p"], 0.9);
  EXPECT_EQ(body["max_tokens"], 256);
  EXPECT_EQ(body["n"], 1);
  EXPECT_EQ(body["stop"], json::array({"\n\n\n"}));
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", false}}));
  EXPECT_FALSE(body.contains("prompt"));
}

TEST(RemoteCodec, JudgeChatRequestLeavesUnsetOptionsOut) {
  auto call = prepare_call(api_kind::openai, endpoint_options{}, one_judge_item());
  auto body = json::parse(call.body);
  EXPECT_FALSE(body.contains("model"));
  EXPECT_FALSE(body.contains("stop"));
  EXPECT_FALSE(body.contains("chat_template_kwargs"));
  EXPECT_EQ(body["max_tokens"], 1024);
}

TEST(RemoteCodec, JudgeCompletionsRequestSendsAPrompt) {
  endpoint_options opts;
  opts.model = "m";
  opts.use_completions = true;
  opts.enable_thinking = true;
  auto call = prepare_call(api_kind::openai, opts, one_judge_item());
  EXPECT_EQ(call.path, "/v1/completions");
  auto body = json::parse(call.body);
  EXPECT_EQ(body["prompt"], judge_prompt(*one_judge_item()[0]));
  EXPECT_FALSE(body.contains("messages"));
  EXPECT_FALSE(body.contains("chat_template_kwargs"));
  EXPECT_EQ(body["n"], 1);
}

TEST(RemoteCodec, JudgePromptKeepsTheTemplateLabelsAndCandidateLast) {
  auto prompt = judge_prompt(*make_item("judge", "cand", {"ref", "other"}));
  EXPECT_EQ(prompt.rfind("Candidate: cand"), prompt.size() - std::string{"Candidate: cand"}.size());
  EXPECT_THAT(prompt, HasSubstr("Reference: ref\n"));
  EXPECT_THAT(prompt, HasSubstr("Problem: \n"));
  // The instructions never write a label the fake provider splits on.
  auto instructions = prompt.substr(0, prompt.find("Problem:"));
  for (const char* label : {"reference:", "candidate:"}) {
    std::string low = instructions;
    for (char& c : low) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    EXPECT_EQ(low.find(label), std::string::npos) << label;
  }
}

TEST(RemoteCodec, JudgePromptTakesProblemThenQuestionAndIgnoresBadExtraInfo) {
  EXPECT_THAT(judge_prompt(*make_item("judge", "a", {}, R"({"question":"Q?"})")),
              HasSubstr("Problem: Q?\nReference: \nCandidate: a"));
  EXPECT_THAT(judge_prompt(*make_item("judge", "a", {"r"}, R"({"question":"Q","problem":"P"})")),
              HasSubstr("Problem: P\n"));
  EXPECT_THAT(judge_prompt(*make_item("judge", "a", {"r"}, R"({"problem":7})")),
              HasSubstr("Problem: \n"));
  EXPECT_THAT(judge_prompt(*make_item("judge", "a", {"r"}, "not json")), HasSubstr("Problem: \n"));
  EXPECT_THAT(judge_prompt(*make_item("judge", "a", {"r"}, "[1,2]")), HasSubstr("Problem: \n"));
}

TEST(RemoteCodec, JudgePromptLeavesPlaceholdersInsideItemTextsAlone) {
  auto prompt = judge_prompt(*make_item("judge", "{PROBLEM} {REFERENCE_SOLUTION}",
                                        {"{CANDIDATE_SOLUTION}"}, R"({"problem":"p"})"));
  EXPECT_THAT(prompt, HasSubstr("Problem: p\nReference: {CANDIDATE_SOLUTION}\n"
                                "Candidate: {PROBLEM} {REFERENCE_SOLUTION}"));
}

TEST(RemoteCodec, EmbeddingRequestListsCandidateThenReferencesPerItem) {
  endpoint_options opts;
  opts.model = "embedder";
  std::vector<shared_item> items{make_item("embedding", "c0", {"r0a", "r0b"}),
                                 make_item("embedding", "c1", {"r1"}),
                                 make_item("embedding", "c2", {})};
  auto call = prepare_call(api_kind::openai, opts, items);
  EXPECT_EQ(call.path, "/v1/embeddings");
  auto body = json::parse(call.body);
  EXPECT_EQ(body["model"], "embedder");
  EXPECT_EQ(body["input"], json::array({"c0", "r0a", "r0b", "c1", "r1", "c2"}));
  EXPECT_EQ(call.input_count, 6u);
  ASSERT_EQ(call.spans.size(), 3u);
  EXPECT_EQ(call.spans[0].first, 0u);
  EXPECT_EQ(call.spans[0].references, 2u);
  EXPECT_EQ(call.spans[1].first, 3u);
  EXPECT_EQ(call.spans[1].references, 1u);
  EXPECT_EQ(call.spans[2].first, 5u);
  EXPECT_EQ(call.spans[2].references, 0u);

  auto tei = prepare_call(api_kind::tei, opts, items);
  EXPECT_EQ(tei.path, "/embed");
  auto tei_body = json::parse(tei.body);
  EXPECT_EQ(tei_body, (json{{"inputs", body["input"]}}));
}

TEST(RemoteCodec, InfoGainRequestTakesFieldsFromExtraInfo) {
  std::vector<shared_item> items{
    make_item("info_gain", "sol", {"a1", "a2"}, R"({"question":"q","context":"ctx"})"),
    make_item("info_gain", "sol2", {"b"}, R"({"problem":"p"})"),
    make_item("info_gain", "sol3", {}, "")};
  auto call = prepare_call(api_kind::ig_service, endpoint_options{}, items);
  EXPECT_EQ(call.path, "/compute_info_gain");
  auto body = json::parse(call.body);
  ASSERT_EQ(body["items"].size(), 3u);
  EXPECT_EQ(body["items"][0],
            (json{{"question", "q"}, {"context", "ctx"}, {"answers", {"a1", "a2"}}}));
  EXPECT_EQ(body["items"][1],
            (json{{"question", "p"}, {"context", "sol2"}, {"answers", {"b"}}}));
  EXPECT_EQ(body["items"][2],
            (json{{"question", ""}, {"context", "sol3"}, {"answers", json::array()}}));
}

TEST(RemoteCodec, PrepareRefusesBadBatches) {
  endpoint_options opts;
  EXPECT_THROW(prepare_call(api_kind::openai, opts, {}), std::invalid_argument);
  EXPECT_THROW(prepare_call(api_kind::openai, opts, {nullptr}), std::invalid_argument);
  EXPECT_THROW(prepare_call(api_kind::tei, opts, one_judge_item()), std::invalid_argument);
  EXPECT_THROW(prepare_call(api_kind::openai, opts,
                            {make_item("embedding", "a", {"b"}), make_item("judge", "a", {"b"})}),
               std::invalid_argument);
  EXPECT_THROW(prepare_call(api_kind::openai, opts,
                            {make_item("judge", "a", {"b"}), make_item("judge", "c", {"d"})}),
               std::invalid_argument);
  try {
    prepare_call(api_kind::ig_service, opts, {make_item("embedding", "a", {"b"})});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(std::string{e.what()}, HasSubstr("embedding"));
    EXPECT_THAT(std::string{e.what()}, HasSubstr("ig_service"));
  }
}

TEST(RemoteCodec, RequestBodiesSurviveInvalidUtf8) {
  auto call = prepare_call(api_kind::tei, endpoint_options{},
                           {make_item("embedding", "bad \xff byte", {"ok"})});
  auto body = json::parse(call.body);
  EXPECT_EQ(body["inputs"][1], "ok");
}

// ---- token estimates -----------------------------------------------------------------------

TEST(RemoteCodec, PromptTokenEstimateIsTheLargerOfWordsAndThirds) {
  EXPECT_EQ(estimate_prompt_tokens(""), 0u);
  EXPECT_EQ(estimate_prompt_tokens("a b c d"), 4u);        // 4 words, 7 bytes -> 3
  EXPECT_EQ(estimate_prompt_tokens("abcdefg"), 3u);        // 1 word, ceil(7 / 3)
  EXPECT_EQ(estimate_prompt_tokens("\xe4\xbd\xa0\xe5\xa5\xbd"), 2u);  // 6 bytes of CJK
  EXPECT_EQ(estimate_prompt_tokens(" \t\n "), 2u);         // no words, 4 bytes
}

TEST(RemoteCodec, EstimatedTokensNeverBelowWhatAProviderCounts) {
  endpoint_options opts;
  opts.max_tokens = 300;
  const std::vector<std::string> texts{
    "", "a", "a b c d e f g h i j", "word " + std::string(500, 'x'),
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87", "x\ny\tz  w"};
  for (const auto& text : texts) {
    for (bool completions : {false, true}) {
      opts.use_completions = completions;
      std::vector<shared_item> items{make_item("judge", text, {text})};
      auto call = prepare_call(api_kind::openai, opts, items);
      auto body = json::parse(call.body);
      auto prompt = completions ? body["prompt"].get<std::string>()
                                : body["messages"][0]["content"].get<std::string>();
      // The fake provider counts words + max_tokens * n; a BPE tokenizer rarely beats
      // 3 bytes a token.
      EXPECT_GE(call.estimated_tokens, whitespace_words(prompt) + opts.max_tokens) << text;
      EXPECT_GE(call.estimated_tokens, (prompt.size() + 2) / 3 + opts.max_tokens) << text;
    }
    std::vector<shared_item> items{make_item("embedding", text, {text, "ref " + text}),
                                   make_item("embedding", "other", {text})};
    auto call = prepare_call(api_kind::openai, opts, items);
    size_t words = 0;
    size_t thirds = 0;
    for (const auto& input : json::parse(call.body)["input"]) {
      words += whitespace_words(input.get<std::string>());
      thirds += (input.get<std::string>().size() + 2) / 3;
    }
    EXPECT_GE(call.estimated_tokens, words) << text;
    EXPECT_GE(call.estimated_tokens, thirds) << text;
  }
}

TEST(RemoteCodec, InfoGainEstimateCountsEveryTextButNoOutput) {
  auto call = prepare_call(api_kind::ig_service, endpoint_options{},
                           {make_item("info_gain", "one two three", {"four", "five six"},
                                      R"({"question":"seven"})")});
  EXPECT_EQ(call.estimated_tokens, 2u + 5u + 2u + 3u);  // seven / one two three / four / five six
}

// ---- judge replies -------------------------------------------------------------------------

TEST(RemoteCodec, JudgeChatReplyGivesTheScore) {
  auto outcome = judge("The candidate matches.\nREWARD: 0.75");
  EXPECT_EQ(outcome.code, errc::none);
  EXPECT_DOUBLE_EQ(outcome.score, 0.75);
  EXPECT_TRUE(outcome.error.empty());
}

TEST(RemoteCodec, JudgeCompletionsReplyReadsChoiceText) {
  endpoint_options opts;
  opts.use_completions = true;
  auto items = one_judge_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  auto outcomes = parse_reply(api_kind::openai, opts, call, items,
                              R"({"object":"text_completion","choices":[{"text":" REWARD: 1"}]})");
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_DOUBLE_EQ(outcomes[0].score, 1.0);
  // A chat-shaped reply is unusable for a completions call.
  EXPECT_THROW(parse_reply(api_kind::openai, opts, call, items, chat_reply("REWARD: 1")),
               bad_reply);
}

TEST(RemoteCodec, JudgeReplyWithoutScoreQuotesTheReplyOpening) {
  std::string reply = "I think the answer is right, but I will not give a number. " +
                      std::string(200, 'z');
  auto outcome = judge(reply);
  EXPECT_EQ(outcome.code, errc::reward_failed);
  EXPECT_EQ(outcome.score, 0.0);
  EXPECT_THAT(outcome.error, HasSubstr("no REWARD"));
  EXPECT_THAT(outcome.error, HasSubstr("\"I think the answer is right"));
  EXPECT_THAT(outcome.error, Not(HasSubstr(std::string(100, 'z'))));
}

TEST(RemoteCodec, JudgeQuoteCutsOnACodePointBoundary) {
  std::string reply = std::string(79, 'a') + "\xc3\xa9" + "tail";  // é straddles byte 80
  auto outcome = judge(reply);
  ASSERT_EQ(outcome.code, errc::reward_failed);
  EXPECT_THAT(outcome.error, HasSubstr("\"" + std::string(79, 'a') + "\"..."));
  EXPECT_NO_THROW(json(outcome.error).dump());
}

TEST(RemoteCodec, JudgeScoreInsideThinkIsNotAScore) {
  auto outcome = judge("<think>REWARD: 1 seems right");
  EXPECT_EQ(outcome.code, errc::reward_failed);
  EXPECT_THAT(outcome.error, HasSubstr("<think>REWARD: 1"));
  auto stripped = judge("<think>REWARD: 1</think>\nREWARD: 0.2");
  EXPECT_EQ(stripped.code, errc::none);
  EXPECT_DOUBLE_EQ(stripped.score, 0.2);
}

TEST(RemoteCodec, JudgeScoreOutOfRangeFails) {
  for (const char* reply : {"REWARD: 8", "REWARD: -0.5", "REWARD: 1.0001"}) {
    auto outcome = judge(reply);
    EXPECT_EQ(outcome.code, errc::reward_failed) << reply;
    EXPECT_THAT(outcome.error, HasSubstr("outside [0, 1]")) << reply;
  }
  EXPECT_THAT(judge("REWARD: 8").error, HasSubstr("judge score 8 outside [0, 1]"));
  EXPECT_EQ(judge("REWARD: 0").code, errc::none);
  EXPECT_EQ(judge("REWARD: 1.0").code, errc::none);
}

TEST(RemoteCodec, JudgeNullContentIsAnItemFailure) {
  endpoint_options opts;
  auto items = one_judge_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  auto null_content = parse_reply(
    api_kind::openai, opts, call, items,
    R"({"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"length"}]})");
  EXPECT_EQ(null_content[0].code, errc::reward_failed);
  EXPECT_THAT(null_content[0].error, HasSubstr("no content"));
  EXPECT_THAT(null_content[0].error, HasSubstr("length"));
  auto refused = parse_reply(
    api_kind::openai, opts, call, items,
    R"({"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't grade"}}]})");
  EXPECT_EQ(refused[0].code, errc::reward_failed);
  EXPECT_THAT(refused[0].error, HasSubstr("I can't grade"));
}

TEST(RemoteCodec, JudgeUnusableBodiesThrowBadReply) {
  endpoint_options opts;
  auto items = one_judge_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  auto parse = [&](std::string_view body) {
    return bad_reply_message([&] { parse_reply(api_kind::openai, opts, call, items, body); });
  };
  EXPECT_THAT(parse("{\"choices\": [trunc"), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse(""), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse("[]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse("{}"), HasSubstr("no choices"));
  EXPECT_THAT(parse(R"({"choices":[]})"), HasSubstr("no choices"));
  EXPECT_THAT(parse(R"({"choices":[7]})"), HasSubstr("not an object"));
  EXPECT_THAT(parse(R"({"choices":[{"text":"REWARD: 1"}]})"), HasSubstr("no message"));
  EXPECT_THAT(parse(R"({"choices":[{"message":{"content":[1]}}]})"), HasSubstr("not a string"));
  EXPECT_THAT(parse(R"({"choices":[{"message":{"role":"assistant"}}]})"), HasSubstr("no content"));
  // The body is quoted, cut at 120 characters, with unprintable bytes as '?'.
  auto long_body = "<html>\x01" + std::string(300, 'h');
  auto message = parse(long_body);
  EXPECT_THAT(message, HasSubstr("\"<html>?hhh"));
  EXPECT_THAT(message, Not(HasSubstr(std::string(120, 'h'))));
  EXPECT_THAT(message, HasSubstr(std::string(113, 'h') + "\"..."));
}

TEST(RemoteCodec, ParseRefusesItemsThatDoNotMatchTheCall) {
  endpoint_options opts;
  auto items = one_judge_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  std::vector<shared_item> two{items[0], items[0]};
  EXPECT_THROW(parse_reply(api_kind::openai, opts, call, two, chat_reply("REWARD: 1")),
               std::invalid_argument);
  std::vector<shared_item> embeddings{make_item("embedding", "a", {"b"})};
  EXPECT_THROW(parse_reply(api_kind::openai, opts, call, embeddings, R"({"data":[]})"),
               std::invalid_argument);
}

// ---- judge score extraction ----------------------------------------------------------------

TEST(RemoteCodec, ExtractJudgeScoreVariants) {
  EXPECT_EQ(extract_judge_score("REWARD: 0.8"), 0.8);
  EXPECT_EQ(extract_judge_score("reward = 1"), 1.0);
  EXPECT_EQ(extract_judge_score("Reward=0"), 0.0);
  EXPECT_EQ(extract_judge_score("**REWARD:** 0.25"), 0.25);
  EXPECT_EQ(extract_judge_score("**REWARD**: 0.25"), 0.25);
  EXPECT_EQ(extract_judge_score("REWARD: [0.5]"), 0.5);
  EXPECT_EQ(extract_judge_score("REWARD: **0.5**"), 0.5);
  EXPECT_EQ(extract_judge_score("REWARD:\n0.4"), 0.4);
  EXPECT_EQ(extract_judge_score("REWARD: .5"), 0.5);
  EXPECT_EQ(extract_judge_score("REWARD: +1"), 1.0);
  EXPECT_EQ(extract_judge_score("REWARD: -0.5"), -0.5);
  EXPECT_EQ(extract_judge_score("REWARD: 5e-1"), 0.5);
  EXPECT_EQ(extract_judge_score("REWARD: 1e"), 1.0);  // a bare 'e' is not an exponent
  EXPECT_EQ(extract_judge_score("FINAL_REWARD: 0.3"), 0.3);
  EXPECT_EQ(extract_judge_score("REWARD: 1e999"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(extract_judge_score("REWARD: 1e-999"), 0.0);
}

TEST(RemoteCodec, ExtractJudgeScoreTakesTheLastOccurrence) {
  EXPECT_EQ(extract_judge_score("REWARD: 0.1\nOn reflection,\nREWARD: 0.9"), 0.9);
  // A later "reward" without a number does not hide an earlier score.
  EXPECT_EQ(extract_judge_score("REWARD: 0.6\nThe reward is generous."), 0.6);
  EXPECT_EQ(extract_judge_score("REWARD: 0.6 then REWARD: none"), 0.6);
}

TEST(RemoteCodec, ExtractJudgeScoreFindsNothingWithoutANumber) {
  EXPECT_EQ(extract_judge_score(""), std::nullopt);
  EXPECT_EQ(extract_judge_score("The answer is correct."), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD: high"), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD 0.5"), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD: inf"), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD: nan"), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD: ."), std::nullopt);
  EXPECT_EQ(extract_judge_score("prereward: 0.5"), std::nullopt);
}

TEST(RemoteCodec, ExtractJudgeScoreStripsThinking) {
  EXPECT_EQ(extract_judge_score("<think>REWARD: 1</think> REWARD: 0.2"), 0.2);
  EXPECT_EQ(extract_judge_score("<THINK>REWARD: 1</Think>REWARD: 0.3"), 0.3);
  EXPECT_EQ(extract_judge_score("<think>a</think>REWARD: 0.1<think>REWARD: 1</think>"), 0.1);
  EXPECT_EQ(extract_judge_score("<think>REWARD: 1</think>"), std::nullopt);
  EXPECT_EQ(extract_judge_score("<think>REWARD: 1 and still thinking"), std::nullopt);
  // The template opened the block in the prompt: only the closing tag is in the reply.
  EXPECT_EQ(extract_judge_score("reasoning REWARD: 1</think>\nREWARD: 0.7"), 0.7);
  EXPECT_EQ(extract_judge_score("reasoning REWARD: 1</think>"), std::nullopt);
}

// ---- embedding replies ---------------------------------------------------------------------

TEST(RemoteCodec, OpenAiEmbeddingReplyScoresMaxCosineByIndex) {
  endpoint_options opts;
  std::vector<shared_item> items{make_item("embedding", "c0", {"r0a", "r0b"}),
                                 make_item("embedding", "c1", {"r1"})};
  auto call = prepare_call(api_kind::openai, opts, items);
  // Out of order on purpose; vectors not normalized.
  json data = json::array();
  auto add = [&](int index, json vec) {
    data.push_back({{"object", "embedding"}, {"index", index}, {"embedding", vec}});
  };
  add(4, {0.0, 3.0});   // r1
  add(0, {2.0, 0.0});   // c0
  add(2, {1.0, 1.0});   // r0b: cos 0.7071
  add(1, {0.0, 5.0});   // r0a: cos 0
  add(3, {0.0, -1.0});  // c1: cos with r1 = -1
  auto outcomes = parse_reply(api_kind::openai, opts, call, items,
                              json{{"object", "list"}, {"data", data}}.dump());
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_NEAR(outcomes[0].score, std::sqrt(0.5), 1e-12);
  EXPECT_EQ(outcomes[1].code, errc::none);
  EXPECT_NEAR(outcomes[1].score, -1.0, 1e-12);
}

TEST(RemoteCodec, TeiEmbeddingReplyIsAListInOrder) {
  endpoint_options opts;
  std::vector<shared_item> items{make_item("embedding", "same", {"same"}),
                                 make_item("embedding", "none", {})};
  auto call = prepare_call(api_kind::tei, opts, items);
  auto outcomes =
    parse_reply(api_kind::tei, opts, call, items, "[[0.6,0.8],[0.6,0.8],[1,0]]");
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_NEAR(outcomes[0].score, 1.0, 1e-12);
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_EQ(outcomes[1].error, "embedding needs at least one reference in ground_truth");
}

TEST(RemoteCodec, ZeroEmbeddingIsAnItemFailure) {
  endpoint_options opts;
  std::vector<shared_item> items{make_item("embedding", "a", {"b"}),
                                 make_item("embedding", "c", {"d"})};
  auto call = prepare_call(api_kind::tei, opts, items);
  auto outcomes = parse_reply(api_kind::tei, opts, call, items, "[[0,0],[1,0],[1,0],[0,0]]");
  EXPECT_EQ(outcomes[0].code, errc::reward_failed);
  EXPECT_THAT(outcomes[0].error, HasSubstr("zero vector"));
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_THAT(outcomes[1].error, HasSubstr("zero vector"));
}

TEST(RemoteCodec, EmbeddingUnusableBodiesThrowBadReply) {
  endpoint_options opts;
  std::vector<shared_item> items{make_item("embedding", "a", {"b"})};
  auto openai = prepare_call(api_kind::openai, opts, items);
  auto tei = prepare_call(api_kind::tei, opts, items);
  auto parse_openai = [&](std::string_view body) {
    return bad_reply_message([&] { parse_reply(api_kind::openai, opts, openai, items, body); });
  };
  auto parse_tei = [&](std::string_view body) {
    return bad_reply_message([&] { parse_reply(api_kind::tei, opts, tei, items, body); });
  };
  EXPECT_THAT(parse_tei("[[1,0]]"), HasSubstr("1 vectors for 2 inputs"));
  EXPECT_THAT(parse_tei("[[1,0],[1,0],[1,0]]"), HasSubstr("3 vectors for 2 inputs"));
  EXPECT_THAT(parse_tei(R"({"data":[]})"), HasSubstr("not a list of vectors"));
  EXPECT_THAT(parse_tei(R"([[1,"x"],[1,0]])"), HasSubstr("not a number"));
  EXPECT_THAT(parse_tei("[[1,0],[]]"), HasSubstr("embedding 1"));
  EXPECT_THAT(parse_tei("[[1,0],[1,0,0]]"), HasSubstr("different dimensions"));
  EXPECT_THAT(parse_tei("[[1,0],7]"), HasSubstr("embedding 1"));
  EXPECT_THAT(parse_openai("[[1,0],[1,0]]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse_openai(R"({"object":"list"})"), HasSubstr("no data"));
  EXPECT_THAT(parse_openai(R"({"data":[{"index":0,"embedding":[1]}]})"),
              HasSubstr("1 vectors for 2 inputs"));
  EXPECT_THAT(parse_openai(R"({"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]})"),
              HasSubstr("repeated"));
  EXPECT_THAT(parse_openai(R"({"data":[{"index":0,"embedding":[1]},{"index":2,"embedding":[1]}]})"),
              HasSubstr("out of range"));
  EXPECT_THAT(parse_openai(R"({"data":[{"embedding":[1]},{"index":1,"embedding":[1]}]})"),
              HasSubstr("no integer index"));
  EXPECT_THAT(parse_openai(R"({"data":[{"index":0},{"index":1,"embedding":[1]}]})"),
              HasSubstr("no embedding"));
  EXPECT_THAT(parse_openai(R"({"data":[{"index":0,"embedding":"AAAA"},{"index":1,"embedding":[1]}]})"),
              HasSubstr("not a non-empty list of numbers"));
  EXPECT_THAT(parse_openai("not json"), HasSubstr("not valid JSON"));
}

// ---- info gain replies ---------------------------------------------------------------------

TEST(RemoteCodec, InfoGainReplyGivesScoresAndPerItemErrors) {
  endpoint_options opts;
  std::vector<shared_item> items{make_item("info_gain", "s", {"a"}, R"({"question":"q"})"),
                                 make_item("info_gain", "s", {})};
  auto call = prepare_call(api_kind::ig_service, opts, items);
  auto outcomes = parse_reply(
    api_kind::ig_service, opts, call, items,
    R"({"scores":[0.25,null],"errors":[null,"items[1].answers: must not be empty"],
        "details":[{"with_context":0.5,"without_context":0.25},null]})");
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_DOUBLE_EQ(outcomes[0].score, 0.25);
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_THAT(outcomes[1].error, HasSubstr("items[1].answers: must not be empty"));
  // Without an errors list the failure still says what happened.
  auto bare = parse_reply(api_kind::ig_service, opts, call, items, R"({"scores":[0.5,null]})");
  EXPECT_EQ(bare[1].code, errc::reward_failed);
  EXPECT_THAT(bare[1].error, HasSubstr("no score"));
}

TEST(RemoteCodec, InfoGainUnusableBodiesThrowBadReply) {
  endpoint_options opts;
  std::vector<shared_item> items{make_item("info_gain", "s", {"a"})};
  auto call = prepare_call(api_kind::ig_service, opts, items);
  auto parse = [&](std::string_view body) {
    return bad_reply_message([&] { parse_reply(api_kind::ig_service, opts, call, items, body); });
  };
  EXPECT_THAT(parse(R"({"scores":[0.1,0.2]})"), HasSubstr("2 scores for 1 items"));
  EXPECT_THAT(parse(R"({"scores":[]})"), HasSubstr("0 scores for 1 items"));
  EXPECT_THAT(parse(R"({"errors":[null]})"), HasSubstr("no scores"));
  EXPECT_THAT(parse(R"({"scores":["0.1"]})"), HasSubstr("neither a number nor null"));
  EXPECT_THAT(parse("[0.1]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse("{\"scores\":[0.1"), HasSubstr("not valid JSON"));
}

// ---- error bodies --------------------------------------------------------------------------

TEST(RemoteCodec, ErrorMessageReadsEveryProviderShape) {
  EXPECT_EQ(error_message(R"({"error":{"message":"Rate limit reached","type":"tokens"}})"),
            "Rate limit reached");
  EXPECT_EQ(error_message(R"({"message":"flat message","code":400})"), "flat message");
  EXPECT_EQ(error_message(R"({"error":"Input validation error","error_type":"Validation"})"),
            "Input validation error");
  EXPECT_EQ(error_message(R"({"detail":"Not Found"})"), "Not Found");
  EXPECT_EQ(error_message(R"({"detail":[{"loc":["body","items",0,"question"],)"
                          R"("msg":"field required","type":"value_error.missing"},)"
                          R"({"msg":"second"}]})"),
            "body.items.0.question: field required; second");
  EXPECT_EQ(error_message(R"({"detail":["plain"]})"), "plain");
}

TEST(RemoteCodec, ErrorMessageFallsBackToThePrintableBody) {
  EXPECT_EQ(error_message(""), "(empty body)");
  EXPECT_EQ(error_message(" \n"), "(empty body)");
  EXPECT_EQ(error_message("upstream connect error"), "upstream connect error");
  EXPECT_EQ(error_message("bad\x01\xc3\xa9\n"), "bad????");
  EXPECT_EQ(error_message(std::string(300, 'x')), std::string(200, 'x'));
  // JSON without a known message is quoted as text.
  EXPECT_EQ(error_message(R"({"error":{"code":500}})"), R"({"error":{"code":500}})");
  EXPECT_EQ(error_message(R"({"detail":[{"loc":["x"]}]})"), R"({"detail":[{"loc":["x"]}]})");
  EXPECT_EQ(error_message("[1,2]"), "[1,2]");
  // A long JSON message is cut on a code point boundary.
  auto long_message = error_message(json{{"message", std::string(499, 'm') + "\xc3\xa9"}}.dump());
  EXPECT_EQ(long_message, std::string(499, 'm'));
}

// ---- NLI -----------------------------------------------------------------------------------

TEST(RemoteCodec, EntailmentProbabilityMatchesTheLabelByName) {
  auto labels = json::parse(R"([{"label":"neutral","score":0.2},)"
                            R"({"label":"ENTAILMENT","score":0.7},)"
                            R"({"label":"contradiction","score":0.1}])");
  EXPECT_DOUBLE_EQ(entailment_probability(labels), 0.7);
  EXPECT_DOUBLE_EQ(entailment_probability(json::parse(R"([{"label":"entail","score":0.4}])")),
                   0.4);
  EXPECT_DOUBLE_EQ(
    entailment_probability(json::parse(R"([{"label":"Entailment","score":1}])")), 1.0);
}

TEST(RemoteCodec, EntailmentProbabilityThrowsWithoutTheLabel) {
  EXPECT_THROW(entailment_probability(json::parse(R"([{"label":"neutral","score":1}])")),
               bad_reply);
  EXPECT_THROW(entailment_probability(json::parse(R"({"label":"entailment","score":1})")),
               bad_reply);
  EXPECT_THROW(entailment_probability(json::parse(R"([{"label":"entailment"}])")), bad_reply);
  EXPECT_THROW(entailment_probability(json::parse("[1]")), bad_reply);
  EXPECT_THAT(bad_reply_message([] { entailment_probability(json::array()); }),
              HasSubstr("no entailment label"));
}
