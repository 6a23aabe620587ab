#include "backends/remote/remote_codec.hpp"
#include "backends/embedding_scoring.hpp"
#include "common/token_estimate.hpp"

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
                      std::string extra_info = {}, std::string options = {}) {
  auto item = std::make_shared<score_item>();
  item->reward = kind;
  item->kind = std::move(kind);
  item->capability = item->kind;
  item->solution_str = std::move(solution);
  item->ground_truth = std::move(truth);
  item->extra_info = std::move(extra_info);
  item->options = std::move(options);
  return item;
}

/// A model-call item of `kind` ("chat", "generate", "nli").
shared_item call_item(std::string kind, model_call call) {
  auto item = std::make_shared<score_item>();
  item->reward = "graph";
  item->kind = std::move(kind);
  item->capability = item->kind;
  item->call = std::make_shared<const model_call>(std::move(call));
  return item;
}

model_call prompt_call(std::string prompt, uint32_t n = 1) {
  model_call call;
  call.prompt = std::move(prompt);
  call.n = n;
  return call;
}

std::vector<shared_item> one_chat_item(uint32_t n = 1) {
  return {call_item("chat", prompt_call("Grade this.\nReference: 4\nCandidate: 4", n))};
}

/// A chat completion whose choices' message contents are `contents` (JSON values), indexed
/// in order.
std::string chat_reply(const std::vector<json>& contents) {
  json choices = json::array();
  for (size_t i = 0; i < contents.size(); ++i) {
    json message = {{"role", "assistant"}, {"content", contents[i]}};
    choices.push_back({{"index", i}, {"message", message}, {"finish_reason", "stop"}});
  }
  return json{{"object", "chat.completion"}, {"choices", choices}}.dump();
}

/// A completions choice with `text` and `token_logprobs`.
json completion_choice(int index, const std::string& text, const json& token_logprobs) {
  return {{"index", index},
          {"text", text},
          {"logprobs", {{"tokens", json::array()}, {"token_logprobs", token_logprobs}}},
          {"finish_reason", "stop"}};
}

std::string completion_reply(const json& choices) {
  return json{{"object", "text_completion"}, {"choices", choices}}.dump();
}

/// A source with every setting a chat call can fall back to.
endpoint_options source_settings() {
  endpoint_options opts;
  opts.model = "source-model";
  opts.max_tokens = 256;
  opts.temperature = 0.5;
  opts.top_p = 0.9;
  opts.enable_thinking = true;
  opts.stop = {"\n\n\n"};
  return opts;
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

/// The message of the std::invalid_argument `f` throws, or "no throw".
template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
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

/// Cosine similarity of the first `dims` values (all when 0), computed here independently.
double cosine(const std::vector<double>& a, const std::vector<double>& b, size_t dims = 0) {
  if (dims == 0) {
    dims = a.size();
  }
  double dot = 0;
  double na = 0;
  double nb = 0;
  for (size_t i = 0; i < dims; ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / std::sqrt(na * nb);
}

/// The seeds' mapping of a cosine to [0, 1].
double unit(double cos) {
  return (cos + 1.0) / 2.0;
}

/// The outcomes of an embedding batch on TEI whose reply is `vectors`.
std::vector<item_outcome> embed_tei(const std::vector<shared_item>& items,
                                    const std::vector<std::vector<double>>& vectors,
                                    const endpoint_options& opts = {}) {
  auto call = prepare_call(api_kind::tei, opts, items);
  return parse_reply(api_kind::tei, opts, call, items, json(vectors).dump());
}

/// The inputs an embedding call sends.
std::vector<std::string> embedding_inputs(const std::vector<shared_item>& items,
                                          const endpoint_options& opts = {}) {
  auto call = prepare_call(api_kind::tei, opts, items);
  return json::parse(call.body)["inputs"].get<std::vector<std::string>>();
}

} // namespace

// ---- api kinds -----------------------------------------------------------------------------

TEST(RemoteCodec, TheUsageOfAnAnswerThatCannotBeUsedIsStillRead) {
  // One completion for n = 4 (a server capping n): refused, and billed all the same.
  EXPECT_EQ(reply_usage(R"({"choices": [{"text": "a"}],
                            "usage": {"prompt_tokens": 48, "completion_tokens": 256}})"),
            (std::pair<uint64_t, uint64_t>{48, 256}));
  EXPECT_EQ(reply_usage(R"({"choices": []})"), (std::pair<uint64_t, uint64_t>{0, 0}));
  EXPECT_EQ(reply_usage("<html>busy</html>"), (std::pair<uint64_t, uint64_t>{0, 0}));
  EXPECT_EQ(reply_usage(R"([1, 2])"), (std::pair<uint64_t, uint64_t>{0, 0}));
}

TEST(RemoteCodec, ApiKindNamesRoundTrip) {
  for (auto k : {api_kind::openai, api_kind::tei, api_kind::ig_service}) {
    EXPECT_EQ(parse_api_kind(to_string(k)), k);
  }
  EXPECT_EQ(parse_api_kind("OpenAI"), std::nullopt);
  EXPECT_EQ(parse_api_kind(""), std::nullopt);
}

TEST(RemoteCodec, SupportsTheDocumentedKinds) {
  for (const char* kind : {"chat", "generate", "embedding"}) {
    EXPECT_TRUE(supports(api_kind::openai, kind)) << kind;
  }
  for (const char* kind : {"nli", "info_gain", "judge", "lexical"}) {
    EXPECT_FALSE(supports(api_kind::openai, kind)) << kind;
  }
  for (const char* kind : {"embedding", "nli"}) {
    EXPECT_TRUE(supports(api_kind::tei, kind)) << kind;
  }
  for (const char* kind : {"chat", "generate", "judge", "info_gain"}) {
    EXPECT_FALSE(supports(api_kind::tei, kind)) << kind;
  }
  EXPECT_TRUE(supports(api_kind::ig_service, "info_gain"));
  for (const char* kind : {"embedding", "nli", "generate", "chat"}) {
    EXPECT_FALSE(supports(api_kind::ig_service, kind)) << kind;
  }
}

TEST(RemoteCodec, PrepareRefusesBadBatches) {
  endpoint_options opts;
  EXPECT_THROW(prepare_call(api_kind::openai, opts, {}), std::invalid_argument);
  EXPECT_THROW(prepare_call(api_kind::openai, opts, {nullptr}), std::invalid_argument);
  EXPECT_THROW(prepare_call(api_kind::tei, opts, one_chat_item()), std::invalid_argument);
  // judge is a graph now; the codec serves its chat calls.
  EXPECT_THAT(invalid_argument_message([&] {
                prepare_call(api_kind::openai, opts, {make_item("judge", "a", {"b"})});
              }),
              HasSubstr("'judge' is not served by api 'openai'"));
  EXPECT_THROW(prepare_call(api_kind::openai, opts,
                            {make_item("embedding", "a", {"b"}), one_chat_item()[0]}),
               std::invalid_argument);
  for (const char* kind : {"chat", "generate"}) {
    EXPECT_THAT(invalid_argument_message([&] {
                  prepare_call(api_kind::openai, opts,
                               {call_item(kind, prompt_call("a")), call_item(kind, prompt_call("b"))});
                }),
                HasSubstr("carries one item, not 2"))
      << kind;
    EXPECT_THAT(invalid_argument_message([&] {
                  prepare_call(api_kind::openai, opts, {make_item(kind, "a", {})});
                }),
                HasSubstr("no model call"))
      << kind;
    EXPECT_THAT(invalid_argument_message([&] {
                  prepare_call(api_kind::openai, opts, {call_item(kind, prompt_call("a", 0))});
                }),
                HasSubstr("n = 0"))
      << kind;
  }
  EXPECT_THAT(invalid_argument_message([&] {
                prepare_call(api_kind::tei, opts, {make_item("nli", "a", {})});
              }),
              HasSubstr("no model call"));
  EXPECT_THAT(invalid_argument_message([&] {
                prepare_call(api_kind::ig_service, opts, {make_item("embedding", "a", {"b"})});
              }),
              HasSubstr("'embedding' is not served by api 'ig_service'"));
}

TEST(RemoteCodec, ParseRefusesItemsThatDoNotMatchTheCall) {
  endpoint_options opts;
  auto items = one_chat_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  std::vector<shared_item> two{items[0], items[0]};
  EXPECT_THROW(parse_reply(api_kind::openai, opts, call, two, chat_reply({"REWARD: 1"})),
               std::invalid_argument);
  std::vector<shared_item> embeddings{make_item("embedding", "a", {"b"})};
  EXPECT_THROW(parse_reply(api_kind::openai, opts, call, embeddings, R"({"data":[]})"),
               std::invalid_argument);
  // An embedding call whose spans do not match its items' references.
  std::vector<shared_item> filtered{
    make_item("embedding", "a", {"b", "c"}, R"({"target_gt":"c"})")};
  auto unfiltered = prepare_call(api_kind::tei, opts, {make_item("embedding", "a", {"b", "c"})});
  EXPECT_THROW(parse_reply(api_kind::tei, opts, unfiltered, filtered, "[[1],[1],[1]]"),
               std::invalid_argument);
}

TEST(RemoteCodec, RequestBodiesSurviveInvalidUtf8) {
  auto call = prepare_call(api_kind::tei, endpoint_options{},
                           {make_item("embedding", "bad \xff byte", {"ok"})});
  auto body = json::parse(call.body);
  EXPECT_EQ(body["inputs"][1], "ok");
}

// ---- token estimates -----------------------------------------------------------------------
// The scheduler paces a provider's token bucket with `estimate_prompt_tokens` and
// `estimate_completion_tokens` (common/token_estimate.hpp) before the call is built; these
// tests hold that estimate against the bodies the codec really sends.

namespace {

uint64_t estimate_of(const std::vector<shared_item>& items, uint64_t default_max_tokens) {
  uint64_t total = 0;
  for (const auto& item : items) {
    total += estimate_prompt_tokens(*item) + estimate_completion_tokens(*item, default_max_tokens);
  }
  return total;
}

} // namespace

TEST(RemoteCodec, TextTokenEstimateIsTheLargerOfWordsAndThirds) {
  EXPECT_EQ(estimate_text_tokens(""), 0u);
  EXPECT_EQ(estimate_text_tokens("a b c d"), 4u);        // 4 words, 7 bytes -> 3
  EXPECT_EQ(estimate_text_tokens("abcdefg"), 3u);        // 1 word, ceil(7 / 3)
  EXPECT_EQ(estimate_text_tokens("\xe4\xbd\xa0\xe5\xa5\xbd"), 2u);  // 6 bytes of CJK
  EXPECT_EQ(estimate_text_tokens(" \t\n "), 2u);         // no words, 4 bytes
}

TEST(RemoteCodec, ALocalModelsWorkCountsEachTextCappedAtItsLongestInput) {
  auto words = [](size_t n) {
    std::string text;
    for (size_t i = 0; i < n; ++i) {
      text += i == 0 ? "ab" : " ab"; // 3 bytes a word: 4 tokens per 3 words bind
    }
    return text;
  };
  score_item item;
  item.kind = "embedding";
  item.solution_str = words(30);        // 40 tokens and 2 special ones: 42 + 42^2 / 512
  // 4,002 tokens capped at 256: 256 + 128, and its 3,746 tokens past the cap are read by the
  // tokenizer, 128 a unit.
  item.ground_truth = {words(3000)};
  EXPECT_EQ(estimate_model_work(item, 256), 42u + 3u + 256u + 128u + 29u);
  item.ground_truth.assign(8, words(3000));
  EXPECT_EQ(estimate_model_work(item, 256), 45u + 8u * 413u) << "each reference is encoded";
  EXPECT_GT(estimate_model_work(item, 0), 8u * 4000u) << "no cap: each text at its length";
  // An NLI call: its premise and hypothesis are one input.
  score_item pair;
  pair.kind = "nli";
  model_call call;
  call.prompt = words(30);
  call.hypothesis = words(3);
  pair.call = std::make_shared<const model_call>(call);
  EXPECT_EQ(estimate_model_work(pair, 512), 46u + 46u * 46u / 512u);
  // CJK: about a token a character; 2 characters, 6 bytes.
  item.solution_str = "\xe6\x95\xb0\xe5\xad\xa6";
  item.ground_truth = {};
  EXPECT_EQ(estimate_model_work(item, 256), 4u);
}

TEST(RemoteCodec, ItemEstimatesNeverBelowWhatAProviderCountsOfTheBody) {
  endpoint_options opts;
  opts.max_tokens = 300;
  const std::vector<std::string> texts{
    "", "a", "a b c d e f g h i j", "word " + std::string(500, 'x'),
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87", "x\ny\tz  w"};
  for (const auto& text : texts) {
    for (const char* kind : {"chat", "generate"}) {
      for (bool completions : {false, true}) {
        opts.use_completions = completions;
        std::vector<shared_item> items{call_item(kind, prompt_call(text, 3))};
        auto call = prepare_call(api_kind::openai, opts, items);
        auto body = json::parse(call.body);
        auto prompt = body.contains("prompt") ? body["prompt"].get<std::string>()
                                              : body["messages"][0]["content"].get<std::string>();
        // The fake provider counts words + max_tokens * n; a BPE tokenizer rarely beats
        // 3 bytes a token.
        auto estimate = estimate_of(items, opts.max_tokens);
        EXPECT_GE(estimate, whitespace_words(prompt) + 3 * opts.max_tokens) << text;
        EXPECT_GE(estimate, (prompt.size() + 2) / 3 + 3 * opts.max_tokens) << text;
      }
    }
    std::vector<shared_item> items{make_item("embedding", text, {text, "ref " + text}),
                                   make_item("embedding", "other", {text})};
    opts.model = "qwen3-embedding-0.6b";  // the instruction counts too
    auto call = prepare_call(api_kind::openai, opts, items);
    opts.model.clear();
    size_t words = 0;
    size_t thirds = 0;
    // Named: iterating `json::parse(...)["input"]` read the parsed document after the end of
    // its full expression (ASan: heap-use-after-free).
    const auto body = json::parse(call.body);
    for (const auto& input : body["input"]) {
      words += whitespace_words(input.get<std::string>());
      thirds += (input.get<std::string>().size() + 2) / 3;
    }
    EXPECT_GE(estimate_of(items, 0), words) << text;
    EXPECT_GE(estimate_of(items, 0), thirds) << text;
  }
}

TEST(RemoteCodec, ChatAndGenerateEstimatesArePromptPlusMaxTokensTimesN) {
  auto chat = call_item("chat", prompt_call("one two", 4));
  EXPECT_EQ(estimate_prompt_tokens(*chat), 3u + chat_message_overhead_tokens);  // ceil(7 / 3)
  EXPECT_EQ(estimate_completion_tokens(*chat, 100), 400u);  // the source's max_tokens x n
  auto with_max = prompt_call("one two", 2);
  with_max.max_tokens = 7;
  auto generate = call_item("generate", with_max);
  EXPECT_EQ(estimate_prompt_tokens(*generate), 3u);
  EXPECT_EQ(estimate_completion_tokens(*generate, 100), 14u);  // the call's own max_tokens
}

TEST(RemoteCodec, ConversationEstimateCoversEveryMessage) {
  model_call c;
  c.messages = R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}])";
  c.n = 2;
  auto item = call_item("chat", c);
  auto body = json::parse(prepare_call(api_kind::openai, endpoint_options{}, {item}).body);
  uint64_t counted = 0;
  for (const auto& m : body["messages"]) {
    counted += whitespace_words(m["content"].get<std::string>()) + 4;  // OpenAI: ~4 per message
  }
  EXPECT_GE(estimate_prompt_tokens(*item), counted);
  EXPECT_EQ(estimate_completion_tokens(*item, 10), 20u);
}

TEST(RemoteCodec, RewardItemEstimateCountsEveryTextAndATemplate) {
  auto item = make_item("info_gain", "one two three", {"four", "five six"}, R"({"question":"seven"})");
  // one two three / four / five six / {"question":"seven"} (20 bytes: 7) + the template.
  EXPECT_EQ(estimate_prompt_tokens(*item), 5u + 2u + 3u + 7u + item_template_tokens);
  EXPECT_EQ(estimate_completion_tokens(*item, 0), 0u);
}

TEST(RemoteCodec, EmbeddingRewardEstimateCountsTheTextsItsCallSends) {
  // Its call embeds the candidate (after an instruction, for some models) and the references,
  // not its extra_info: a template's 64 tokens in the estimate made the ratio learned on short
  // texts 0.34 where long ones need 0.5.
  auto item = make_item("embedding", "one two three", {"four", "five six"},
                        R"({"question":"seven"})");
  EXPECT_EQ(estimate_prompt_tokens(*item), 5u + 2u + 3u + embedding_instruction_tokens);
  item = make_item("embedding", "one two three", {"four", "five six"}, {},
                   R"({"instruction":"Find the same answer"})"); // 38 bytes: 13
  EXPECT_EQ(estimate_prompt_tokens(*item), 5u + 2u + 3u + 13u + embedding_instruction_tokens);
}

TEST(RemoteCodec, NliEstimateCountsBothTexts) {
  model_call pair;
  pair.prompt = "one two three";
  pair.hypothesis = "four";
  EXPECT_EQ(estimate_prompt_tokens(*call_item("nli", pair)), 5u + 2u);
}

// ---- chat ----------------------------------------------------------------------------------

TEST(RemoteCodec, ChatRequestTakesTheCallsSettingsOverTheSources) {
  auto opts = source_settings();
  model_call c = prompt_call("Grade it.", 4);
  c.model = "call-model";
  c.temperature = 1.0;
  c.top_p = 0.95;
  c.max_tokens = 64;
  c.enable_thinking = false;
  c.stop = {"END"};
  c.seed = 42;
  auto call = prepare_call(api_kind::openai, opts, {call_item("chat", c)});
  EXPECT_EQ(call.path, "/v1/chat/completions");
  auto body = json::parse(call.body);
  EXPECT_EQ(body["model"], "call-model");
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0], (json{{"role", "user"}, {"content", "Grade it."}}));
  EXPECT_EQ(body["temperature"], 1.0);
  EXPECT_EQ(body["top_p"], 0.95);
  EXPECT_EQ(body["max_tokens"], 64);
  EXPECT_EQ(body["n"], 4);
  EXPECT_EQ(body["stop"], json::array({"END"}));
  EXPECT_EQ(body["seed"], 42);
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", false}}));
  EXPECT_FALSE(body.contains("prompt"));
  EXPECT_FALSE(body.contains("logprobs"));
}

TEST(RemoteCodec, APassThroughClientsOtherFieldsJoinTheBody) {
  model_call c = prompt_call("Grade it.", 1);
  c.enable_thinking = false;
  c.extra_body = R"({"chat_template_kwargs":{"custom":1},"logit_bias":{"7":-100},"top_k":5})";
  auto body = json::parse(prepare_call(api_kind::openai, {}, {call_item("chat", c)}).body);
  EXPECT_EQ(body["top_k"], 5);
  EXPECT_EQ(body["logit_bias"], (json{{"7", -100}}));
  // The template's keys join the one Arbiter sets.
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", false}, {"custom", 1}}));
  EXPECT_EQ(body["n"], 1);
}

TEST(RemoteCodec, ASeedIsSentAsTheSignedIntegerItCameAs) {
  // A client's seed -1 was kept as 2^64 - 1 and sent so: vLLM refuses a seed past 2^63 - 1.
  model_call c = prompt_call("Grade it.", 1);
  c.seed = static_cast<uint64_t>(int64_t{-1});
  auto body = json::parse(prepare_call(api_kind::openai, {}, {call_item("chat", c)}).body);
  ASSERT_TRUE(body["seed"].is_number_integer());
  EXPECT_EQ(body["seed"].get<int64_t>(), -1);
  EXPECT_FALSE(body["seed"].is_number_unsigned());
  c.seed = uint64_t{1} << 63;
  body = json::parse(prepare_call(api_kind::openai, {}, {call_item("generate", c)}).body);
  EXPECT_EQ(body["seed"].get<int64_t>(), std::numeric_limits<int64_t>::min());
}

TEST(RemoteCodec, ChatRequestFallsBackToTheSourcesSettings) {
  auto opts = source_settings();
  auto call = prepare_call(api_kind::openai, opts, one_chat_item());
  auto body = json::parse(call.body);
  EXPECT_EQ(body["model"], "source-model");
  EXPECT_EQ(body["temperature"], 0.5);
  EXPECT_EQ(body["top_p"], 0.9);
  EXPECT_EQ(body["max_tokens"], 256);
  EXPECT_EQ(body["n"], 1);
  EXPECT_EQ(body["stop"], json::array({"\n\n\n"}));
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", true}}));
  EXPECT_FALSE(body.contains("seed"));
}

TEST(RemoteCodec, ChatRequestLeavesUnsetOptionsOut) {
  auto call = prepare_call(api_kind::openai, endpoint_options{}, one_chat_item());
  auto body = json::parse(call.body);
  EXPECT_FALSE(body.contains("model"));
  EXPECT_FALSE(body.contains("stop"));
  EXPECT_FALSE(body.contains("seed"));
  EXPECT_FALSE(body.contains("chat_template_kwargs"));
  EXPECT_EQ(body["max_tokens"], 1024);
}

TEST(RemoteCodec, AReasoningModelGetsMaxCompletionTokensAndNoSampling) {
  // o1/o3/o4-mini/gpt-5 answer 400 "Unsupported parameter: 'max_tokens'" and refuse a
  // temperature but their own: every judge call failed.
  for (const char* model : {"o4-mini", "o1", "openai/o3-2025-04-16", "gpt-5", "GPT-5-mini"}) {
    auto opts = source_settings();
    opts.model = model;
    auto body = json::parse(prepare_call(api_kind::openai, opts, one_chat_item()).body);
    EXPECT_EQ(body["max_completion_tokens"], 256) << model;
    EXPECT_FALSE(body.contains("max_tokens")) << model;
    EXPECT_FALSE(body.contains("temperature")) << model;
    EXPECT_FALSE(body.contains("top_p")) << model;
  }
  for (const char* model : {"gpt-4o", "gpt-5-chat-latest", "o1x", "Qwen/Qwen3-32B", "omni"}) {
    EXPECT_FALSE(is_reasoning_model(model)) << model;
  }
  // The source's setting wins over the name, both ways.
  auto opts = source_settings();
  opts.model = "my-deployment";
  opts.reasoning_model = true;
  auto body = json::parse(prepare_call(api_kind::openai, opts, one_chat_item()).body);
  EXPECT_EQ(body["max_completion_tokens"], 256);
  opts.model = "o4-mini";
  opts.reasoning_model = false;
  body = json::parse(prepare_call(api_kind::openai, opts, one_chat_item()).body);
  EXPECT_EQ(body["max_tokens"], 256);
  EXPECT_EQ(body["temperature"], 0.5);
}

TEST(RemoteCodec, AQwenJudgesThinkingIsOffUnlessAskedAsTheSeedJudgeSends) {
  // The seed judge sends enable_thinking false whenever its model names a Qwen.
  endpoint_options opts;
  opts.model = "Qwen/Qwen3-32B";
  auto body = json::parse(prepare_call(api_kind::openai, opts, one_chat_item()).body);
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", false}}));
  model_call c = prompt_call("Grade it.", 1);
  c.model = "qwen3-8b-judge";
  body =
    json::parse(prepare_call(api_kind::openai, endpoint_options{}, {call_item("chat", c)}).body);
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", false}}));
  // Asked for, by the call or the source: as asked.
  c.enable_thinking = true;
  body = json::parse(prepare_call(api_kind::openai, opts, {call_item("chat", c)}).body);
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", true}}));
  opts.enable_thinking = true;
  body = json::parse(prepare_call(api_kind::openai, opts, one_chat_item()).body);
  EXPECT_EQ(body["chat_template_kwargs"], (json{{"enable_thinking", true}}));
  // Another model, or a client's own conversation (the pass-through route): nothing added.
  opts = endpoint_options{};
  opts.model = "gpt-4o-mini";
  body = json::parse(prepare_call(api_kind::openai, opts, one_chat_item()).body);
  EXPECT_FALSE(body.contains("chat_template_kwargs"));
  model_call conversation;
  conversation.messages = R"([{"role":"user","content":"hi"}])";
  opts.model = "Qwen/Qwen3-32B";
  body = json::parse(
    prepare_call(api_kind::openai, opts, {call_item("chat", conversation)}).body);
  EXPECT_FALSE(body.contains("chat_template_kwargs"));
}

TEST(RemoteCodec, ChatViaCompletionsSendsAPromptAndNoChatTemplate) {
  endpoint_options opts;
  opts.model = "m";
  opts.use_completions = true;
  model_call c = prompt_call("Grade it.", 2);
  c.enable_thinking = true;
  c.seed = 7;
  auto call = prepare_call(api_kind::openai, opts, {call_item("chat", c)});
  EXPECT_EQ(call.path, "/v1/completions");
  auto body = json::parse(call.body);
  EXPECT_EQ(body["prompt"], "Grade it.");
  EXPECT_FALSE(body.contains("messages"));
  EXPECT_FALSE(body.contains("chat_template_kwargs"));
  EXPECT_EQ(body["n"], 2);
  EXPECT_EQ(body["seed"], 7);
}

TEST(RemoteCodec, ChatReplyGivesEveryChoiceInIndexOrder) {
  endpoint_options opts;
  auto items = one_chat_item(3);
  auto call = prepare_call(api_kind::openai, opts, items);
  json choices = json::array();
  for (int i : {2, 0, 1}) {
    choices.push_back({{"index", i},
                       {"message", {{"role", "assistant"}, {"content", "vote " + std::to_string(i)}}}});
  }
  auto outcomes = parse_reply(api_kind::openai, opts, call, items,
                              json{{"choices", choices}}.dump());
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_EQ(outcomes[0].score, 0.0);  // the graph scores; the codec only reads
  ASSERT_NE(outcomes[0].output, nullptr);
  ASSERT_EQ(outcomes[0].output->texts.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(outcomes[0].output->texts[i].text, "vote " + std::to_string(i));
  }
}

TEST(RemoteCodec, ChatReplyKeepsTheTextsAsTheyAre) {
  endpoint_options opts;
  auto items = one_chat_item(2);
  auto call = prepare_call(api_kind::openai, opts, items);
  // No index: the reply's order. No stripping, no think removal, extra choices kept.
  auto body = R"({"choices":[{"message":{"content":"<think>x</think>\nREWARD: 1 "}},)"
              R"({"message":{"content":""}},{"message":{"content":"third"}}]})";
  auto outcomes = parse_reply(api_kind::openai, opts, call, items, body);
  ASSERT_EQ(outcomes[0].code, errc::none);
  ASSERT_EQ(outcomes[0].output->texts.size(), 3u);
  EXPECT_EQ(outcomes[0].output->texts[0].text, "<think>x</think>\nREWARD: 1 ");
  EXPECT_EQ(outcomes[0].output->texts[1].text, "");
  EXPECT_EQ(outcomes[0].output->texts[2].text, "third");
}

TEST(RemoteCodec, ChatViaCompletionsReadsChoiceText) {
  endpoint_options opts;
  opts.use_completions = true;
  auto items = one_chat_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  auto outcomes = parse_reply(api_kind::openai, opts, call, items,
                              R"({"object":"text_completion","choices":[{"text":" REWARD: 1"}]})");
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_EQ(outcomes[0].output->texts.at(0).text, " REWARD: 1");
  // A chat-shaped reply is unusable for a completions call.
  EXPECT_THROW(parse_reply(api_kind::openai, opts, call, items, chat_reply({"REWARD: 1"})),
               bad_reply);
}

TEST(RemoteCodec, ChatNullContentIsAnItemFailure) {
  endpoint_options opts;
  auto items = one_chat_item();
  auto call = prepare_call(api_kind::openai, opts, items);
  auto null_content = parse_reply(
    api_kind::openai, opts, call, items,
    R"({"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"length"}]})");
  EXPECT_EQ(null_content[0].code, errc::reward_failed);
  EXPECT_EQ(null_content[0].error, "judge reply has no content (finish_reason length)");
  EXPECT_EQ(null_content[0].output, nullptr);
  auto refused = parse_reply(
    api_kind::openai, opts, call, items,
    R"({"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't grade"}}]})");
  EXPECT_EQ(refused[0].code, errc::reward_failed);
  EXPECT_EQ(refused[0].error, "judge refused: \"I can't grade\"");
  // The refusal is quoted up to 80 bytes, cut on a code point boundary.
  std::string refusal = std::string(79, 'a') + "\xc3\xa9" + "tail";
  auto long_refusal = parse_reply(
    api_kind::openai, opts, call, items,
    json{{"choices", {{{"message", {{"content", nullptr}, {"refusal", refusal}}}}}}}.dump());
  EXPECT_THAT(long_refusal[0].error, HasSubstr("\"" + std::string(79, 'a') + "\"..."));
  // With several choices, one null content fails the item and says which.
  auto votes = one_chat_item(2);
  auto votes_call = prepare_call(api_kind::openai, opts, votes);
  auto partial = parse_reply(
    api_kind::openai, opts, votes_call, votes,
    R"({"choices":[{"index":0,"message":{"content":"REWARD: 1"}},)"
    R"({"index":1,"message":{"content":null},"finish_reason":"length"}]})");
  EXPECT_EQ(partial[0].code, errc::reward_failed);
  EXPECT_EQ(partial[0].error, "judge reply has no content in choices[1] (finish_reason length)");
}

TEST(RemoteCodec, APassThroughChatReplyIsKeptAsTheProviderGaveIt) {
  // helper-43: a vLLM reasoning model cut off while it reasoned (content null,
  // reasoning_content, finish_reason length), or a refusal, failed the /v1/chat/completions
  // call as a judge's (422): the route passes replies on.
  endpoint_options opts;
  auto item = std::make_shared<score_item>(*one_chat_item()[0]);
  item->reward = std::string{passthrough_chat_reward};
  std::vector<shared_item> items{item};
  auto call = prepare_call(api_kind::openai, opts, items);
  auto cut = parse_reply(api_kind::openai, opts, call, items,
                         R"({"choices":[{"message":{"role":"assistant","content":null,)"
                         R"("reasoning_content":"Let me think"},"finish_reason":"length"}]})");
  ASSERT_EQ(cut[0].code, errc::none) << cut[0].error;
  const auto& text = cut[0].output->texts.at(0);
  EXPECT_TRUE(text.no_content);
  EXPECT_EQ(text.reasoning, "Let me think");
  EXPECT_EQ(text.finish_reason, "length");
  auto refused = parse_reply(
    api_kind::openai, opts, call, items,
    R"({"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't"}}]})");
  ASSERT_EQ(refused[0].code, errc::none) << refused[0].error;
  EXPECT_EQ(refused[0].output->texts.at(0).refusal, "I can't");
  auto both = parse_reply(api_kind::openai, opts, call, items,
                          R"({"choices":[{"message":{"content":"4","reasoning_content":"2+2"}}]})");
  EXPECT_EQ(both[0].output->texts.at(0).text, "4");
  EXPECT_EQ(both[0].output->texts.at(0).reasoning, "2+2") << "kept beside the content";
  EXPECT_FALSE(both[0].output->texts.at(0).no_content);
}

TEST(RemoteCodec, AChoiceTheContentFilterWithheldIsAnEmptyTextNotAFailure) {
  // Azure filters choice by choice: content null or absent, finish_reason content_filter. The
  // other choices keep their texts; nothing is a bad reply (which would count against the
  // source).
  endpoint_options opts;
  auto votes = one_chat_item(3);
  auto call = prepare_call(api_kind::openai, opts, votes);
  auto out = parse_reply(
    api_kind::openai, opts, call, votes,
    R"({"choices":[{"index":0,"message":{"content":"REWARD: 1"},"finish_reason":"stop"},)"
    R"({"index":1,"message":{"role":"assistant","content":null},"finish_reason":"content_filter"},)"
    R"({"index":2,"message":{"role":"assistant"},"finish_reason":"content_filter"}]})");
  ASSERT_EQ(out[0].code, errc::none) << out[0].error;
  ASSERT_EQ(out[0].output->texts.size(), 3u);
  EXPECT_EQ(out[0].output->texts[0].text, "REWARD: 1");
  for (size_t i : {1u, 2u}) {
    EXPECT_EQ(out[0].output->texts[i].text, "");
    EXPECT_EQ(out[0].output->texts[i].finish_reason, "content_filter");
  }
}

TEST(RemoteCodec, ChatUnusableBodiesThrowBadReply) {
  endpoint_options opts;
  auto items = one_chat_item(2);
  auto call = prepare_call(api_kind::openai, opts, items);
  auto parse = [&](std::string_view body) {
    return bad_reply_message([&] { parse_reply(api_kind::openai, opts, call, items, body); });
  };
  EXPECT_THAT(parse("{\"choices\": [trunc"), HasSubstr("reply to /v1/chat/completions is not valid JSON"));
  EXPECT_THAT(parse(""), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse("[]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse("{}"), HasSubstr("no choices"));
  EXPECT_THAT(parse(R"({"choices":[]})"), HasSubstr("no choices"));
  EXPECT_THAT(parse(R"({"choices":[7]})"), HasSubstr("choices[0] is not an object"));
  EXPECT_THAT(parse(chat_reply({"only one"})), HasSubstr("1 choices for n = 2"));
  EXPECT_THAT(parse(R"({"choices":[{"text":"a"},{"text":"b"}]})"), HasSubstr("no message"));
  EXPECT_THAT(parse(R"({"choices":[{"message":{"content":"a"}},{"message":{"content":[1]}}]})"),
              HasSubstr("choices[1] content is not a string"));
  EXPECT_THAT(parse(R"({"choices":[{"message":{"role":"assistant"}},{"message":{"content":"b"}}]})"),
              HasSubstr("no content"));
  EXPECT_THAT(parse(R"({"choices":[{"index":0,"message":{"content":"a"}},)"
                    R"({"index":0,"message":{"content":"b"}}]})"),
              HasSubstr("repeats choice index 0"));
  // The body is quoted, cut at 120 characters, with unprintable bytes as '?'.
  auto long_body = "<html>\x01" + std::string(300, 'h');
  auto message = parse(long_body);
  EXPECT_THAT(message, HasSubstr("\"<html>?hhh"));
  EXPECT_THAT(message, Not(HasSubstr(std::string(120, 'h'))));
  EXPECT_THAT(message, HasSubstr(std::string(113, 'h') + "\"..."));
}

// ---- generate ------------------------------------------------------------------------------

TEST(RemoteCodec, GenerateRequestAsksForLogprobs) {
  endpoint_options opts;
  opts.model = "generator";
  opts.max_tokens = 512;
  opts.temperature = 0.3;
  opts.top_p = 0.8;  // a source's judge sampling; generate sends top_p only when asked
  opts.stop = {"judge stop"};
  opts.enable_thinking = true;
  model_call c = prompt_call("Answer the following question as briefly as possible.\n"
                             "Question: who?\nAnswer:",
                             10);
  c.temperature = 1.0;
  c.max_tokens = 128;
  c.stop = {"\n", "Question:"};
  auto call = prepare_call(api_kind::openai, opts, {call_item("generate", c)});
  EXPECT_EQ(call.path, "/v1/completions");
  auto body = json::parse(call.body);
  EXPECT_EQ(body, (json{{"model", "generator"},
                        {"prompt", c.prompt},
                        {"n", 10},
                        {"temperature", 1.0},
                        {"max_tokens", 128},
                        {"stop", {"\n", "Question:"}},
                        {"logprobs", 1}}));

  c.top_p = 0.95;
  c.seed = 3;
  c.model = "other";
  c.temperature.reset();
  c.max_tokens.reset();
  c.stop.clear();
  body = json::parse(prepare_call(api_kind::openai, opts, {call_item("generate", c)}).body);
  EXPECT_EQ(body["model"], "other");
  EXPECT_EQ(body["top_p"], 0.95);
  EXPECT_EQ(body["seed"], 3);
  EXPECT_EQ(body["temperature"], 0.3);
  EXPECT_EQ(body["max_tokens"], 512);
  EXPECT_FALSE(body.contains("stop"));  // the source's stop list is the judge's
  EXPECT_FALSE(body.contains("chat_template_kwargs"));
}

TEST(RemoteCodec, GenerateReplyGivesStrippedTextsAndMeanLogprobs) {
  endpoint_options opts;
  std::vector<shared_item> items{call_item("generate", prompt_call("Q", 3))};
  auto call = prepare_call(api_kind::openai, opts, items);
  json choices = json::array();
  choices.push_back(completion_choice(2, "\t\xc2\xa0Paris\xe3\x80\x80 ", {-0.25}));
  choices.push_back(completion_choice(0, " London\n", {-0.5, nullptr, -1.5}));
  choices.push_back(completion_choice(1, "  the  answer ", {nullptr, -0.1, -0.2, -0.3}));
  auto outcomes = parse_reply(api_kind::openai, opts, call, items, completion_reply(choices));
  ASSERT_EQ(outcomes.size(), 1u);
  ASSERT_EQ(outcomes[0].code, errc::none);
  const auto& texts = outcomes[0].output->texts;
  ASSERT_EQ(texts.size(), 3u);
  EXPECT_EQ(texts[0].text, "London");
  EXPECT_DOUBLE_EQ(texts[0].mean_logprob, -1.0);
  EXPECT_EQ(texts[0].tokens, 2u);
  EXPECT_EQ(texts[1].text, "the  answer");
  EXPECT_DOUBLE_EQ(texts[1].mean_logprob, (-0.1 - 0.2 - 0.3) / 3);
  EXPECT_EQ(texts[1].tokens, 3u);
  EXPECT_EQ(texts[2].text, "Paris");  // NBSP and U+3000 are Python whitespace
  EXPECT_DOUBLE_EQ(texts[2].mean_logprob, -0.25);
  EXPECT_EQ(texts[2].tokens, 1u);
  EXPECT_EQ(outcomes[0].output->prompt_tokens, 0u) << "no usage in this reply";
  // A completions reply's usage is the call's tokens (step accounts and token pacing).
  auto with_usage = json::parse(completion_reply(choices));
  with_usage["usage"] = {{"prompt_tokens", 21}, {"completion_tokens", 9}, {"total_tokens", 30}};
  auto counted = parse_reply(api_kind::openai, opts, call, items, with_usage.dump());
  EXPECT_EQ(counted[0].output->prompt_tokens, 21u);
  EXPECT_EQ(counted[0].output->model, "") << "the reply named no model";
  with_usage["model"] = "qwen3-8b-2026-05";
  EXPECT_EQ(parse_reply(api_kind::openai, opts, call, items, with_usage.dump())[0].output->model,
            "qwen3-8b-2026-05");
  EXPECT_EQ(counted[0].output->completion_tokens, 9u);
}

TEST(RemoteCodec, GenerateUnusableBodiesThrowBadReply) {
  endpoint_options opts;
  std::vector<shared_item> items{call_item("generate", prompt_call("Q", 2))};
  auto call = prepare_call(api_kind::openai, opts, items);
  auto parse = [&](const json& choices) {
    return bad_reply_message([&] {
      parse_reply(api_kind::openai, opts, call, items, completion_reply(choices));
    });
  };
  auto good = completion_choice(0, "a", {-0.1});
  EXPECT_THAT(parse(json::array({good})), HasSubstr("1 choices for n = 2"));
  EXPECT_THAT(parse(json::array({good, completion_choice(1, "b", {}), completion_choice(2, "c", {-1})})),
              HasSubstr("3 choices for n = 2"));
  EXPECT_THAT(parse(json::array({good, completion_choice(1, "b", json::array())})),
              HasSubstr("completion choice 1 has no token_logprobs (does the server return "
                        "logprobs?)"));
  EXPECT_THAT(parse(json::array({good, completion_choice(1, "b", {nullptr, nullptr})})),
              HasSubstr("completion choice 1 has no token_logprobs"));
  // An empty text with an empty list: the server sends logprobs, but not the stop token's.
  EXPECT_THAT(parse(json::array({good, completion_choice(1, "", json::array())})),
              HasSubstr("completion choice 1 has an empty token_logprobs list (a sample of no "
                        "tokens"));
  json no_logprobs = {{"index", 1}, {"text", "b"}, {"logprobs", nullptr}};
  EXPECT_THAT(parse(json::array({good, no_logprobs})),
              HasSubstr("completion choice 1 has no token_logprobs"));
  EXPECT_THAT(parse(json::array({good, completion_choice(1, "b", {"x"})})),
              HasSubstr("neither a number nor null"));
  json no_text = {{"index", 1}, {"logprobs", {{"token_logprobs", {-1}}}}};
  EXPECT_THAT(parse(json::array({good, no_text})), HasSubstr("completion choice 1 has no text"));
  EXPECT_THAT(parse(json::array({good, completion_choice(0, "b", {-1})})),
              HasSubstr("repeats choice index 0"));
  EXPECT_THAT(parse(json::array({good, completion_choice(5, "b", {-1})})),
              HasSubstr("completion choice 1 has index 5"));
  EXPECT_THAT(bad_reply_message([&] {
                parse_reply(api_kind::openai, opts, call, items, "{\"choices\":");
              }),
              HasSubstr("reply to /v1/completions is not valid JSON"));
}

// ---- nli -----------------------------------------------------------------------------------

namespace {

std::vector<shared_item> nli_items(size_t count) {
  std::vector<shared_item> items;
  for (size_t i = 0; i < count; ++i) {
    model_call pair;
    pair.prompt = "premise " + std::to_string(i);
    pair.hypothesis = "hypothesis " + std::to_string(i);
    items.push_back(call_item("nli", pair));
  }
  return items;
}

std::vector<item_outcome> nli(const std::vector<shared_item>& items, std::string_view body) {
  auto call = prepare_call(api_kind::tei, endpoint_options{}, items);
  return parse_reply(api_kind::tei, endpoint_options{}, call, items, body);
}

std::string nli_error(const std::vector<shared_item>& items, std::string_view body) {
  return bad_reply_message([&] { nli(items, body); });
}

} // namespace

TEST(RemoteCodec, NliRequestSendsEveryPair) {
  endpoint_options opts;
  opts.model = "never-sent";
  auto call = prepare_call(api_kind::tei, opts, nli_items(3));
  EXPECT_EQ(call.path, "/predict");
  EXPECT_EQ(json::parse(call.body).dump(),
            R"({"inputs":[["premise 0","hypothesis 0"],["premise 1","hypothesis 1"],)"
            R"(["premise 2","hypothesis 2"]],"truncate":true})");
  // One pair is still a list of pairs.
  EXPECT_EQ(json::parse(prepare_call(api_kind::tei, opts, nli_items(1)).body).dump(),
            R"({"inputs":[["premise 0","hypothesis 0"]],"truncate":true})");
}

TEST(RemoteCodec, NliReplyMapsLabelsWhateverTheirCaseOrOrder) {
  auto outcomes = nli(nli_items(3),
                      R"([[{"label":"ENTAILMENT","score":0.7},{"label":"Neutral","score":0.2},)"
                      R"({"label":"contradiction","score":0.1}],)"
                      R"([{"label":"contradict","score":0.4},{"label":"entail","score":0.6}],)"
                      R"([{"label":"Entailment","score":1}]])");
  ASSERT_EQ(outcomes.size(), 3u);
  for (const auto& o : outcomes) {
    EXPECT_EQ(o.code, errc::none);
    ASSERT_NE(o.output, nullptr);
  }
  EXPECT_DOUBLE_EQ(outcomes[0].output->entailment, 0.7);
  EXPECT_DOUBLE_EQ(outcomes[0].output->neutral, 0.2);
  EXPECT_DOUBLE_EQ(outcomes[0].output->contradiction, 0.1);
  EXPECT_DOUBLE_EQ(outcomes[1].output->entailment, 0.6);
  EXPECT_DOUBLE_EQ(outcomes[1].output->neutral, 0.0);
  EXPECT_DOUBLE_EQ(outcomes[1].output->contradiction, 0.4);
  EXPECT_DOUBLE_EQ(outcomes[2].output->entailment, 1.0);
  EXPECT_DOUBLE_EQ(outcomes[2].output->contradiction, 0.0);
}

TEST(RemoteCodec, NliSinglePairMayComeBackAsABareList) {
  auto outcomes = nli(nli_items(1), R"([{"label":"neutral","score":0.5},)"
                                    R"({"label":"entailment","score":0.3},)"
                                    R"({"label":"contradiction","score":0.2}])");
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_DOUBLE_EQ(outcomes[0].output->entailment, 0.3);
  EXPECT_DOUBLE_EQ(outcomes[0].output->neutral, 0.5);
  EXPECT_EQ(nli(nli_items(1), R"([[{"label":"entailment","score":0.3}]])")[0].output->entailment,
            0.3);
  // Two pairs must come back as two lists.
  EXPECT_THAT(nli_error(nli_items(2), R"([{"label":"entailment","score":0.3},)"
                                      R"({"label":"neutral","score":0.7}])"),
              HasSubstr("NLI result 0 is not a list of labels"));
}

TEST(RemoteCodec, NliWithoutAnEntailmentLabelNamesTheLabelsSeen) {
  auto message = nli_error(nli_items(1), R"([[{"label":"LABEL_0","score":0.1},)"
                                         R"({"label":"LABEL_1","score":0.2},)"
                                         R"({"label":"LABEL_2","score":0.7}]])");
  EXPECT_THAT(message, HasSubstr("NLI result 0 has no entailment label (labels: LABEL_0, "
                                 "LABEL_1, LABEL_2)"));
  EXPECT_THAT(message, HasSubstr("id2label"));
  auto plain = nli_error(nli_items(1), R"([[{"label":"neutral","score":1}]])");
  EXPECT_THAT(plain, HasSubstr("(labels: neutral)"));
  EXPECT_THAT(plain, Not(HasSubstr("id2label")));
  EXPECT_THAT(nli_error(nli_items(1), "[[]]"), HasSubstr("(labels: none)"));
}

TEST(RemoteCodec, NliUnusableBodiesThrowBadReply) {
  EXPECT_THAT(nli_error(nli_items(2), R"([[{"label":"entailment","score":1}]])"),
              HasSubstr("1 results for 2 pairs"));
  EXPECT_THAT(nli_error(nli_items(1), R"({"label":"entailment","score":1})"),
              HasSubstr("NLI reply is not a list"));
  EXPECT_THAT(nli_error(nli_items(1), R"([[{"label":"entailment"}]])"),
              HasSubstr("entailment entry has no numeric score"));
  EXPECT_THAT(nli_error(nli_items(1), "[[1]]"), HasSubstr("not an object"));
  EXPECT_THAT(nli_error(nli_items(1), "[]"), HasSubstr("0 results for 1 pairs"));
  EXPECT_THAT(nli_error(nli_items(1), "[[{\"label\""), HasSubstr("reply to /predict is not valid JSON"));
}

// ---- embedding -----------------------------------------------------------------------------

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
  // A text past the model's length is cut, as sentence-transformers and the local embedder
  // do, not refused with a 413 (which failed its item to the fallback).
  EXPECT_EQ(tei_body, (json{{"inputs", body["input"]}, {"truncate", true}}));
}

TEST(RemoteCodec, EmbeddingSendsOnlyTheFilteredReferences) {
  std::vector<shared_item> items{
    // target_gt from extra_info.
    make_item("embedding", "c0", {"Paris", "Lyon", "Nice"}, R"({"target_gt":["Nice","Lyon"]})"),
    // filter_gt_by_prompt_token from the reward's options, the prompt from extra_info.
    make_item("embedding", "c1", {"Paris is big", "Berlin, the capital", "berlin"},
              R"({"prompt":"Tell me about Berlin"})", R"({"filter_gt_by_prompt_token":true})"),
    // A filter that keeps nothing is ignored.
    make_item("embedding", "c2", {"x", "y"}, R"({"target_gt":"z"})")};
  endpoint_options opts;
  auto call = prepare_call(api_kind::tei, opts, items);
  EXPECT_EQ(json::parse(call.body)["inputs"],
            json::array({"c0", "Lyon", "Nice", "c1", "Berlin, the capital", "berlin", "c2", "x",
                         "y"}));
  ASSERT_EQ(call.spans.size(), 3u);
  EXPECT_EQ(call.spans[0].first, 0u);
  EXPECT_EQ(call.spans[0].references, 2u);
  EXPECT_EQ(call.spans[1].first, 3u);
  EXPECT_EQ(call.spans[1].references, 2u);
  EXPECT_EQ(call.spans[2].first, 6u);
  EXPECT_EQ(call.spans[2].references, 2u);

  // The spans lead each item to its own vectors.
  std::vector<std::vector<double>> vectors{{1, 0}, {0, 1}, {1, 1},   // c0: best Nice
                                           {0, 1}, {1, 0}, {-1, 0},  // c1: cos 0 and 0
                                           {1, 0}, {-1, 0}, {1, 0}}; // c2: best y
  auto outcomes = parse_reply(api_kind::tei, opts, call, items, json(vectors).dump());
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_NEAR(outcomes[0].score, unit(cosine({1, 0}, {1, 1})), 1e-12);
  EXPECT_NEAR(outcomes[1].score, unit(0.0), 1e-12);
  EXPECT_NEAR(outcomes[2].score, 1.0, 1e-12);
}

TEST(RemoteCodec, EmbeddingInstructionWrapsTheCandidateOnly) {
  std::vector<shared_item> plain{make_item("embedding", "cand", {"ref"})};
  endpoint_options qwen;
  qwen.model = "Qwen/QWEN3-Embedding-0.6B";
  EXPECT_EQ(embedding_inputs(plain, qwen),
            (std::vector<std::string>{
              "Instruct: Retrieve semantically similar text\nQuery:cand", "ref"}));
  EXPECT_EQ(embedding_inputs(plain), (std::vector<std::string>{"cand", "ref"}));
  std::vector<shared_item> custom{
    make_item("embedding", "cand", {"ref"}, {}, R"({"instruction":"Find the same answer"})")};
  EXPECT_EQ(embedding_inputs(custom),
            (std::vector<std::string>{"Instruct: Find the same answer\nQuery:cand", "ref"}));
  std::vector<shared_item> off{make_item("embedding", "cand", {"ref"}, R"({"instruction":""})",
                                         R"({"instruction":"from options"})")};
  EXPECT_EQ(embedding_inputs(off, qwen), (std::vector<std::string>{"cand", "ref"}));
  // The length penalty compares the candidate's own words, not the instruction's.
  std::vector<shared_item> penalized{
    make_item("embedding", "a b", {"x y"}, {}, R"({"length_penalty":"ratio"})")};
  auto outcomes = embed_tei(penalized, {{1, 0}, {1, 0}}, qwen);
  EXPECT_DOUBLE_EQ(outcomes[0].score, 1.0);
}

TEST(RemoteCodec, EmbeddingScoreIsUnitCosineOfTheBestReferenceTimesItsLengthPenalty) {
  const std::string ten_words = "one two three four five six seven eight nine ten";
  const std::vector<double> c{1, 2, 0};
  const std::vector<double> long_ref{1, 2, 1};   // the higher cosine
  const std::vector<double> short_ref{2, 1, 0};  // lower cosine, no penalty
  ASSERT_GT(cosine(c, long_ref), cosine(c, short_ref));
  // ratio: 2 candidate words against 10: 0.2 (outside [1/1.5, 1.5]).
  auto items = std::vector<shared_item>{
    make_item("embedding", "a b", {"x y", ten_words}, {}, R"({"length_penalty":"ratio"})")};
  auto outcomes = embed_tei(items, {c, short_ref, long_ref});
  ASSERT_EQ(outcomes[0].code, errc::none);
  EXPECT_NEAR(outcomes[0].score, unit(cosine(c, long_ref)) * 0.2, 1e-12);

  // Each penalty kind, with 2 words against 10 (ratio 0.2).
  const double r = 0.2;
  const std::vector<std::pair<const char*, double>> kinds{
    {"none", 1.0},
    {"ratio", r},
    {"sqrt", std::sqrt(r)},
    {"log", std::log(3.0) / std::log(11.0)},
    {"quadratic", r * r},
    {"exponential", std::exp(-(1 - r))}};
  for (const auto& [kind, factor] : kinds) {
    auto one = std::vector<shared_item>{make_item(
      "embedding", "a b", {ten_words}, json{{"length_penalty", kind}}.dump())};
    EXPECT_NEAR(embed_tei(one, {c, long_ref})[0].score, unit(cosine(c, long_ref)) * factor, 1e-12)
      << kind;
  }
  // length_threshold widens the band without penalty: 2/10 = 0.2 >= 1/5.
  auto wide = std::vector<shared_item>{make_item(
    "embedding", "a b", {ten_words}, R"({"length_penalty":"ratio","length_threshold":5})")};
  EXPECT_NEAR(embed_tei(wide, {c, long_ref})[0].score, unit(cosine(c, long_ref)), 1e-12);
}

TEST(RemoteCodec, EmbeddingTiesGoToTheFirstReference) {
  const std::string ten_words = "one two three four five six seven eight nine ten";
  auto items = std::vector<shared_item>{make_item("embedding", "a b", {ten_words, "x y"}, {},
                                                  R"({"length_penalty":"ratio"})")};
  auto outcomes = embed_tei(items, {{1, 0}, {1, 1}, {2, 2}});
  EXPECT_NEAR(outcomes[0].score, unit(std::sqrt(0.5)) * 0.2, 1e-12);
}

TEST(RemoteCodec, EmbeddingDimensionsKeepTheFirstValues) {
  auto with_dims = [](uint32_t d) {
    return std::vector<shared_item>{
      make_item("embedding", "c", {"r"}, json{{"dimensions", d}}.dump())};
  };
  const std::vector<double> c{1, 0, 1, 0};
  const std::vector<double> r{1, 0, -1, 5};
  EXPECT_NEAR(embed_tei(with_dims(0), {c, r})[0].score, unit(cosine(c, r)), 1e-12);
  EXPECT_NEAR(embed_tei(with_dims(4), {c, r})[0].score, unit(cosine(c, r)), 1e-12);
  EXPECT_NEAR(embed_tei(with_dims(3), {c, r})[0].score, unit(cosine(c, r, 3)), 1e-12);
  EXPECT_NEAR(embed_tei(with_dims(2), {c, r})[0].score, 1.0, 1e-12);
  auto too_many = embed_tei(with_dims(5), {c, r})[0];
  EXPECT_EQ(too_many.code, errc::reward_failed);
  EXPECT_EQ(too_many.error, "dimensions 5 is more than the embedding's 4");
  auto zero_prefix = embed_tei(with_dims(2), {{0, 0, 1, 1}, r})[0];
  EXPECT_EQ(zero_prefix.code, errc::reward_failed);
  EXPECT_THAT(zero_prefix.error, HasSubstr("solution_str is a zero vector"));
}

TEST(RemoteCodec, OpenAiEmbeddingReplyScoresByIndex) {
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
  EXPECT_NEAR(outcomes[0].score, (std::sqrt(0.5) + 1) / 2, 1e-12);
  EXPECT_EQ(outcomes[1].code, errc::none);
  EXPECT_NEAR(outcomes[1].score, 0.0, 1e-12);
}

TEST(RemoteCodec, TeiEmbeddingReplyIsAListInOrder) {
  std::vector<shared_item> items{make_item("embedding", "same", {"the same"}),
                                 make_item("embedding", "none", {})};
  auto outcomes = embed_tei(items, {{0.6, 0.8}, {0.6, 0.8}, {1, 0}});
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_NEAR(outcomes[0].score, 1.0, 1e-12);
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_EQ(outcomes[1].error, "embedding needs at least one reference in ground_truth");
}

TEST(RemoteCodec, ARepeatedTextIsSentOnceAndItsVectorServesEachPlace) {
  // A GRPO group's rollouts share their reference: the provider is asked (and paid) for it
  // once. A candidate equal to a reference is the same text too.
  std::vector<shared_item> items{make_item("embedding", "r0", {"ref"}),
                                 make_item("embedding", "r1", {"ref"}),
                                 make_item("embedding", "ref", {"ref", "other"})};
  endpoint_options opts;
  auto call = prepare_call(api_kind::openai, opts, items);
  EXPECT_EQ(json::parse(call.body)["input"], json::array({"r0", "ref", "r1", "other"}));
  EXPECT_EQ(call.input_count, 4u);
  ASSERT_EQ(call.spans.size(), 3u);
  EXPECT_EQ(call.spans[1].first, 2u) << "spans count every text, repeats included";
  EXPECT_EQ(call.spans[2].first, 4u);
  EXPECT_EQ(embedding_inputs(items), (std::vector<std::string>{"r0", "ref", "r1", "other"}));
  json data = json::array();
  const std::vector<std::vector<double>> sent{{1, 0}, {0.6, 0.8}, {0, 1}, {1, 0}};
  for (size_t i = 0; i < sent.size(); ++i) {
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", sent[i]}});
  }
  auto outcomes = parse_reply(api_kind::openai, opts, call, items,
                              json{{"object", "list"}, {"data", data}}.dump());
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_NEAR(outcomes[0].score, unit(0.6), 1e-12);
  EXPECT_NEAR(outcomes[1].score, unit(0.8), 1e-12);
  EXPECT_NEAR(outcomes[2].score, 1.0, 1e-12) << "its candidate is its first reference";
  // A reply with a vector per place, as before repeats were dropped, does not fit the call.
  EXPECT_THROW(embed_tei(items, {{1, 0}, {0.6, 0.8}, {0, 1}, {0.6, 0.8}, {1, 0}, {0.6, 0.8},
                                 {1, 0}}),
               bad_reply);
}

TEST(RemoteCodec, AnEmbeddingCallOverTheInputCapGoesInPartsWhoseRepliesJoinAsOne) {
  // An item with more references than TEI takes in a call (32) went alone and was refused.
  std::vector<std::string> refs;
  for (int i = 0; i < 40; ++i) {
    refs.push_back("alias " + std::to_string(i));
  }
  std::vector<shared_item> items{make_item("embedding", "candidate", refs)};
  for (auto api : {api_kind::tei, api_kind::openai}) {
    endpoint_options opts;
    auto call = prepare_call(api, opts, items);
    ASSERT_EQ(call.input_count, 41u);
    EXPECT_EQ(split_embedding_call(call, 41), std::vector<std::string>{call.body});
    EXPECT_EQ(split_embedding_call(call, 0), std::vector<std::string>{call.body});
    auto parts = split_embedding_call(call, 16);
    ASSERT_EQ(parts.size(), 3u);
    const char* key = api == api_kind::tei ? "inputs" : "input";
    json all = json::array();
    for (const auto& part : parts) {
      auto body = json::parse(part);
      EXPECT_LE(body[key].size(), 16u);
      if (api == api_kind::tei) {
        EXPECT_EQ(body["truncate"], true) << "each part keeps the call's other fields";
      }
      all.insert(all.end(), body[key].begin(), body[key].end());
    }
    EXPECT_EQ(all, json::parse(call.body)[key]);
    // Each part answered on its own, indexes from 0; the reference "alias 7" matches best.
    std::vector<std::string> replies;
    size_t at = 0;
    for (const auto& part : parts) {
      const auto n = json::parse(part)[key].size();
      json vectors = json::array();
      json data = json::array();
      for (size_t i = 0; i < n; ++i, ++at) {
        json v = at == 0 || at == 8 ? json{1.0, 0.0} : json{0.0, 1.0};
        vectors.push_back(v);
        data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", v}});
      }
      replies.push_back(api == api_kind::tei
                          ? vectors.dump()
                          : json{{"object", "list"}, {"data", data}, {"model", "m"},
                                 {"usage", {{"prompt_tokens", 10}, {"total_tokens", 10}}}}
                              .dump());
    }
    auto joined = join_embedding_replies(api, replies);
    auto outcomes = parse_reply(api, opts, call, items, joined);
    ASSERT_EQ(outcomes.size(), 1u);
    EXPECT_EQ(outcomes[0].code, errc::none) << outcomes[0].error;
    EXPECT_NEAR(outcomes[0].score, 1.0, 1e-12);
    if (api == api_kind::openai) {
      EXPECT_EQ(json::parse(joined)["usage"]["prompt_tokens"], 30) << "the parts' usage summed";
      ASSERT_NE(outcomes[0].output, nullptr);
      EXPECT_EQ(outcomes[0].output->prompt_tokens, 30u);
    }
    // A part that is not its API's shape comes back as it was, for parse_reply to refuse.
    replies[1] = R"({"error": "overloaded"})";
    EXPECT_EQ(join_embedding_replies(api, replies), replies[1]);
    EXPECT_THROW(parse_reply(api, opts, call, items, replies[1]), bad_reply);
  }
}

TEST(RemoteCodec, AnEmbeddingCallsUsageIsSharedOutOverItsItemsAndAddsUpToIt) {
  // OpenAI reports one prompt_tokens for the call. Each distinct text gets a part by its
  // estimated tokens (a repeat gets none), so the step accounts and costs equal the bill.
  const std::string long_text = "a rollout of many more words than the others have in it";
  std::vector<shared_item> items{make_item("embedding", long_text, {"the reference"}),
                                 make_item("embedding", "short", {"the reference"}),
                                 call_item("embedding", prompt_call("a passed-through text"))};
  endpoint_options opts;
  auto call = prepare_call(api_kind::openai, opts, items);
  ASSERT_EQ(call.input_count, 4u);
  json data = json::array();
  for (size_t i = 0; i < 4; ++i) {
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", {1.0, 0.5}}});
  }
  for (uint32_t billed : {101u, 7u, 1u}) {
    json reply{{"object", "list"}, {"data", data},
               {"usage", {{"prompt_tokens", billed}, {"total_tokens", billed}}}};
    auto outcomes = parse_reply(api_kind::openai, opts, call, items, reply.dump());
    ASSERT_EQ(outcomes.size(), 3u);
    uint64_t sum = 0;
    for (const auto& o : outcomes) {
      ASSERT_NE(o.output, nullptr);
      sum += o.output->prompt_tokens;
    }
    EXPECT_EQ(sum, billed);
    if (billed == 101u) {
      // The long rollout's part is the largest; the shared reference counts once, with it.
      EXPECT_GT(outcomes[0].output->prompt_tokens, outcomes[1].output->prompt_tokens);
      EXPECT_GT(outcomes[1].output->prompt_tokens, 0u);
      EXPECT_GT(outcomes[2].output->prompt_tokens, 0u);
      EXPECT_EQ(outcomes[2].output->embedding.size(), 2u) << "the pass-through keeps its vector";
    }
  }
  // Without usage (TEI's /embed), the reward items carry no count, as before.
  json reply{{"object", "list"}, {"data", data}};
  auto outcomes = parse_reply(api_kind::openai, opts, call, items, reply.dump());
  EXPECT_EQ(outcomes[0].output, nullptr);
  EXPECT_EQ(outcomes[2].output->prompt_tokens, 0u);
}

TEST(RemoteCodec, ZeroEmbeddingIsAnItemFailure) {
  std::vector<shared_item> items{make_item("embedding", "a", {"b"}),
                                 make_item("embedding", "c", {"d"})};
  auto outcomes = embed_tei(items, {{0, 0}, {1, 0}, {1, 0}, {0, 0}});
  EXPECT_EQ(outcomes[0].code, errc::reward_failed);
  EXPECT_THAT(outcomes[0].error, HasSubstr("zero vector"));
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_THAT(outcomes[1].error, HasSubstr("every reference is a zero vector"));
}

TEST(RemoteCodec, EmbeddingsAtTheEdgesOfDoublesRangeScoreTheirCosine) {
  // Norms of such vectors overflow (1e200² = inf) or underflow (1e-200² = 0) when taken
  // directly: the cosine was NaN (an "ok" item with no score) or "a zero vector".
  std::vector<shared_item> items{make_item("embedding", "huge", {"huge ref"}),
                                 make_item("embedding", "tiny", {"tiny ref"}),
                                 make_item("embedding", "mixed", {"mixed ref"})};
  auto outcomes = embed_tei(items, {{1e200, 1e200}, {3e200, 3e200},
                                    {1e-200, 0.0}, {0.0, 2e-320},
                                    {0.6, 0.8}, {1e200, 0.0}});
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].code, errc::none) << outcomes[0].error;
  EXPECT_NEAR(outcomes[0].score, 1.0, 1e-12);
  EXPECT_EQ(outcomes[1].code, errc::none) << outcomes[1].error;
  EXPECT_NEAR(outcomes[1].score, unit(0.0), 1e-12);
  EXPECT_EQ(outcomes[2].code, errc::none) << outcomes[2].error;
  EXPECT_NEAR(outcomes[2].score, unit(0.6), 1e-12);
}

TEST(RemoteCodec, AnEmbeddingThatIsNotFiniteFailsItsItemNamingIt) {
  // JSON cannot carry one, but a local model can produce one (half precision overflows).
  std::vector<shared_item> items{make_item("embedding", "a", {"b"}),
                                 make_item("embedding", "c", {"d", "e"})};
  auto inputs = backends::embedding_texts(items, "m");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto outcomes = backends::score_embeddings(items, "m", inputs,
                                   {{nan, 1.0}, {1.0, 0.0}, {1.0, 0.0}, {1.0, 0.0}, {0.0, -inf}});
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].code, errc::reward_failed);
  EXPECT_THAT(outcomes[0].error, HasSubstr("solution_str holds a value that is not finite"));
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_THAT(outcomes[1].error, HasSubstr("ground_truth[1] holds a value that is not finite"));
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

// ---- info gain -----------------------------------------------------------------------------

TEST(RemoteCodec, InfoGainRequestTakesFieldsFromTheMergedOptions) {
  std::vector<shared_item> items{
    make_item("info_gain", "sol", {"a1", "a2"}, R"({"question":"q","context":"ctx"})"),
    make_item("info_gain", "sol2", {"b"}, R"({"problem":"p"})"),
    make_item("info_gain", "sol3", {}, ""),
    make_item("info_gain", "sol4", {"d"}, R"({"context":"from extra_info"})",
              R"({"question":"from options","context":"from options"})")};
  auto call = prepare_call(api_kind::ig_service, endpoint_options{}, items);
  EXPECT_EQ(call.path, "/compute_info_gain");
  auto body = json::parse(call.body);
  ASSERT_EQ(body["items"].size(), 4u);
  EXPECT_EQ(body["items"][0],
            (json{{"question", "q"}, {"context", "ctx"}, {"answers", {"a1", "a2"}}}));
  EXPECT_EQ(body["items"][1],
            (json{{"question", "p"}, {"context", "sol2"}, {"answers", {"b"}}}));
  EXPECT_EQ(body["items"][2],
            (json{{"question", ""}, {"context", "sol3"}, {"answers", json::array()}}));
  EXPECT_EQ(body["items"][3], (json{{"question", "from options"},
                                    {"context", "from extra_info"},
                                    {"answers", {"d"}}}));
}

TEST(RemoteCodec, InfoGainReplyGivesScoresDetailsAndPerItemErrors) {
  endpoint_options opts;
  std::vector<shared_item> items{make_item("info_gain", "s", {"a"}, R"({"question":"q"})"),
                                 make_item("info_gain", "s", {}),
                                 make_item("info_gain", "s", {"a"})};
  auto call = prepare_call(api_kind::ig_service, opts, items);
  auto outcomes = parse_reply(
    api_kind::ig_service, opts, call, items,
    R"({"scores":[0.25,null,-0.5],"errors":[null,"items[1].answers: must not be empty",null],
        "details":[{"with_context":0.5, "without_context":0.25,"samples":[{"text":"x"}]},null,7]})");
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].code, errc::none);
  EXPECT_DOUBLE_EQ(outcomes[0].score, 0.25);
  EXPECT_EQ(outcomes[0].detail,
            R"({"samples":[{"text":"x"}],"with_context":0.5,"without_context":0.25})");
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_THAT(outcomes[1].error, HasSubstr("items[1].answers: must not be empty"));
  EXPECT_EQ(outcomes[1].detail, "");
  EXPECT_EQ(outcomes[2].code, errc::none);
  EXPECT_DOUBLE_EQ(outcomes[2].score, -0.5);
  EXPECT_EQ(outcomes[2].detail, "");  // not an object
  // Without errors or details lists the outcomes still say what happened.
  auto bare = parse_reply(api_kind::ig_service, opts, call, items, R"({"scores":[0.5,null,0]})");
  EXPECT_EQ(bare[0].detail, "");
  EXPECT_EQ(bare[1].code, errc::reward_failed);
  EXPECT_THAT(bare[1].error, HasSubstr("no score"));
}

TEST(RemoteCodec, InfoGainLeavesOutVariantsTheServiceDoesNotCompute) {
  endpoint_options opts;
  std::vector<shared_item> items{
    make_item("info_gain", "s0", {"a"}),
    make_item("info_gain", "s1", {"a"}, R"({"variant":"se_rao"})", R"({"variant":"soft"})"),
    make_item("info_gain", "s2", {"a"}, R"({"variant":"soft"})", R"({"variant":"hard"})")};
  auto call = prepare_call(api_kind::ig_service, opts, items);
  auto body = json::parse(call.body);
  ASSERT_EQ(body["items"].size(), 2u);
  EXPECT_EQ(body["items"][0]["context"], "s0");
  EXPECT_EQ(body["items"][1]["context"], "s2");
  auto outcomes = parse_reply(api_kind::ig_service, opts, call, items,
                              R"({"scores":[0.1,0.2],"details":[{"k":0},{"k":2}]})");
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_DOUBLE_EQ(outcomes[0].score, 0.1);
  EXPECT_EQ(outcomes[0].detail, R"({"k":0})");
  EXPECT_EQ(outcomes[1].code, errc::reward_failed);
  EXPECT_EQ(outcomes[1].error,
            "the IG service computes only variant soft; ask for variant 'se_rao' from a reward "
            "with generate and nli sources");
  EXPECT_DOUBLE_EQ(outcomes[2].score, 0.2);
  EXPECT_EQ(outcomes[2].detail, R"({"k":2})");
  EXPECT_THAT(bad_reply_message([&] {
                parse_reply(api_kind::ig_service, opts, call, items, R"({"scores":[0.1,0.2,0.3]})");
              }),
              HasSubstr("3 scores for 2 items"));
  // A batch with nothing to send is refused whole.
  EXPECT_THAT(invalid_argument_message([&] {
                prepare_call(api_kind::ig_service, opts,
                             {make_item("info_gain", "s", {"a"}, R"({"variant":"hard"})")});
              }),
              HasSubstr("computes only variant soft; ask for variant 'hard'"));
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

TEST(RemoteCodec, ErrorMessageRedactsTheSourcesOwnKeyBeforeTheCut) {
  // A short key with no pattern of its own, straddling the 200-byte cut: redacted after the
  // cut, its first four characters were left ("... key: hunt...").
  const std::string key = "hunter2hunter2";
  const std::string message = std::string(192, 'x') + " key: " + key + " is wrong";
  auto body = json{{"error", {{"message", message}}}}.dump();
  auto out = error_message(body, key);
  EXPECT_EQ(out.find("hunt"), std::string::npos) << out;
  EXPECT_NE(out.find(" key: ["), std::string::npos) << out;
}

TEST(RemoteCodec, ErrorMessageFallsBackToThePrintableBody) {
  EXPECT_EQ(error_message(""), "(empty body)");
  EXPECT_EQ(error_message(" \n"), "(empty body)");
  EXPECT_EQ(error_message("upstream connect error"), "upstream connect error");
  EXPECT_EQ(error_message("bad\x01\xc3\xa9\n"), "bad????");
  EXPECT_EQ(error_message(std::string(300, 'x')), std::string(160, 'x') + "...");
  // JSON without a known message is quoted as text.
  EXPECT_EQ(error_message(R"({"error":{"code":500}})"), R"({"error":{"code":500}})");
  EXPECT_EQ(error_message(R"({"detail":[{"loc":["x"]}]})"), R"({"detail":[{"loc":["x"]}]})");
  EXPECT_EQ(error_message("[1,2]"), "[1,2]");
  // A long JSON message is cut on a code point boundary.
  auto long_message = error_message(json{{"message", std::string(199, 'm') + "\xc3\xa9"}}.dump());
  EXPECT_EQ(long_message, std::string(199, 'm') + "...");
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

TEST(RemoteCodec, ExtractJudgeScoreReadsTheWrappingsJudgesWriteAroundTheNumber) {
  // Each of these failed its vote; the seed read every one.
  EXPECT_EQ(extract_judge_score("REWARD: `0.9`"), 0.9);
  EXPECT_EQ(extract_judge_score("REWARD: \"0.9\""), 0.9);
  EXPECT_EQ(extract_judge_score("REWARD: (0.9)"), 0.9);
  EXPECT_EQ(extract_judge_score("REWARD: $0.9$"), 0.9);
  EXPECT_EQ(extract_judge_score("REWARD: \\boxed{0.9}"), 0.9);
  EXPECT_EQ(extract_judge_score("REWARD: $\\boxed{0.9}$"), 0.9);
  EXPECT_EQ(extract_judge_score(R"({"reward": 0.8, "reason": "close"})"), 0.8);
  EXPECT_EQ(extract_judge_score(R"({'REWARD': '0.8'})"), 0.8);
  EXPECT_EQ(extract_judge_score("REWARD\xEF\xBC\x9A" "0.8"), 0.8) << "full-width colon";
  EXPECT_EQ(extract_judge_score("REWARD\xEF\xBC\x9A\xE3\x80\x80" "0.6"), 0.6)
    << "and an ideographic space";
  EXPECT_EQ(extract_judge_score("REWARD:\xC2\xA0" "0.7"), 0.7) << "no-break space";
  // A restated format line still gives no number.
  EXPECT_EQ(extract_judge_score("Answer as REWARD: (a number between 0 and 1)"), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD: \"<score>\""), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD: \\boxed{}"), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD\xEF\xBC\x9Ahigh"), std::nullopt);
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

TEST(RemoteCodec, ExtractJudgeScoreReadsRealisticJudgeReplies) {
  // Thinking models: a closed block, an unclosed one, a block opened by the template.
  EXPECT_EQ(extract_judge_score("<think>\nThe candidate says x = 4. Would REWARD: 1 be too "
                                "generous? No.\n</think>\n\nThe answer matches the reference.\n"
                                "REWARD: 0.9"),
            0.9);
  EXPECT_EQ(extract_judge_score("<think>Let me check the algebra... 2x = 8, so REWARD: 0.3 "
                                "maybe"),
            std::nullopt);
  EXPECT_EQ(extract_judge_score("Okay, checking the steps. REWARD: 0.1 at first glance.\n"
                                "</think>\nFinal verdict: correct.\nREWARD: 0.6"),
            0.6);
  EXPECT_EQ(extract_judge_score("</think>REWARD: 0.45"), 0.45);
  // Prose after the score.
  EXPECT_EQ(extract_judge_score("REWARD: 0.7\n\nExplanation: the candidate skips one step, so "
                                "this is partial credit."),
            0.7);
  // Several REWARD lines: the last wins.
  EXPECT_EQ(extract_judge_score("Draft:\nREWARD: 0.2\nRevised after checking units:\n"
                                "REWARD: 0.4\nFinal answer:\nREWARD: 0.5"),
            0.5);
  // Markdown and other spellings.
  EXPECT_EQ(extract_judge_score("### Verdict\n**REWARD:** 0.8"), 0.8);
  EXPECT_EQ(extract_judge_score("**Reward**: **0.8**"), 0.8);
  EXPECT_EQ(extract_judge_score("Reward = 0.75"), 0.75);
  EXPECT_EQ(extract_judge_score("REWARD: [0.9]"), 0.9);
  EXPECT_EQ(extract_judge_score("`REWARD: 0.35`"), 0.35);
  // Out of range comes back as written; the graph checks the range.
  EXPECT_EQ(extract_judge_score("REWARD: 7"), 7.0);
  EXPECT_EQ(extract_judge_score("REWARD: -1"), -1.0);
  // A fraction: the number after the label, nothing guessed about the scale.
  EXPECT_EQ(extract_judge_score("REWARD: 0.85/1"), 0.85);
  EXPECT_EQ(extract_judge_score("REWARD: 8/10"), 8.0);
  // Unicode around the score.
  EXPECT_EQ(extract_judge_score("\xe8\xaf\x84\xe5\x88\x86\xef\xbc\x9a\xe6\xad\xa3\xe7\xa1\xae\n"
                                "REWARD: 0.65 \xe2\x9c\x85"),
            0.65);  // "评分：正确\nREWARD: 0.65 ✅"
  EXPECT_EQ(extract_judge_score("\xe2\x80\x94 REWARD: 0.3 \xe2\x80\x94"), 0.3);  // — ... —
  EXPECT_EQ(extract_judge_score("\xc3\xa9REWARD: 0.3"), 0.3);  // a non-ASCII letter before it
  // Between the label and the number, Unicode spaces as the seed's `\s` reads them, and a
  // full-width colon; other non-ASCII characters stop the score.
  EXPECT_EQ(extract_judge_score("REWARD\xef\xbc\x9a" "0.5"), 0.5);  // fullwidth colon
  EXPECT_EQ(extract_judge_score("REWARD:\xc2\xa0" "0.5"), 0.5);     // no-break space
  EXPECT_EQ(extract_judge_score("REWARD:\xe2\x80\x94" "0.5"), std::nullopt);  // an em dash
  // Missing scores.
  EXPECT_EQ(extract_judge_score("The candidate is correct."), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD: N/A"), std::nullopt);
  EXPECT_EQ(extract_judge_score("REWARD:"), std::nullopt);
  EXPECT_EQ(extract_judge_score("I would give it a reward of 0.9."), std::nullopt);
}

// ---- pass-through calls (the /v1/chat/completions and /v1/embeddings routes) -------------

TEST(RemoteCodecPassThrough, AConversationIsSentAsItCameAndFinishReasonAndUsageComeBack) {
  model_call c;
  c.messages = R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])";
  c.n = 2;
  auto item = call_item("chat", c);
  endpoint_options opts;
  opts.model = "judge";
  auto call = prepare_call(api_kind::openai, opts, {item});
  EXPECT_EQ(call.path, "/v1/chat/completions");
  auto body = json::parse(call.body);
  EXPECT_EQ(body["messages"], json::parse(c.messages));
  EXPECT_EQ(body["n"], 2);
  auto outcomes = parse_reply(api_kind::openai, opts, call, {item}, R"({"choices":[
      {"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},
      {"index":1,"message":{"role":"assistant","content":"b"},"finish_reason":"length"}],
      "usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}})");
  ASSERT_EQ(outcomes.size(), 1u);
  ASSERT_TRUE(outcomes[0].output);
  const auto& out = *outcomes[0].output;
  ASSERT_EQ(out.texts.size(), 2u);
  EXPECT_EQ(out.texts[1].text, "b");
  EXPECT_EQ(out.texts[0].finish_reason, "stop");
  EXPECT_EQ(out.texts[1].finish_reason, "length");
  EXPECT_EQ(out.prompt_tokens, 12u);
  EXPECT_EQ(out.completion_tokens, 7u);
}

TEST(RemoteCodecPassThrough, AConversationCannotGoToACompletionsOnlySource) {
  model_call c;
  c.messages = R"([{"role":"user","content":"hi"}])";
  endpoint_options opts;
  opts.use_completions = true;
  EXPECT_THROW(prepare_call(api_kind::openai, opts, {call_item("chat", c)}),
               std::invalid_argument);
}

TEST(RemoteCodecPassThrough, EmbeddingCallsShareABatchWithEmbeddingRewardsAndGetVectors) {
  model_call c;
  c.prompt = "raw text";
  auto raw = call_item("embedding", c);
  auto reward = make_item("embedding", "cand", {"ref"});
  endpoint_options opts;
  for (auto api : {api_kind::openai, api_kind::tei}) {
    auto call = prepare_call(api, opts, {raw, reward});
    auto inputs = json::parse(call.body)[api == api_kind::openai ? "input" : "inputs"];
    EXPECT_EQ(inputs, json::parse(R"(["raw text","cand","ref"])"));
    std::string reply = api == api_kind::tei
                          ? R"([[3,4],[1,0],[1,0]])"
                          : R"({"data":[{"index":0,"embedding":[3,4]},{"index":1,"embedding":[1,0]},
                                        {"index":2,"embedding":[1,0]}]})";
    auto outcomes = parse_reply(api, opts, call, {raw, reward}, reply);
    ASSERT_EQ(outcomes.size(), 2u);
    ASSERT_TRUE(outcomes[0].output);
    EXPECT_EQ(outcomes[0].output->embedding, (std::vector<float>{3.0f, 4.0f}));
    EXPECT_FALSE(outcomes[1].output);
    EXPECT_DOUBLE_EQ(outcomes[1].score, 1.0);
  }
}
