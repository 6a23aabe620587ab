#include "net/score_codec.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "actors/cluster.hpp"
#include "actors/replay_writer.hpp"
#include "backends/rewards/reward_options.hpp"
#include "net/http_metrics.hpp"
#include "scheduler/scheduler_metrics.hpp"

using namespace arbiter;
using namespace arbiter::net;

namespace {

class ScoreCodec : public ::testing::Test {
protected:
  ScoreCodec() : catalog_(make_config()) {
    ctx_.catalog = &catalog_;
    ctx_.priorities = {"high", "normal", "low"};
    ctx_.default_priority = 1;
    ctx_.max_batch_items = 4;
  }

  static config::arbiter_config make_config() {
    auto cfg = config::embedded_default();
    config::reward_config squad;
    squad.name = "squad_em";
    squad.kind = "exact_match";
    cfg.rewards["squad_em"] = squad;
    cfg.data_sources["squad*"] = "squad_em";
    return cfg;
  }

  /// Decodes `body` expecting a refusal; returns it.
  codec_error refusal(const std::string& body) {
    score_request_body out;
    codec_error err;
    EXPECT_FALSE(decode_score_request(body, ctx_, out, err)) << body;
    return err;
  }

  backends::reward_catalog catalog_;
  codec_context ctx_;
};

} // namespace

TEST_F(ScoreCodec, DecodesTheIssueExample) {
  std::string body = R"({"items": [
      {"reward": "lexical", "solution_str": "The answer is 4.", "ground_truth": "4"},
      {"reward": "exact_match", "solution_str": "Paris", "ground_truth": ["Paris", "paris, France"],
       "extra_info": {"prompt": "x", "nested": [1, 2]}, "data_source": "geo"}],
    "priority": "high", "deadline_ms": 30000})";
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(body, ctx_, out, err)) << err.message;
  EXPECT_EQ(out.priority, 0u);
  EXPECT_EQ(out.deadline, std::chrono::milliseconds{30000});
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_EQ(out.items[0].kind, "lexical");
  EXPECT_EQ(out.items[0].capability, "cpu");
  EXPECT_EQ(out.items[0].ground_truth, std::vector<std::string>{"4"});
  EXPECT_EQ(out.items[1].ground_truth, (std::vector<std::string>{"Paris", "paris, France"}));
  EXPECT_EQ(out.items[1].data_source, "geo");
  EXPECT_EQ(out.items[1].extra_info, R"({"prompt": "x", "nested": [1, 2]})");
}

TEST_F(ScoreCodec, ExtraInfoMayHoldIntegersPast64Bits) {
  // A trainer's row may carry a Python int id or a 128-bit hash; simdjson's DOM cannot hold
  // them, but they are valid JSON and pass on as given (the options are still read).
  std::string body = R"({"items": [
      {"reward": "lexical", "solution_str": "a", "ground_truth": "b",
       "extra_info": {"id": 123456789012345678901234567890, "neg": -9223372036854775809}},
      {"reward": "gsm8k", "solution_str": "#### 1", "ground_truth": "1",
       "extra_info": {"uuid": 340282366920938463463374607431768211455, "method": "flexible"}}]})";
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(body, ctx_, out, err)) << err.message;
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_EQ(out.items[0].extra_info,
            R"({"id": 123456789012345678901234567890, "neg": -9223372036854775809})");
  EXPECT_EQ(backends::merged_options(out.items[1], backends::option_keys("gsm8k")).at("method"),
            "flexible");
  auto bad = refusal(R"({"items": [{"reward": "gsm8k", "solution_str": "#### 1",
      "ground_truth": "1", "extra_info": {"uuid": 340282366920938463463374607431768211455,
      "method": "loose"}}]})");
  EXPECT_EQ(bad.field, "items[0].extra_info.method");
}

TEST_F(ScoreCodec, ReadsGroupsFromItemsOrTheRequest) {
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(
    R"({"group_id": "p7", "items": [
        {"reward":"lexical","solution_str":"a","ground_truth":"b","group":"uid-1"},
        {"reward":"lexical","solution_str":"a","ground_truth":"b","group":42},
        {"reward":"lexical","solution_str":"a","ground_truth":"b","group":null},
        {"reward":"lexical","solution_str":"a","ground_truth":"b"}]})",
    ctx_, out, err))
    << err.message;
  ASSERT_EQ(out.items.size(), 4u);
  EXPECT_EQ(out.items[0].group, "uid-1");
  EXPECT_EQ(out.items[1].group, "42") << "TRL's prompt index";
  EXPECT_EQ(out.items[2].group, "p7") << "null: the request's group_id";
  EXPECT_EQ(out.items[3].group, "p7");
  EXPECT_EQ(out.items[0].group_deadline_ms, 0u);

  score_request_body big;
  ASSERT_TRUE(decode_score_request(
    R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b",
                   "group":-123456789012345678901234567890 }]})",
    ctx_, big, err))
    << err.message;
  EXPECT_EQ(big.items[0].group, "-123456789012345678901234567890") << "an integer past 64 bits";

  score_request_body timed;
  ASSERT_TRUE(decode_score_request(
    R"({"group_deadline_ms": 5000, "items": [
        {"reward":"lexical","solution_str":"a","ground_truth":"b","group":"g"},
        {"reward":"lexical","solution_str":"a","ground_truth":"b"}]})",
    ctx_, timed, err))
    << err.message;
  EXPECT_EQ(timed.items[0].group_deadline_ms, 5000u);
  EXPECT_EQ(timed.items[1].group_deadline_ms, 0u) << "an item with no group has no group deadline";

  score_request_body stepped;
  ASSERT_TRUE(decode_score_request(
    R"({"step": 17, "items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}]})",
    ctx_, stepped, err))
    << err.message;
  EXPECT_EQ(stepped.items[0].step, "17") << "every item of the request, as text";
}

TEST_F(ScoreCodec, AppliesDefaultsAndDataSourcePrefixes) {
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(
    R"({"items":[{"data_source":"squad_v2","solution_str":"a","ground_truth":"b"}]})", ctx_, out,
    err))
    << err.message;
  EXPECT_EQ(out.priority, 1u);
  EXPECT_EQ(out.deadline, ctx_.default_deadline);
  EXPECT_EQ(out.items[0].reward, "squad_em");
  EXPECT_EQ(out.items[0].kind, "exact_match");
}

TEST_F(ScoreCodec, AnOptionalFieldOfNullIsAbsent) {
  // What a Python client serializing its unset fields sends; `step` and `group_id` took it,
  // `priority` and `deadline_ms` were 400s.
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(
    R"({"items":[{"reward":null,"data_source":"squad_v2","solution_str":"a","ground_truth":"b"},
                 {"reward":"lexical","data_source":null,"solution_str":"a","ground_truth":"b"}],
        "priority":null,"deadline_ms":null,"group_id":null,"group_deadline_ms":null,
        "step":null})",
    ctx_, out, err))
    << err.message;
  EXPECT_EQ(out.priority, 1u);
  EXPECT_EQ(out.deadline, ctx_.default_deadline);
  EXPECT_EQ(out.items[0].reward, "squad_em") << "chosen by its data_source";
  EXPECT_EQ(out.items[1].reward, "lexical");
  EXPECT_EQ(out.items[1].data_source, "");
  EXPECT_EQ(refusal(R"({"items":null})").field, "items");
  EXPECT_EQ(refusal(R"({"items":[{"reward":null,"solution_str":"a","ground_truth":"b"}]})").field,
            "items[0].reward")
    << "no reward and no data_source";
  EXPECT_EQ(refusal(R"({"items":[{"reward":"lexical","solution_str":null,"ground_truth":"b"}]})")
              .field,
            "items[0].solution_str");
}

TEST_F(ScoreCodec, SaysWhatIsWrongWithABodyThatIsNotOneObject) {
  const std::string item = R"({"items":[{"reward":"lexical","solution_str":"a","ground_truth":"b"}]})";
  EXPECT_EQ(refusal("[1]").message, "body: expected a JSON object");
  EXPECT_EQ(refusal(item + " {}").message, "body: trailing content after the JSON object");
  // A truncated body and a scalar after the object were "expected a JSON object".
  for (const auto& body : {item.substr(0, item.size() - 1), item + " x"}) {
    EXPECT_EQ(refusal(body).message,
              "body: malformed JSON (an object or list not closed, or text after the object)")
      << body;
  }
}

TEST_F(ScoreCodec, NamesTheFieldOfEveryProblem) {
  struct bad_case {
    std::string body;
    std::string field;
    unsigned status;
  };
  std::vector<bad_case> cases{
    {R"({"items": [)", "body", 400},
    {R"([1, 2])", "body", 400},
    {R"("text")", "body", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}]} trailing)",
     "body", 400},
    {R"({})", "items", 400},
    {R"({"items": {}})", "items", 400},
    {R"({"items": []})", "items", 400},
    {R"({"items": [1]})", "items[0]", 400},
    {R"({"items": [{"reward":"lexical","ground_truth":"b"}]})", "items[0].solution_str", 400},
    {R"({"items": [{"reward":"lexical","solution_str":5,"ground_truth":"b"}]})",
     "items[0].solution_str", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a"}]})", "items[0].ground_truth", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":["x", true]}]})",
     "items[0].ground_truth[1]", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":["x", null]}]})",
     "items[0].ground_truth[1]", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":[["x"]]}]})",
     "items[0].ground_truth[0]", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":true}]})",
     "items[0].ground_truth", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":null}]})",
     "items[0].ground_truth", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":01}]})",
     "items[0].ground_truth", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":{"x":1}}]})",
     "items[0].ground_truth.target", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":{"target":["x"],"target":["y"]}}]})",
     "items[0].ground_truth.target", 400},
    {R"({"items": [{"reward":"nope","solution_str":"a","ground_truth":"b"}]})",
     "items[0].reward", 400},
    {R"({"items": [{"reward":7,"solution_str":"a","ground_truth":"b"}]})", "items[0].reward",
     400},
    {R"({"items": [{"solution_str":"a","ground_truth":"b"}]})", "items[0].reward", 400},
    {R"({"items": [{"data_source":"unknown_ds","solution_str":"a","ground_truth":"b"}]})",
     "items[0].data_source", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":[1]}]})",
     "items[0].extra_info", 400},
    // Malformed inside: on-demand parsing skips an object it passes on as text without
    // checking it (found by tests/fuzz/score_codec_fuzz).
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": 1, "b"}}]})",
     "items[0].extra_info", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": [1 2]}}]})",
     "items[0].extra_info", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": tru}}]})",
     "items[0].extra_info", 400},
    // A key given twice at any depth: a rule reward would read one, a Python function another.
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": 1, "a": 2}}]})",
     "items[0].extra_info.a", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": [{"x": 1}, {"y": 1, "y": 2}]}}]})",
     "items[0].extra_info.a[1].y", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"": 1, "": 2}}]})",
     R"(items[0].extra_info."")", 400},
    // Numbers: malformed, or past the doubles (an integer past 64 bits is fine, below).
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": 01}}]})",
     "items[0].extra_info", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": 1.}}]})",
     "items[0].extra_info", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": 1e400}}]})",
     "items[0].extra_info", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","extra_info":{"a": 123456789012345678901234567890, "b": 01}}]})",
     "items[0].extra_info", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "priority": "urgent"})",
     "priority", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "priority": 1})",
     "priority", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "deadline_ms": 0})",
     "deadline_ms", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "deadline_ms": "5"})",
     "deadline_ms", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "deadline_ms": 99999999})",
     "deadline_ms", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "priorty": "high"})",
     "priorty", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","group":[1]}]})",
     "items[0].group", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","group":1.5}]})",
     "items[0].group", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","group":1e30}]})",
     "items[0].group", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","group":123456789012345678901234567890.5}]})",
     "items[0].group", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "group_id": true})",
     "group_id", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "step": [3]})",
     "step", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "step": 2.5})",
     "step", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "group_deadline_ms": 0})",
     "group_deadline_ms", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b"}], "group_deadline_ms": "9"})",
     "group_deadline_ms", 400},
    {R"({"items": [{"reward":"lexical","solution_str":"a","ground_truth":"b","group":")"
       + std::string(1025, 'g') + R"("}]})",
     "items[0].group", 400},
  };
  for (const auto& c : cases) {
    auto err = refusal(c.body);
    EXPECT_EQ(err.field, c.field) << c.body << " -> " << err.message;
    EXPECT_EQ(refusal_answer_for(err.why).status, c.status) << c.body;
    EXPECT_EQ(err.message.rfind(c.field, 0), 0u) << "message starts with the field: " << err.message;
  }
}

TEST_F(ScoreCodec, ANumberJsonDoesNotAllowIsMalformedNotOfTheWrongKind) {
  // `01` is no JSON number: "expected a string or an integer" sent the client looking for
  // a type error in a value that was an integer to them.
  const std::string item = R"("items": [{"reward":"lexical","solution_str":"a","ground_truth":"b")";
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
         {"{" + item + R"(}], "step": 01})", "step"},
         {"{" + item + R"(,"group":-01}]})", "items[0].group"},
         {"{" + item + R"(}], "deadline_ms": 0100})", "deadline_ms"},
         {"{" + item + R"(,"group":"g"}], "group_deadline_ms": 05})", "group_deadline_ms"}}) {
    auto err = refusal(body);
    EXPECT_EQ(err.field, field) << body;
    EXPECT_EQ(err.message, field + ": malformed number") << body;
  }
  EXPECT_EQ(refusal("{" + item + R"(}], "step": 2.5})").message,
            "step: expected a string or an integer")
    << "a well-formed float is of the wrong kind";
}

TEST_F(ScoreCodec, AnInfoGainItemMustCarryItsQuestion) {
  // Scored against no question, ΔIG's samples answer nothing: a plausible score that means
  // nothing (/compute_info_gain refused such an item; /v1/score scored it).
  const std::string item = R"({"reward":"info_gain","solution_str":"ctx","ground_truth":["a"])";
  for (const std::string extra : {"", R"(,"extra_info":null)", R"(,"extra_info":{"seed":3})",
                                  R"(,"extra_info":{"question":7})"}) {
    auto err = refusal(R"({"items": [)" + item + extra + "}]}");
    EXPECT_EQ(err.field, "items[0].extra_info.question") << extra;
    EXPECT_EQ(refusal_answer_for(err.why).status, 400u);
  }
  EXPECT_EQ(refusal(R"({"items": [)" + item + "}]}").message,
            "items[0].extra_info.question: required by the info_gain reward (question or "
            "problem: the question its samples answer)");
  // em_info_gain finds its question in the rollout.
  score_request_body em;
  codec_error em_err;
  EXPECT_TRUE(decode_score_request(
    R"({"items": [{"reward":"em_info_gain","solution_str":"c","ground_truth":"a"}]})", ctx_, em,
    em_err))
    << em_err.message;
  for (const std::string extra : {R"({"question":"q?"})", R"({"problem":"q?"})",
                                  R"({"question":""})"}) {
    score_request_body out;
    codec_error err;
    EXPECT_TRUE(decode_score_request(R"({"items": [)" + item + R"(,"extra_info":)" + extra
                                       + "}]}",
                                     ctx_, out, err))
      << extra << ": " << err.message;
  }
}

TEST_F(ScoreCodec, ReadsALoneSurrogateAsTheReplacementCharacter) {
  // What Python's json.dumps writes for a text holding a lone surrogate (a rollout decoded
  // with errors="surrogateescape" or cut inside a pair), and Python's json.loads takes back.
  // It was a 400 for the whole batch; the Python client sends U+FFFD in its place.
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(
    R"({"items": [{"reward":"lexical","solution_str":"ab\ud800\n\u00e9\ud83d\ude00\"",)"
    R"("ground_truth":["\udc80", "x\ud800\ud800\u0041\/"]}]})",
    ctx_, out, err))
    << err.message;
  ASSERT_EQ(out.items.size(), 1u);
  EXPECT_EQ(out.items[0].solution_str, "ab\xEF\xBF\xBD\n\xC3\xA9\xF0\x9F\x98\x80\"");
  EXPECT_EQ(out.items[0].ground_truth,
            (std::vector<std::string>{"\xEF\xBF\xBD", "x\xEF\xBF\xBD\xEF\xBF\xBD" "A/"}));
}

TEST_F(ScoreCodec, NamesAStringWhoseEscapesDoNotDecode) {
  auto err = refusal(
    R"({"items": [{"reward":"lexical","solution_str":"ab\ud800\u12G4","ground_truth":"b"}]})");
  EXPECT_EQ(err.field, "items[0].solution_str");
  EXPECT_EQ(refusal_answer_for(err.why).status, 400);
  EXPECT_NE(err.message.find("invalid string escape"), std::string::npos) << err.message;
  // A value that is no string at all keeps the plain message.
  err = refusal(R"({"items": [{"reward":"lexical","solution_str":7,"ground_truth":"b"}]})");
  EXPECT_EQ(err.message, "items[0].solution_str: expected a string");
}

TEST_F(ScoreCodec, TakesNumbersAsReferencesTheWayPythonsStrWritesThem) {
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(R"({"items": [
      {"reward": "exact_match", "solution_str": "72", "ground_truth": 72},
      {"reward": "exact_match", "solution_str": "x", "ground_truth": [1.0, "two", -0, 1e-05]},
      {"reward": "exact_match", "solution_str": "x", "ground_truth": 123456789012345678901234567890},
      {"reward": "exact_match", "solution_str": "x", "ground_truth": 1E400 }]})",
                                   ctx_, out, err))
    << err.message;
  ASSERT_EQ(out.items.size(), 4u);
  EXPECT_EQ(out.items[0].ground_truth, std::vector<std::string>{"72"});
  EXPECT_EQ(out.items[1].ground_truth,
            (std::vector<std::string>{"1.0", "two", "0", "1e-05"}));
  EXPECT_EQ(out.items[2].ground_truth,
            std::vector<std::string>{"123456789012345678901234567890"});
  EXPECT_EQ(out.items[3].ground_truth, std::vector<std::string>{"inf"});
}

TEST_F(ScoreCodec, ExtraInfoReadsALoneSurrogateAsTheReplacementCharacterAndBoundsItsDepth) {
  // helper-54: a dataset row with a lone surrogate in a key no reward reads failed the batch.
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(
    R"({"items": [{"reward":"exact_match","solution_str":"x","ground_truth":"x",
                   "extra_info":{"answer":"x\ud800", "pair":"\ud83d\ude00"}}]})",
    ctx_, out, err))
    << err.message;
  EXPECT_EQ(out.items[0].extra_info, R"({"answer":"x\ufffd", "pair":"\ud83d\ude00"})");
  auto deep = refusal(R"({"items": [{"reward":"exact_match","solution_str":"x","ground_truth":"x",
                                     "extra_info":{"a":)" + std::string(300, '[')
                      + std::string(300, ']') + "}}]}");
  EXPECT_EQ(deep.field, "items[0].extra_info");
  EXPECT_EQ(deep.message, "items[0].extra_info: nested deeper than 256 levels");
}

TEST_F(ScoreCodec, ATargetInsideATargetIsRefusedHoweverDeep) {
  // helper-54: {"target": {"target": ...}} 20,000 deep (220 KB) overflowed the stack and
  // killed the server; verl's search-R1 target is a string or a list.
  auto nested = [](size_t depth) {
    std::string gt;
    for (size_t i = 0; i < depth; ++i) {
      gt += R"({"target": )";
    }
    return gt + "\"x\"" + std::string(depth, '}');
  };
  for (size_t depth : {2u, 20000u}) {
    auto err = refusal(R"({"items": [{"reward":"exact_match","solution_str":"x","ground_truth":)"
                       + nested(depth) + "}]}");
    EXPECT_EQ(err.field, "items[0].ground_truth.target") << depth;
    EXPECT_EQ(err.message,
              "items[0].ground_truth.target: expected a string, a number or a list of them");
  }
  score_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_score_request(
    R"({"items": [{"reward":"exact_match","solution_str":"x","ground_truth":{"target":["x","y"]}}]})",
    ctx_, out, err))
    << err.message;
  EXPECT_EQ(out.items[0].ground_truth, (std::vector<std::string>{"x", "y"}));
}

TEST_F(ScoreCodec, AnEmptyKeyIsNamedToo) {
  // A refusal named the field "" (found by tests/fuzz/score_codec_fuzz).
  auto err = refusal(R"({"": 1, "items": []})");
  EXPECT_EQ(err.field, R"("")");
  EXPECT_EQ(err.message, R"("": unknown field)");
}

TEST_F(ScoreCodec, RefusesAKeyGivenTwice) {
  // Two "items" lists were concatenated, past max_batch_items; other keys were last-wins.
  const std::string item = R"({"reward": "lexical", "solution_str": "a", "ground_truth": "a"})";
  auto err = refusal(R"({"items": [)" + item + R"(], "items": [)" + item + "]}");
  EXPECT_EQ(err.why, refusal::invalid);
  EXPECT_EQ(err.field, "items");
  EXPECT_EQ(err.message, "items: given twice");
  err = refusal(R"({"items": [{"reward": "lexical", "solution_str": "a", "solution_str": "b",
                   "ground_truth": "a"}]})");
  EXPECT_EQ(err.field, "items[0].solution_str");
  EXPECT_EQ(err.message, "items[0].solution_str: given twice");
  err = refusal(R"({"items": [)" + item + R"(], "deadline_ms": 5, "deadline_ms": 9000})");
  EXPECT_EQ(err.field, "deadline_ms");
  // The same key in sibling objects is no repeat.
  score_request_body out;
  ASSERT_TRUE(decode_score_request(R"({"items": [)" + item + "," + item + "]}", ctx_, out, err))
    << err.message;
  EXPECT_EQ(out.items.size(), 2u);
}

TEST_F(ScoreCodec, RefusesInvalidUtf8) {
  auto err = refusal("{\"items\": [{\"reward\":\"lexical\",\"solution_str\":\"\xff\xfe\","
                     "\"ground_truth\":\"b\"}]}");
  EXPECT_EQ(err.field, "body");
  EXPECT_EQ(err.message, "body: invalid UTF-8");
}

TEST_F(ScoreCodec, RefusesOversizedBatchesWith413) {
  std::string item = R"({"reward":"lexical","solution_str":"a","ground_truth":"b"})";
  std::string body = R"({"items": [)" + item;
  for (int i = 0; i < 4; ++i) {
    body += "," + item;
  }
  body += "]}";
  auto err = refusal(body);
  EXPECT_EQ(err.why, refusal::too_large);
  EXPECT_EQ(err.field, "items");
}

TEST(ScoreEncoding, WritesScoresResultsAndExplicitFailures) {
  item_result ok;
  ok.score = 0.11764705882352941;
  ok.status = item_status::ok;
  ok.source = "cpu";
  ok.attempts = 1;
  ok.queue_ms = 0.0204;
  ok.run_ms = 1.0;
  item_result failed;
  failed.status = item_status::failed;
  failed.code = errc::deadline_exceeded;
  failed.error = "late \"again\"\n";
  auto text = encode_score_response({ok, failed});
  EXPECT_EQ(text,
            R"({"scores":[0.11764705882352941,null],"results":[)"
            R"({"score":0.11764705882352941,"status":"ok","source":"cpu","cached":false,"attempts":1,"error":null,"queue_ms":0.02,"run_ms":1.0},)"
            R"({"score":null,"status":"failed","source":null,"cached":false,"attempts":0,"error":{"code":"deadline_exceeded","message":"late \"again\"\n"},"queue_ms":0.0,"run_ms":0.0}]})");
}

TEST(ScoreEncoding, WritesTheGroupsWhenThereAreAny) {
  item_result ok;
  ok.score = 1.0;
  ok.status = item_status::ok;
  ok.source = "cpu";
  scheduler::group_summary g;
  g.group = "uid \"1\"";
  g.scored = 2;
  g.failed = 1;
  g.pending = 3;
  g.mean = 0.5;
  g.std = 0.7071067811865476;
  scheduler::group_summary h;
  h.group = "h";
  h.scored = 1;
  h.mean = 1.0;
  h.zero_std = true;
  scheduler::group_summary lost; // every member failed: no mean to read as 0
  lost.group = "lost";
  lost.failed = 2;
  auto text = encode_score_response({ok}, {g, h, lost});
  auto at = text.find(R"(],"groups":{)");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(text.substr(at),
            R"(],"groups":{"uid \"1\"":{"scored":2,"failed":1,"pending":3,"mean":0.5,"std":0.7071067811865476,"zero_std":false},)"
            R"("h":{"scored":1,"failed":0,"pending":0,"mean":1.0,"std":0.0,"zero_std":true},)"
            R"("lost":{"scored":0,"failed":2,"pending":0,"mean":null,"std":null,"zero_std":false}}})");
  EXPECT_EQ(encode_score_response({ok}).find("groups"), std::string::npos);
}

TEST(ScoreEncoding, EscapesControlCharactersAndKeepsUtf8) {
  std::string out;
  append_json_string(out, std::string{"a\x01\tb\xc3\xa9"});
  EXPECT_EQ(out, "\"a\\u0001\\tb\xc3\xa9\"");
  std::string n;
  append_json_number(n, 1.0 / 0.0);
  EXPECT_EQ(n, "null");
  // Bytes that are not UTF-8 become U+FFFD, so the text stays valid JSON: a lone
  // continuation byte, a cut sequence, an overlong form, a surrogate, and DEL escaped.
  std::string bad;
  append_json_string(bad, std::string{"x\x80y\xe2\x82z\xc0\xafw\xed\xa0\x80\x7f\xf0\x9f\x98\x80"});
  EXPECT_EQ(bad, "\"x\\ufffdy\\ufffd\\ufffdz\\ufffd\\ufffdw\\ufffd\\ufffd\\ufffd\\u007f\xf0\x9f\x98\x80\"");
  std::string whole;
  append_json_number(whole, 3.0);
  append_json_integer(whole, 18446744073709551615u);
  EXPECT_EQ(whole, "3.018446744073709551615");
}

TEST(ScoreEncoding, ValidUtf8IsToldFromEveryKindOfInvalidByte) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain \x7f"));
  EXPECT_TRUE(is_valid_utf8("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (std::string bad : {"\xfc", "x\x80", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80", "\xf0\x9f\x98"}) {
    EXPECT_FALSE(is_valid_utf8(bad)) << bad.size();
  }
}

TEST(MetricsDoc, ListsEveryMetricTheServerDeclares) {
  metrics_registry registry;
  scheduler::scheduler_metrics s{registry, {"high"}};
  net::http_metrics h{registry};
  actors::cluster_metrics c{registry};
  actors::replay_metrics r{registry};
  std::ifstream in{std::string{ARBITER_SOURCE_DIR} + "/docs/metrics.md"};
  ASSERT_TRUE(in) << "docs/metrics.md is missing";
  std::stringstream doc;
  doc << in.rdbuf();
  auto names = registry.family_names();
  EXPECT_GE(names.size(), 10u);
  for (const auto& name : names) {
    EXPECT_NE(doc.str().find("`" + name + "`"), std::string::npos)
      << name << " is not documented in docs/metrics.md";
  }
}
