// The trainer protocols (OpenRLHF, slime) and the OpenAI/TEI pass-through codecs, without a
// server: decoding, the fields named in refusals, and the exact shapes written back.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "net/info_gain_codec.hpp"
#include "net/json_body.hpp"
#include "net/openai_codec.hpp"
#include "net/trainer_codec.hpp"

using namespace arbiter;
using namespace arbiter::net;
using json = nlohmann::json;

namespace {

item_result ok_result(double score) {
  item_result r;
  r.status = item_status::ok;
  r.score = score;
  r.source = "cpu";
  return r;
}

item_result failed_result(errc code, std::string why) {
  item_result r;
  r.status = item_status::failed;
  r.code = code;
  r.error = std::move(why);
  return r;
}

class TrainerCodec : public ::testing::Test {
protected:
  TrainerCodec() : catalog_(config::embedded_default()) {
    ctx_.catalog = &catalog_;
    ctx_.max_batch_items = 3;
  }

  const backends::reward_entry& reward(const std::string& name) {
    return *catalog_.find(name);
  }

  backends::reward_catalog catalog_;
  codec_context ctx_;
};

} // namespace

TEST(ResponseOf, StripsThePromptAndTrailingEndMarkers) {
  const std::string prompt = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(response_of(prompt + "The answer is 4.<|im_end|>", prompt), "The answer is 4.");
  EXPECT_EQ(response_of(prompt + "x<|im_end|>\n<|endoftext|>", prompt), "x");
  EXPECT_EQ(response_of("[INST] q [/INST] y </s>", "[INST] q [/INST]"), "y");
  EXPECT_EQ(response_of("abc", ""), "abc");
  // A prompt truncated on the left is no prefix; the text after it is still the response.
  EXPECT_EQ(response_of("ystem\nq\nassistant\nA", "q\nassistant\n"), "A");
  // Not found at all: the whole query is the response.
  EXPECT_EQ(response_of("free text", "other"), "free text");
  // DeepSeek's full-width marker.
  EXPECT_EQ(response_of("p ok<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
                        "p"),
            "ok");
  // A marker inside the text stays.
  EXPECT_EQ(response_of("p a </s> b", "p"), "a </s> b");
  // Gemma's and Phi-3's markers.
  EXPECT_EQ(response_of("p 4<end_of_turn>\n<eos>", "p"), "4");
  EXPECT_EQ(response_of("p 4<|end|>", "p"), "4");
}

TEST(ResponseOf, APromptCutOnTheLeftIsFoundByItsTail) {
  // OpenRLHF keeps a long prompt's last max_prompt_length tokens: the query starts inside the
  // prompt, so the prompt is neither its prefix nor inside it.
  const std::string prompt = "<|im_start|>user\nA long problem statement, then the question: "
                             "what is 2 + 2?<|im_end|>\n<|im_start|>assistant\n";
  const std::string tail = prompt.substr(20);
  EXPECT_EQ(response_of(tail + "4<|im_end|>", prompt), "4");
  // The first token decoded alone may be a piece of a character or of a word.
  EXPECT_EQ(response_of("\xEF\xBF\xBD" + tail + "4", prompt), "4");
  EXPECT_EQ(response_of("ng" + tail + "4", prompt), "4");
  // A short accidental overlap is not a prompt: "<|im" is 4 bytes.
  EXPECT_EQ(response_of("<|im free text", "x<|im"), "<|im free text");
}

TEST(ResponseOf, AVlmsRepeatedPatchPadsCountAsThePromptsOne) {
  const std::string prompt = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
                             "What is shown?<|im_end|>\n<|im_start|>assistant\n";
  std::string query = prompt;
  std::string pads;
  for (int i = 0; i < 64; ++i) {
    pads += "<|image_pad|>";
  }
  query.replace(query.find("<|image_pad|>"), 13, pads);
  EXPECT_EQ(response_of(query + "A cat.<|im_end|>", prompt), "A cat.");
  // A query the prompt is not found in is its own response, its pads as they were sent (the
  // fuzzer: the run came back collapsed, text the query did not hold).
  EXPECT_EQ(response_of("x" + pads + "y", "other <|image_pad|>"), "x" + pads + "y");
  EXPECT_EQ(response_of(pads + "z", "<|video_pad|> other"), pads + "z");
}

TEST(QueryParameter, FindsAndDecodesOneParameter) {
  EXPECT_EQ(query_parameter("/get_reward?reward=judge", "reward"), "judge");
  EXPECT_EQ(query_parameter("/x?a=1&reward=my%2Djudge&b=2", "reward"), "my-judge");
  EXPECT_EQ(query_parameter("/x?rewards=1", "reward"), std::nullopt);
  EXPECT_EQ(query_parameter("/x", "reward"), std::nullopt);
  EXPECT_EQ(query_parameter("/x?reward=", "reward"), "");
  EXPECT_EQ(query_parameter("/x?reward=%zz", "reward"), "%zz");
}

TEST_F(TrainerCodec, AQueryParameterGivenTwiceIsRefusedNamingIt) {
  // helper-54: `?reward=lexical&reward=judge` was scored by the first, unseen.
  size_t priority = 0;
  std::chrono::milliseconds deadline{1000};
  codec_error err;
  EXPECT_TRUE(read_trainer_query("/get_reward?reward=lexical&deadline_ms=500", ctx_, priority,
                                 deadline, err))
    << err.message;
  EXPECT_EQ(deadline, std::chrono::milliseconds{500});
  for (const char* target : {"/get_reward?reward=lexical&reward=judge",
                             "/remote_rm?deadline_ms=500&reward=x&deadline_ms=900",
                             "/get_reward?api_key=a&api_key=b"}) {
    EXPECT_FALSE(read_trainer_query(target, ctx_, priority, deadline, err)) << target;
    EXPECT_EQ(err.message, err.field + ": given twice in the URL") << target;
  }
  EXPECT_TRUE(refuse_query("/v1/score?api_key=a", err));
  EXPECT_FALSE(refuse_query("/v1/score?api_key=a&api_key=b", err));
  EXPECT_EQ(err.message, "api_key: given twice in the URL");
}

TEST_F(TrainerCodec, OpenRlhfItemsCarryResponseLabelAndPrompt) {
  std::vector<score_item> items;
  codec_error err;
  ASSERT_TRUE(decode_openrlhf_request(
    R"({"query":["P: q A: 4<|im_end|>","P: r A: 5"],"prompts":["P: q A:","P: r A:"],"labels":["4","6"]})",
    reward("lexical"), ctx_, items, err))
    << err.message;
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].solution_str, "4");
  EXPECT_EQ(items[1].ground_truth, std::vector<std::string>{"6"});
  EXPECT_EQ(items[0].kind, "lexical");
  EXPECT_EQ(items[0].capability, "cpu");
  EXPECT_EQ(json::parse(items[0].extra_info),
            json::parse(R"({"prompt":"P: q A:","question":"P: q A:"})"));
  // A prompt's samples are one GRPO group, named by the prompt's hash.
  EXPECT_EQ(items[0].group.rfind("prompt:", 0), 0u);
  EXPECT_EQ(items[0].group.size(), 7u + 16u);
  EXPECT_NE(items[0].group, items[1].group);
  // labels and prompts may be left out, or null: no reference.
  ASSERT_TRUE(decode_openrlhf_request(R"({"query":["x"]})", reward("lexical"), ctx_, items, err));
  EXPECT_TRUE(items[0].ground_truth.empty());
  EXPECT_EQ(items[0].group, "") << "no prompt, no group";
  ASSERT_TRUE(decode_openrlhf_request(R"({"query":["x"],"prompts":null,"labels":null})",
                                      reward("lexical"), ctx_, items, err));
  EXPECT_TRUE(items[0].ground_truth.empty());
  // OpenRLHF without --data.label_key sends "" for each sample: no reference either (it was
  // one empty reference, and every sample silently scored 0). A label may be null, or a list
  // (an NQ-style answer list).
  ASSERT_TRUE(decode_openrlhf_request(
    R"({"query":["a","b","c"],"labels":["", null, ["Paris", 1, "Paris, France"]]})",
    reward("lexical"), ctx_, items, err))
    << err.message;
  EXPECT_TRUE(items[0].ground_truth.empty());
  EXPECT_TRUE(items[1].ground_truth.empty());
  EXPECT_EQ(items[2].ground_truth, (std::vector<std::string>{"Paris", "1", "Paris, France"}));
  // Numeric labels (a GSM8K answer column), as Python's str() writes them.
  ASSERT_TRUE(decode_openrlhf_request(
    R"({"query":["a","b","c"],"labels":[72, 0.5, 18446744073709551616]})", reward("lexical"),
    ctx_, items, err))
    << err.message;
  EXPECT_EQ(items[0].ground_truth, std::vector<std::string>{"72"});
  EXPECT_EQ(items[1].ground_truth, std::vector<std::string>{"0.5"});
  EXPECT_EQ(items[2].ground_truth, std::vector<std::string>{"18446744073709551616"});
}

TEST_F(TrainerCodec, OpenRlhfRefusalsNameTheField) {
  struct bad {
    const char* body;
    const char* field;
    unsigned status;
  };
  for (const auto& b : std::vector<bad>{{R"({})", "query", 400},
                                        {R"({"query":[1]})", "query[0]", 400},
                                        {R"({"query":["a"],"prompts":"a"})", "prompts", 400},
                                        {R"({"query":["a"],"labels":["a","b"]})", "labels", 400},
                                        {R"({"query":["a"],"labels":[true]})", "labels[0]", 400},
                                        {R"({"query":["a"],"labels":[[true]]})", "labels[0][0]", 400},
                                        {R"({"query":["a"],"labels":[{"target":{"target":"a"}}]})",
                                         "labels[0].target", 400},
                                        {R"({"query":["a"],"labels":"a"})", "labels", 400},
                                        {R"({"query":["a"]} [])", "body", 400},
                                        {R"({"query":["a"],"query":["b"]})", "query", 400},
                                        {R"({"query":["a","b","c","d"]})", "query", 413},
                                        {"nope", "body", 400}}) {
    std::vector<score_item> items;
    codec_error err;
    EXPECT_FALSE(decode_openrlhf_request(b.body, reward("lexical"), ctx_, items, err)) << b.body;
    EXPECT_EQ(err.field, b.field) << b.body;
    EXPECT_EQ(refusal_answer_for(err.why).status, b.status) << b.body;
    EXPECT_EQ(err.message.rfind(b.field, 0), 0u) << err.message;
  }
}

TEST(OpenRlhfResponse, ScoresFlagsAndTheFailurePolicy) {
  failure_policy policy;
  policy.score = -1.0;
  auto fallback = ok_result(0.25);
  fallback.status = item_status::fallback;
  auto cached = ok_result(1.0);
  cached.cached = true;
  auto body = encode_openrlhf_response(
    {ok_result(0.5), failed_result(errc::upstream_failed, "down"), fallback, cached}, policy);
  EXPECT_EQ(json::parse(body), json::parse(R"({"rewards":[0.5,-1.0,0.25,1.0],
      "scores":[0.5,-1.0,0.25,1.0],
      "extra_logs":{"arbiter_failed":[0,1,0,0],"arbiter_fallback":[0,0,1,0],
                    "arbiter_cached":[0,0,0,1],"arbiter_group_scored":[1,0,1,1],
                    "arbiter_group_mean":[0.5,0.0,0.25,1.0],
                    "arbiter_group_std":[0,0,0,0],"arbiter_group_zero_std":[1,0,1,1]}})"))
    << "no group names: each sample is a group of its own";
  EXPECT_EQ(json::parse(encode_openrlhf_response({}, policy)),
            json::parse(R"({"rewards":[],"scores":[],"extra_logs":{"arbiter_failed":[],
                "arbiter_fallback":[],"arbiter_cached":[],"arbiter_group_scored":[],
                "arbiter_group_mean":[],
                "arbiter_group_std":[],"arbiter_group_zero_std":[]}})"));
}

TEST(OpenRlhfResponse, ExtraLogsCarryEachSamplesGroupAsTheSchedulerReportsIt) {
  failure_policy policy;
  policy.score = 0.0;
  scheduler::group_summary a;
  a.group = "a";
  a.scored = 5;
  a.mean = 0.4;
  a.std = 0.5;
  scheduler::group_summary b;
  b.group = "b";
  b.scored = 2;
  b.mean = 1.0;
  b.zero_std = true;
  auto body = encode_openrlhf_response(
    {ok_result(1.0), ok_result(1.0), failed_result(errc::upstream_failed, "x"), ok_result(0.25)},
    policy, {"a", "b", "a", ""}, {a, b});
  EXPECT_EQ(json::parse(body)["extra_logs"], json::parse(R"({
      "arbiter_failed":[0,0,1,0],"arbiter_fallback":[0,0,0,0],"arbiter_cached":[0,0,0,0],
      "arbiter_group_scored":[5,2,5,1],"arbiter_group_mean":[0.4,1.0,0.4,0.25],
      "arbiter_group_std":[0.5,0.0,0.5,0.0],"arbiter_group_zero_std":[0,1,0,1]})"))
    << "the last sample has no prompt: a group of its own";
}

TEST_F(TrainerCodec, SlimeTakesStringOrMessagesAndAnyLabel) {
  score_item item;
  codec_error err;
  ASSERT_TRUE(decode_slime_request(
    R"({"prompt":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"q?"}]}],
        "response":"4","label":4})",
    reward("exact_match"), item, err))
    << err.message;
  EXPECT_EQ(item.solution_str, "4");
  EXPECT_EQ(item.ground_truth, std::vector<std::string>{"4"});
  EXPECT_EQ(json::parse(item.extra_info)["question"], "q?");
  EXPECT_EQ(json::parse(item.extra_info)["prompt"], "s\nq?");
  // A text part that does not decode is refused by its path, not dropped from the prompt; a
  // lone surrogate decodes, as U+FFFD.
  EXPECT_FALSE(decode_slime_request(
    R"({"prompt":[{"role":"user","content":[{"type":"text","text":"q\u12G4"}]}],"response":"4"})",
    reward("exact_match"), item, err));
  EXPECT_EQ(err.field, "prompt[0].content[0].text") << err.message;
  EXPECT_NE(err.message.find("invalid string escape"), std::string::npos) << err.message;
  ASSERT_TRUE(decode_slime_request(
    R"({"prompt":[{"role":"user","content":[{"type":"text","text":"q\ud800"}]}],"response":"4"})",
    reward("exact_match"), item, err))
    << err.message;
  EXPECT_EQ(json::parse(item.extra_info)["question"], "q\xEF\xBF\xBD");
  ASSERT_TRUE(decode_slime_request(R"({"prompt":"p","response":"r","label":null})",
                                   reward("lexical"), item, err));
  EXPECT_TRUE(item.ground_truth.empty());
  ASSERT_TRUE(decode_slime_request(R"({"response":"r","label":["a","b"]})", reward("lexical"),
                                   item, err));
  EXPECT_EQ(item.ground_truth, (std::vector<std::string>{"a", "b"}));
  // Numbers, alone or in a list, as Python's str() writes them.
  ASSERT_TRUE(decode_slime_request(R"({"response":"r","label":[1, 2.50, "c", 1e16, -0]})",
                                   reward("lexical"), item, err))
    << err.message;
  EXPECT_EQ(item.ground_truth, (std::vector<std::string>{"1", "2.5", "c", "1e+16", "0"}));
  ASSERT_TRUE(decode_slime_request(R"({"response":"r","label":1E400})", reward("lexical"), item,
                                   err));
  EXPECT_EQ(item.ground_truth, std::vector<std::string>{"inf"});
  // Booleans are refused, naming the field.
  EXPECT_FALSE(decode_slime_request(R"({"response":"r","label":[true]})", reward("lexical"),
                                    item, err));
  EXPECT_EQ(err.field, "label[0]");
  EXPECT_FALSE(decode_slime_request(R"({"response":"r","label":false})", reward("lexical"), item,
                                    err));
  EXPECT_EQ(err.field, "label");
  EXPECT_EQ(err.message, "label: expected a string, a number, a list of them or {\"target\": ...}");
  EXPECT_FALSE(decode_slime_request(R"({"response":"r","label":{"target":{"target":"a"}}})",
                                    reward("lexical"), item, err));
  EXPECT_EQ(err.field, "label.target");
  EXPECT_FALSE(decode_slime_request(R"({"prompt":7,"response":"r"})", reward("lexical"), item,
                                    err));
  EXPECT_EQ(err.field, "prompt");
  EXPECT_FALSE(decode_slime_request(R"({"response":"r","response":"s"})", reward("lexical"), item,
                                    err));
  EXPECT_EQ(err.message, "response: given twice");
  // An empty key given twice is named too (found by tests/fuzz/trainer_codec_fuzz).
  EXPECT_FALSE(decode_slime_request(R"({"":1,"":2,"response":"r"})", reward("lexical"), item,
                                    err));
  EXPECT_EQ(err.field, R"("")");
  EXPECT_EQ(err.message, R"("": given twice)");
}

TEST(SlimeResponse, ANumberOrAnObjectWithFixedKeys) {
  failure_policy none;
  EXPECT_EQ(encode_slime_response(ok_result(0.5), "", none), "0.5");
  auto object = json::parse(encode_slime_response(ok_result(0.5), "score", none));
  EXPECT_EQ(object, json::parse(R"({"score":0.5,"status":"ok","source":"cpu","error":""})"));
  failure_policy zero;
  zero.score = 0.0;
  auto failed = json::parse(
    encode_slime_response(failed_result(errc::deadline_exceeded, "late"), "score", zero));
  EXPECT_EQ(failed, json::parse(R"({"score":0.0,"status":"failed","source":"","error":"late"})"));
}

// ---- OpenAI / TEI ---------------------------------------------------------------------------

namespace {

class PassThrough : public ::testing::Test {
protected:
  PassThrough() {
    codec_.priorities = {"high", "normal", "low"};
    codec_.default_priority = 1;
    codec_.max_batch_items = 3;
    models_ = {{"judge-8b", {capability::chat}, {"a", "b"}, {}},
               {"embedder", {capability::embed}, {"e"}, {}}};
    ctx_.codec = &codec_;
    ctx_.models = &models_;
  }

  codec_error chat_refusal(const std::string& body) {
    chat_request_body out;
    codec_error err;
    EXPECT_FALSE(decode_chat_request(body, ctx_, out, err)) << body;
    return err;
  }

  codec_context codec_;
  std::vector<model_entry> models_;
  passthrough_context ctx_;
};

} // namespace

TEST_F(PassThrough, ChatRequestBecomesOneRoutedCall) {
  chat_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_chat_request(
    R"({"model":"judge-8b","messages":[{"role":"user","content":"hi"}],"temperature":0.2,
        "top_p":0.9,"max_completion_tokens":64,"n":3,"stop":"END","seed":7,"stream":false,
        "chat_template_kwargs":{"enable_thinking":false},"priority":"high","deadline_ms":500,
        "user":"ignored","presence_penalty":0.5,"logprobs":false,"top_logprobs":0})",
    ctx_, out, err))
    << err.message;
  EXPECT_EQ(out.item.kind, "chat");
  EXPECT_EQ(out.item.capability, "chat@model:judge-8b");
  EXPECT_EQ(out.priority, 0u);
  EXPECT_EQ(out.deadline.count(), 500);
  EXPECT_EQ(out.n, 3u);
  const auto& c = *out.item.call;
  EXPECT_EQ(json::parse(c.messages), json::parse(R"([{"role":"user","content":"hi"}])"));
  EXPECT_EQ(c.temperature, 0.2);
  EXPECT_EQ(c.top_p, 0.9);
  EXPECT_EQ(c.max_tokens, 64u);
  EXPECT_EQ(c.n, 3u);
  EXPECT_EQ(c.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.enable_thinking, false);
  // A field it does not read, which shapes the answer, goes upstream; `user` does not.
  EXPECT_EQ(json::parse(c.extra_body), json::parse(R"({"presence_penalty":0.5})"));
  // Fields that ask for nothing (null, a penalty of 0, no tools) are as absent, as OpenAI and
  // vLLM take them: a local generator refused them, and they split the cache (helper-49).
  ASSERT_TRUE(decode_chat_request(
    R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":null,
        "frequency_penalty":0,"logit_bias":{},"tools":[],"tool_choice":"none","top_k":-1,
        "reasoning_effort":null,"repetition_penalty":1.0,"functions":null,"min_p":0.1,
        "audio":null})",
    ctx_, out, err))
    << err.message;
  EXPECT_EQ(json::parse(out.item.call->extra_body), json::parse(R"({"min_p":0.1})"));
  EXPECT_EQ(chat_refusal(R"({"messages":[{"role":"user","content":"x"}],"tools":[{}]})").field,
            "tools");
  EXPECT_EQ(chat_refusal(R"({"messages":[{"role":"user","content":"x"}],)"
                         R"("tool_choice":"auto"})").field,
            "tool_choice");
  // No model: any chat source.
  ASSERT_TRUE(decode_chat_request(R"({"messages":[{"role":"user","content":"x"}]})", ctx_, out,
                                  err));
  EXPECT_EQ(out.item.capability, "chat");
  EXPECT_FALSE(out.item.call->temperature.has_value()) << "the source's setting applies";
}

TEST_F(PassThrough, ChatRefusalsNameTheField) {
  EXPECT_EQ(chat_refusal(R"({"messages":[]})").field, "messages");
  EXPECT_EQ(chat_refusal(R"({})").field, "messages");
  EXPECT_EQ(chat_refusal(R"({"messages":[{"content":"x"}]})").field, "messages[0].role");
  EXPECT_EQ(chat_refusal(R"({"messages":[{"role":"user","content":5}]})").field,
            "messages[0].content");
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(chat_refusal("{" + m + R"(,"stream":true})").field, "stream");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"tools":[{}]})").field, "tools");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"response_format":{"type":"json_object"}})").field,
            "response_format");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"logprobs":true})").field, "logprobs");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"top_logprobs":5})").field, "top_logprobs");
  auto hot = chat_refusal("{" + m + R"(,"temperature":3})");
  EXPECT_EQ(hot.field, "temperature");
  EXPECT_EQ(hot.message, "temperature: expected a number from 0 to 2")
    << "not 0.000000 to 2.000000";
  EXPECT_EQ(chat_refusal("{" + m + R"(,"top_p":1.5})").message,
            "top_p: expected a number from 0 to 1");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"n":0})").field, "n");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"stop":[1]})").field, "stop");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"priority":"urgent"})").field, "priority");
  auto unknown = chat_refusal("{" + m + R"(,"model":"embedder"})");
  EXPECT_EQ(unknown.why, refusal::unknown_model) << "embedder serves no chat";
  EXPECT_EQ(unknown.field, "model");
  EXPECT_NE(unknown.message.find("'judge-8b'"), std::string::npos) << unknown.message;
  // A key given twice (nlohmann kept the last, unseen), at the top or in a message; the same
  // key in two objects is fine.
  auto twice = chat_refusal("{" + m + R"(,"model":"judge-8b","model":"embedder"})");
  EXPECT_EQ(twice.field, "model");
  EXPECT_EQ(twice.message, "model: given twice");
  EXPECT_EQ(chat_refusal(R"({"messages":[{"role":"user","role":"system","content":"x"}]})")
              .message,
            "messages[0].role: given twice");
  // Named by its path, as /v1/score names it (helper-45: by its key only).
  auto nested = chat_refusal(R"({"messages":[{"role":"user","content":[1,{"x":[]}]},)"
                             R"({"role":"user","content":[{"type":"text"},)"
                             R"({"type":"text","text":"a","text":"b"}]}]})");
  EXPECT_EQ(nested.field, "messages[1].content[1].text");
  EXPECT_EQ(nested.message, "messages[1].content[1].text: given twice");
  EXPECT_EQ(chat_refusal("{" + m + R"(,"":1,"":2})").message, R"("": given twice)")
    << "the empty key too (helper-45)";
  chat_request_body out;
  codec_error err;
  EXPECT_TRUE(decode_chat_request(
    R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]})", ctx_, out,
    err))
    << err.message;
}

TEST_F(PassThrough, ADeeplyNestedBodyIsRefusedBeforeItCanOverflowTheStack) {
  // helper-43: a message nested 80,000 deep killed the server (SIGSEGV) when it was written
  // upstream; simdjson's routes refuse such a body, and now so do these.
  auto nested = [](size_t depth) {
    return R"({"messages":[{"role":"user","content":"x","extra":)" + std::string(depth, '[')
           + std::string(depth, ']') + "}]}";
  };
  auto deep = chat_refusal(nested(100000));
  EXPECT_EQ(deep.field, "body");
  EXPECT_EQ(deep.message, "body: nested deeper than 256 levels");
  chat_request_body out;
  codec_error err;
  EXPECT_TRUE(decode_chat_request(nested(250), ctx_, out, err)) << err.message;
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(decode_chat_request(R"({"messages":[{"role":"user","content":")"
                                    + std::string(1000, '[') + R"("}]})",
                                  ctx_, out, err))
    << err.message;
}

TEST(JsonBody, ALoneSurrogateEscapeIsReadAsTheReplacementCharacter) {
  // Python's json.dumps writes a lone surrogate as \ud800, which nlohmann refuses; /v1/score
  // reads it as U+FFFD, and so do the routes nlohmann reads.
  std::string fixed;
  codec_error err;
  ASSERT_TRUE(check_json_text(R"({"a":"x\ud800y","b":"\udc00"})", fixed, err));
  EXPECT_EQ(fixed, R"({"a":"x\ufffdy","b":"\ufffd"})");
  ASSERT_TRUE(check_json_text(R"({"a":"\ud83d\ude00","b":"\\ud800"})", fixed, err));
  EXPECT_EQ(fixed, "") << "a pair, and an escaped backslash before text, are left alone";
  nlohmann::json doc;
  ASSERT_TRUE(parse_json_object(R"({"a":"x\ud800"})", doc, err)) << err.message;
  EXPECT_EQ(doc["a"].get<std::string>(), "x\xef\xbf\xbd");
}

TEST(JsonBody, ANumberOutOfRangeIsNamedByItsField) {
  // `1e400` in max_tokens said "body: not valid JSON" (helper-54).
  nlohmann::json doc;
  for (auto [body, field] : std::vector<std::pair<std::string, std::string>>{
         {R"({"model":"m","max_tokens":1e400})", "max_tokens"},
         {R"({"messages":[{"role":"user"},{"n":[1,-1e999]}]})", "messages[1].n[1]"},
         {R"({"a":{"b":[[2e308]]}})", "a.b[0][0]"},
         {R"(1e400)", "body"},
         {R"([0,1e400])", "body[1]"}}) {
    codec_error err;
    ASSERT_FALSE(parse_json_object(body, doc, err)) << body;
    EXPECT_EQ(err.field, field) << body;
    EXPECT_EQ(err.message, field + ": a number out of range") << body;
  }
  codec_error err;
  ASSERT_FALSE(parse_json_object(R"({"a":1,})", doc, err));
  EXPECT_EQ(err.message, "body: not valid JSON");
  ASSERT_TRUE(parse_json_object(R"({"a":1e308,"b":-1e-400})", doc, err)) << err.message;
}

TEST_F(PassThrough, AModelOnlyLostNodesServeIsAwayNotUnknown) {
  // A 404 tells the OpenAI SDK not to retry; a node restarting joins again within seconds.
  models_.push_back({"node-model", {capability::chat}, {}, "node 'n1' was lost: killed"});
  models_.push_back({"judge-8b", {capability::chat}, {}, "node 'n2' was lost: killed"});
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  auto away = chat_refusal("{" + m + R"(,"model":"node-model"})");
  EXPECT_EQ(away.why, refusal::model_away);
  EXPECT_EQ(away.field, "model");
  EXPECT_NE(away.message.find("node 'n1' was lost: killed"), std::string::npos) << away.message;
  EXPECT_EQ(refusal_answer_for(away.why).status, 503u);
  EXPECT_EQ(refusal_answer_for(away.why).code, "model_unavailable");
  chat_request_body out;
  codec_error err;
  EXPECT_TRUE(decode_chat_request("{" + m + R"(,"model":"judge-8b"})", ctx_, out, err))
    << "served by sources that are up as well: " << err.message;
  auto unknown = chat_refusal("{" + m + R"(,"model":"gone"})");
  EXPECT_EQ(unknown.why, refusal::unknown_model);
  EXPECT_EQ(unknown.message.find("node-model"), std::string::npos)
    << "an away model is not offered as served: " << unknown.message;
  const auto listed = json::parse(encode_models(models_, 0));
  ASSERT_EQ(listed["data"].size(), 2u) << "nor listed";
}

TEST_F(PassThrough, ChatResponseIsACompleteChatCompletion) {
  chat_request_body req;
  req.model = "judge-8b";
  req.n = 1;
  auto result = ok_result(0.0);
  result.source = "a";
  auto output = std::make_shared<model_output>();
  generated_text t1;
  t1.text = "REWARD: 1";
  generated_text t2;
  t2.text = "extra choice beyond n";
  output->texts = {t1, t2};
  output->prompt_tokens = 10;
  output->completion_tokens = 3;
  result.output = output;
  auto doc = json::parse(encode_chat_response(req, result, "chatcmpl-1", 1700000000));
  EXPECT_EQ(doc["id"], "chatcmpl-1");
  EXPECT_EQ(doc["object"], "chat.completion");
  EXPECT_EQ(doc["created"], 1700000000);
  EXPECT_EQ(doc["model"], "judge-8b");
  ASSERT_EQ(doc["choices"].size(), 1u) << "no more than n choices";
  EXPECT_EQ(doc["choices"][0], json::parse(R"({"index":0,"message":{"role":"assistant",
      "content":"REWARD: 1"},"finish_reason":"stop","logprobs":null})"));
  EXPECT_EQ(doc["usage"], json::parse(R"({"prompt_tokens":10,"completion_tokens":3,
      "total_tokens":13})"));
  EXPECT_EQ(doc["arbiter"]["source"], "a");
  // A reply without content (a reasoning model cut off), with its reasoning, or a refusal:
  // as the provider gave it.
  generated_text cut;
  cut.no_content = true;
  cut.reasoning = "Let me think";
  cut.refusal = "I can't";
  cut.finish_reason = "length";
  output->texts = {cut};
  doc = json::parse(encode_chat_response(req, result, "chatcmpl-2", 1700000000));
  EXPECT_EQ(doc["choices"][0]["message"], json::parse(R"({"role":"assistant","content":null,
      "reasoning_content":"Let me think","refusal":"I can't"})"));
  EXPECT_EQ(doc["choices"][0]["finish_reason"], "length");
}

TEST_F(PassThrough, EmbeddingRequestsMakeOneCallItemPerInput) {
  embed_request_body out;
  codec_error err;
  ASSERT_TRUE(decode_openai_embeddings(
    R"({"model":"embedder","input":["a","b"],"encoding_format":"base64","dimensions":2})", ctx_,
    out, err))
    << err.message;
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_EQ(out.items[1].call->prompt, "b");
  EXPECT_EQ(out.items[0].kind, "embedding");
  EXPECT_EQ(out.items[0].capability, "embed@model:embedder");
  EXPECT_EQ(out.format, vector_format::base64);
  EXPECT_EQ(out.dimensions, 2u);
  embed_request_body tei;
  ASSERT_TRUE(decode_tei_embed(R"({"inputs":"a","normalize":false,"truncate":true})", ctx_, tei,
                               err));
  EXPECT_EQ(tei.items.size(), 1u);
  EXPECT_FALSE(tei.normalize);
  EXPECT_EQ(tei.items[0].capability, "embed");
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
         {R"({})", "input"},
         {R"({"input":[]})", "input"},
         {R"({"input":[[1,2]]})", "input[0]"},
         {R"({"input":["a"],"encoding_format":"int8"})", "encoding_format"},
         {R"({"input":["a"],"dimensions":0})", "dimensions"},
         {R"({"input":["a","b","c","d"]})", "input"}}) {
    embed_request_body bad;
    EXPECT_FALSE(decode_openai_embeddings(body, ctx_, bad, err)) << body;
    EXPECT_EQ(err.field, field) << body;
  }
  EXPECT_FALSE(decode_tei_embed(R"({"inputs":"a","prompt_name":"query"})", ctx_, tei, err));
  EXPECT_EQ(err.field, "prompt_name");
}

TEST_F(PassThrough, TeiPredictTakesNliPairsAndNamesBadFields) {
  predict_request_body one;
  codec_error err;
  ASSERT_TRUE(decode_tei_predict(R"({"inputs":["it rains","the ground is wet"],"truncate":true})",
                                 ctx_, one, err))
    << err.message;
  ASSERT_EQ(one.items.size(), 1u);
  EXPECT_TRUE(one.single);
  EXPECT_EQ(one.items[0].kind, "nli");
  EXPECT_EQ(one.items[0].capability, "nli");
  EXPECT_EQ(one.items[0].call->prompt, "it rains");
  EXPECT_EQ(one.items[0].call->hypothesis, "the ground is wet");
  predict_request_body two;
  ASSERT_TRUE(decode_tei_predict(R"({"inputs":[["a","b"],["c","d"]],"raw_scores":false})", ctx_,
                                 two, err));
  EXPECT_FALSE(two.single);
  ASSERT_EQ(two.items.size(), 2u);
  EXPECT_EQ(two.items[1].call->hypothesis, "d");
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
         {R"({})", "inputs"},
         {R"({"inputs":"just one text"})", "inputs"},
         {R"({"inputs":[]})", "inputs"},
         {R"({"inputs":[["a","b"],["c"]]})", "inputs[1]"},
         {R"({"inputs":[["a","b"],["c",2]]})", "inputs[1]"},
         {R"({"inputs":[["a","b"],["c","d"],["e","f"],["g","h"]]})", "inputs"},
         {R"({"inputs":["a","b"],"raw_scores":true})", "raw_scores"},
         {R"({"inputs":["a","b"],"truncate":"yes"})", "truncate"},
         {R"({"inputs":["a","b"],"truncation_direction":"left"})", "truncation_direction"}}) {
    predict_request_body bad;
    EXPECT_FALSE(decode_tei_predict(body, ctx_, bad, err)) << body;
    EXPECT_EQ(err.field, field) << body;
  }
  // Answers: labels by score, highest first; a bare list for a single pair.
  std::vector<item_result> results(1);
  auto out = std::make_shared<model_output>();
  out->entailment = 0.2;
  out->neutral = 0.7;
  out->contradiction = 0.1;
  results[0].output = out;
  EXPECT_EQ(encode_tei_predict(one, results),
            R"([{"label":"neutral","score":0.7},{"label":"entailment","score":0.2},)"
            R"({"label":"contradiction","score":0.1}])");
  results.push_back(results[0]);
  auto body = encode_tei_predict(two, results);
  EXPECT_EQ(body.substr(0, 3), "[[{");
  EXPECT_EQ(body.substr(body.size() - 3), "}]]");
}

TEST_F(PassThrough, VectorsAreSlicedNormalizedAndEncoded) {
  embed_request_body req;
  auto result = ok_result(0.0);
  auto output = std::make_shared<model_output>();
  output->embedding = {3.0f, 4.0f, 12.0f};
  result.output = output;
  auto near = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6) << i;
    }
  };
  near(shaped_vector(req, result), {3.0f / 13, 4.0f / 13, 12.0f / 13});
  req.dimensions = 2;
  near(shaped_vector(req, result), {0.6f, 0.8f});
  req.normalize = false;
  req.dimensions = 0;
  EXPECT_EQ(shaped_vector(req, result), (std::vector<float>{3.0f, 4.0f, 12.0f}));
  EXPECT_EQ(encode_tei_embed(req, {result}), "[[3,4,12]]");
  req.format = vector_format::base64;
  req.model = "embedder";
  auto doc = json::parse(encode_openai_embeddings(req, {result}));
  // 3.0f, 4.0f, 12.0f as little-endian float32.
  EXPECT_EQ(doc["data"][0]["embedding"], "AABAQAAAgEAAAEBB");
  EXPECT_EQ(doc["data"][0]["index"], 0);
  EXPECT_EQ(doc["model"], "embedder");
  EXPECT_EQ(doc["object"], "list");
}

TEST(OpenAiErrors, HaveTheShapesClientsParse) {
  EXPECT_EQ(json::parse(encode_openai_error(404, "model_not_found", "no such model", "model")),
            json::parse(R"({"error":{"message":"no such model","type":"invalid_request_error",
                "param":"model","code":"model_not_found"}})"));
  EXPECT_EQ(json::parse(encode_openai_error(429, "overloaded", "busy"))["error"]["type"],
            "rate_limit_error");
  EXPECT_EQ(json::parse(encode_openai_error(429, "overloaded", "busy"))["error"]["param"],
            nullptr);
  EXPECT_EQ(json::parse(encode_tei_error(503, "down")),
            json::parse(R"({"error":"down","error_type":"backend"})"));
}

TEST(InfoGainResponse, AFailedItemsSourceIsNullAsInScoreResults) {
  info_gain_request_body req;
  req.positions = {0, 1, -1};
  req.errors = {"", "", "missing 'answers'"};
  item_result ok;
  ok.score = 0.25;
  ok.status = item_status::ok;
  ok.source = "ig_service";
  item_result failed;
  failed.status = item_status::failed;
  failed.code = errc::upstream_failed;
  failed.error = "HTTP 503";
  auto reply = json::parse(encode_info_gain_response(req, {ok, failed}));
  EXPECT_EQ(reply["results"][0]["source"], "ig_service");
  EXPECT_TRUE(reply["results"][1]["source"].is_null()) << reply.dump();
  EXPECT_TRUE(reply["results"][2].is_null());
  EXPECT_EQ(reply["errors"][1], "upstream_failed: HTTP 503");
}
