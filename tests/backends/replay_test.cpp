// The replay log's records and the replayer, without files or actors: a record reads back as
// it was written (doubles bit for bit), and each reward kind replays from its evidence to the
// same score — or is reported as differing when the evidence or the item changed.
#include "backends/replay/replayer.hpp"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_rewards.hpp"
#include "backends/embedding_scoring.hpp"
#include "backends/reward_graphs.hpp"
#include "config/config.hpp"

using namespace arbiter;
using namespace arbiter::backends;
using namespace arbiter::backends::replay;
using json = nlohmann::json;

namespace {

const cpu_limits limits{};

score_item reward_item(const std::string& kind, std::string solution,
                       std::vector<std::string> references, std::string extra_info = {}) {
  score_item item;
  item.reward = kind;
  item.kind = kind;
  item.capability = capability_of(kind);
  item.solution_str = std::move(solution);
  item.ground_truth = std::move(references);
  item.extra_info = std::move(extra_info);
  item.step = "12";
  item.group = "g";
  return item;
}

/// The line the writer would write for `item` ended with `result`, read back.
record round_trip(const score_item& item, const item_result& result, bool internal = false) {
  return decode(encode(item, result, internal, "2026-11-25T10:00:00.000Z"));
}

item_result scored(const item_outcome& o, const std::string& source) {
  item_result r;
  r.status = o.code == errc::none ? item_status::ok : item_status::failed;
  r.score = o.score;
  r.code = o.code;
  r.error = o.error;
  r.source = source;
  r.detail = o.detail;
  r.extra = o.extra;
  r.evidence = o.evidence;
  return r;
}

item_result chat_answer(std::vector<std::string> texts) {
  auto output = std::make_shared<model_output>();
  for (auto& t : texts) {
    output->texts.push_back({std::move(t), 0.0, 0, "stop", {}, {}, false});
  }
  output->prompt_tokens = 40;
  output->completion_tokens = 5;
  output->model = "qwen3-8b";
  item_result r;
  r.status = item_status::ok;
  r.source = "llm";
  r.attempts = 1;
  r.output = std::move(output);
  return r;
}

/// Runs `item`'s graph as the graph actor does with the log on, answering each call with
/// `answer(call)`; returns the outcome with its evidence.
template <class Answer>
item_outcome run_graph(const score_item& item, const reward_catalog& catalog, Answer answer) {
  auto graph = make_reward_graph(std::make_shared<const score_item>(item), catalog);
  graph_trace trace;
  auto step = graph->start();
  while (!step.done()) {
    trace.calls(step.calls);
    std::vector<item_result> answers;
    for (const auto& call : step.calls) {
      answers.push_back(answer(call));
    }
    trace.answers(answers);
    step = graph->advance(answers);
  }
  step.outcome.evidence = trace.encode();
  return step.outcome;
}

} // namespace

namespace {

/// An em_info_gain rollout with its information and answer.
score_item em_rollout() {
  return reward_item("em_info_gain",
                     "<|im_start|>user\nQuestion: What is the capital?\n<|im_end|>\n"
                     "<|im_start|>assistant\n<information>Paris is it.</information>"
                     "<answer>Paris</answer>",
                     {"Paris"});
}

/// The nested info_gain item's answer: ΔIG `delta`.
item_result delta_answer(double delta) {
  item_result r;
  r.status = item_status::ok;
  r.score = delta;
  r.source = "reward_graph";
  r.detail = nlohmann::json{{"delta", delta}}.dump();
  return r;
}

} // namespace

TEST(ReplayLog, AnItemRecordReadsBackAsWritten) {
  auto item = reward_item("math_dapo", "Answer: 3", {"3", "three"}, R"({"strict_box_verify":true})");
  item.data_source = "math_dapo";
  item.options = R"({"format_score":0.1})";
  item.fallback = "lexical";
  item.route_suffix = "@a";
  item_result result;
  result.status = item_status::ok;
  result.score = 0.1 + 0.2; // not a short decimal
  result.source = "cpu";
  result.attempts = 2;
  result.extra = R"({"acc":true,"pred":"3"})";
  result.evidence = R"({"model":"m","vectors":[[0.30000000000000004,-1e-300]]})";
  auto r = round_trip(item, result, true);
  EXPECT_EQ(r.type, record_type::item);
  EXPECT_TRUE(r.internal);
  EXPECT_EQ(r.time, "2026-11-25T10:00:00.000Z");
  EXPECT_EQ(r.item.reward, item.reward);
  EXPECT_EQ(r.item.kind, item.kind);
  EXPECT_EQ(r.item.solution_str, item.solution_str);
  EXPECT_EQ(r.item.ground_truth, item.ground_truth);
  EXPECT_EQ(r.item.extra_info, item.extra_info);
  EXPECT_EQ(r.item.options, item.options);
  EXPECT_EQ(r.item.data_source, item.data_source);
  EXPECT_EQ(r.item.fallback, item.fallback);
  EXPECT_EQ(r.item.route_suffix, item.route_suffix);
  EXPECT_EQ(r.item.step, "12");
  EXPECT_EQ(r.item.group, "g");
  EXPECT_EQ(r.result.score, 0.1 + 0.2);
  EXPECT_EQ(r.result.attempts, 2u);
  EXPECT_EQ(r.result.extra, result.extra);
  auto evidence = decode_embedding(r.result.evidence);
  EXPECT_EQ(evidence.vectors[0][0], 0.30000000000000004);
  EXPECT_EQ(evidence.vectors[0][1], -1e-300);
}

TEST(ReplayLog, ACallRecordKeepsTheRequestAndTheRawResponse) {
  score_item item;
  item.reward = "judge/chat";
  item.kind = "chat";
  item.capability = "chat";
  model_call call;
  call.prompt = "Grade this";
  call.model = "qwen";
  call.temperature = 0.7;
  call.max_tokens = 64;
  call.n = 3;
  call.enable_thinking = false;
  call.stop = {"\n\n"};
  call.seed = 42;
  item.call = std::make_shared<const model_call>(call);
  auto result = chat_answer({"REWARD: 0.5", "REWARD: 1", "REWARD: 0.25"});
  auto line = encode(item, result, true, "t");
  auto j = json::parse(line);
  EXPECT_EQ(j["type"], "call");
  EXPECT_FALSE(j["result"].contains("coalesced"));
  // A call answered by an identical one in flight repeats its answer and usage, marked.
  auto follower = result;
  follower.coalesced = true;
  EXPECT_EQ(json::parse(encode(item, follower, true, "t"))["result"]["coalesced"], true);
  EXPECT_TRUE(decode(encode(item, follower, true, "t")).result.coalesced);
  EXPECT_EQ(j["call"]["prompt_hash"], prompt_hash(call));
  EXPECT_EQ(j["result"]["output"]["prompt_tokens"], 40);
  auto r = decode(line);
  ASSERT_TRUE(r.item.call);
  EXPECT_EQ(r.item.call->prompt, "Grade this");
  EXPECT_EQ(r.item.call->temperature, 0.7);
  EXPECT_EQ(r.item.call->max_tokens, 64u);
  EXPECT_EQ(r.item.call->n, 3u);
  EXPECT_EQ(r.item.call->enable_thinking, false);
  EXPECT_EQ(r.item.call->stop, call.stop);
  EXPECT_EQ(r.item.call->seed, 42u);
  ASSERT_TRUE(r.result.output);
  ASSERT_EQ(r.result.output->texts.size(), 3u);
  EXPECT_EQ(r.result.output->texts[2].text, "REWARD: 0.25");
  EXPECT_EQ(r.result.output->texts[2].finish_reason, "stop");
  EXPECT_EQ(r.result.output->completion_tokens, 5u);
  EXPECT_EQ(r.result.output->model, "qwen3-8b");
}

TEST(ReplayLog, PromptHashesSeparateTheirParts) {
  model_call a;
  a.prompt = "ab";
  model_call b;
  b.prompt = "a";
  b.hypothesis = "b";
  EXPECT_NE(prompt_hash(a), prompt_hash(b));
  EXPECT_EQ(prompt_hash(a).size(), 64u);
  EXPECT_EQ(prompt_hash(a), prompt_hash(a));
}

TEST(ReplayLog, AGapRecordSaysHowManyRecordsAreMissing) {
  auto r = decode(encode_gap(42, "2026-01-01T00:00:00.000Z"));
  EXPECT_EQ(r.type, record_type::gap);
  EXPECT_EQ(r.dropped, 42u);
  EXPECT_EQ(r.time, "2026-01-01T00:00:00.000Z");
  // A count that is not one is an unreadable line, not a wrapped or truncated number.
  for (const char* bad : {R"({"type":"gap","dropped":-5})", R"({"type":"gap","dropped":1e300})",
                          R"({"type":"gap","dropped":"7"})"}) {
    EXPECT_THROW(decode(bad), std::invalid_argument) << bad;
  }
}

TEST(ReplayLog, BadLinesAreRefusedWithTheReason) {
  EXPECT_THROW(decode("not json"), std::invalid_argument);
  EXPECT_THROW(decode(R"({"type":"other"})"), std::invalid_argument);
  EXPECT_THROW(decode(R"({"type":"item","reward":"x"})"), std::invalid_argument);
  try {
    decode(R"({"type":"item","reward":"x","kind":"lexical","solution_str":"a",)"
           R"("ground_truth":[],"result":{"status":"weird","score":0}})");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string{e.what()}.find("weird"), std::string::npos) << e.what();
  }
  EXPECT_EQ(decode(encode_start("1.0", "t")).type, record_type::start);
}

TEST(Replay, CpuRewardsAndFallbacksRecomputeFromTheItem) {
  reward_catalog catalog{config::arbiter_config{}};
  for (const auto& [kind, solution, reference] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
         {"lexical", "the cat sat", "the cat sat down"},
         {"exact_match", "Paris!", "paris"},
         {"gsm8k", "so #### 72", "72"},
         {"math", "\\boxed{\\frac12}", "\\frac{1}{2}"},
         {"math_dapo", "Answer: 5", "5"}}) {
    auto item = reward_item(kind, solution, {reference});
    auto r = round_trip(item, scored(cpu::evaluate(item, limits), "cpu"));
    auto got = replay_item(r, catalog, limits);
    EXPECT_EQ(got.outcome, verdict::identical) << kind << ": " << got.reason;
    // A score that was not what the function gives is caught, however small the change.
    auto changed = r;
    changed.result.score = std::nextafter(r.result.score, 2.0);
    EXPECT_EQ(replay_item(changed, catalog, limits).outcome, verdict::differs) << kind;
  }
  // math_dapo's extra fields (acc, pred) are compared too.
  auto dapo = reward_item("math_dapo", "Answer: 5", {"5"});
  auto dapo_record = round_trip(dapo, scored(cpu::evaluate(dapo, limits), "cpu"));
  ASSERT_NE(dapo_record.result.extra.find("pred"), std::string::npos) << dapo_record.result.extra;
  dapo_record.result.extra = R"({"acc":true,"pred":"6"})";
  auto extra = replay_item(dapo_record, catalog, limits);
  EXPECT_EQ(extra.outcome, verdict::differs);
  EXPECT_NE(extra.reason.find("extra"), std::string::npos) << extra.reason;

  auto item = reward_item("embedding", "The Cat sat", {"the cat SAT down"});
  item.fallback = "lexical";
  auto fallback = scored(cpu::evaluate_fallback(item, limits), "lexical");
  fallback.status = item_status::fallback;
  auto got = replay_item(round_trip(item, fallback), catalog, limits);
  EXPECT_EQ(got.outcome, verdict::identical) << got.reason;
}

TEST(Replay, EmbeddingScoresRecomputeFromTheRecordedVectors) {
  reward_catalog catalog{config::arbiter_config{}};
  auto item = std::make_shared<const score_item>(
    reward_item("embedding", "blue whale", {"the blue whale", "a red fox"}));
  std::vector<shared_item> items{item};
  auto inputs = embedding_texts(items, "minilm");
  ASSERT_EQ(inputs.texts.size(), 3u);
  std::vector<std::vector<double>> vectors = {{0.1, 0.7, 0.2}, {0.15, 0.65, 0.3}, {-0.4, 0.1, 0.9}};
  auto outcome = score_embeddings(items, "minilm", inputs, vectors, /*keep_vectors=*/true).front();
  ASSERT_EQ(outcome.code, errc::none) << outcome.error;
  EXPECT_EQ(decode_embedding(outcome.evidence).vectors, vectors);
  EXPECT_TRUE(score_embeddings(items, "minilm", inputs, vectors).front().evidence.empty());
  auto r = round_trip(*item, scored(outcome, "tei"));
  auto got = replay_item(r, catalog, limits);
  EXPECT_EQ(got.outcome, verdict::identical) << got.reason;
  EXPECT_EQ(got.recomputed.score, outcome.score);

  auto tampered = r;
  auto e = decode_embedding(r.result.evidence);
  e.vectors[1][0] += 0.01;
  tampered.result.evidence = encode(e);
  EXPECT_EQ(replay_item(tampered, catalog, limits).outcome, verdict::differs);
  auto short_of_vectors = r;
  e.vectors.pop_back();
  short_of_vectors.result.evidence = encode(e);
  auto why = replay_item(short_of_vectors, catalog, limits);
  EXPECT_EQ(why.outcome, verdict::differs);
  EXPECT_NE(why.reason.find("needs 3 vectors"), std::string::npos) << why.reason;
}

TEST(Replay, JudgeScoresRecomputeFromTheRecordedReplies) {
  reward_catalog catalog{config::arbiter_config{}};
  auto item = reward_item("judge", "answer", {"ref one", "ref two"}, R"({"votes":2})");
  int k = 0;
  auto outcome = run_graph(item, catalog, [&k](const score_item&) {
    ++k;
    return chat_answer(k == 1 ? std::vector<std::string>{"REWARD: 0.3", "REWARD: 0.4"}
                              : std::vector<std::string>{"REWARD: 0.9", "no score here"});
  });
  ASSERT_EQ(outcome.code, errc::none) << outcome.error;
  EXPECT_DOUBLE_EQ(outcome.score, 0.9);
  auto r = round_trip(item, scored(outcome, "llm"));
  auto got = replay_item(r, catalog, limits);
  EXPECT_EQ(got.outcome, verdict::identical) << got.reason;

  // A different template makes different prompts: the replay says so rather than scoring.
  auto changed = r;
  changed.item.extra_info = R"({"votes":2,"problem":"another problem"})";
  auto why = replay_item(changed, catalog, limits);
  EXPECT_EQ(why.outcome, verdict::differs);
  EXPECT_NE(why.reason.find("prompt differs"), std::string::npos) << why.reason;

  // A judge reply without a score fails the item, then and now.
  auto failing = run_graph(item, catalog, [](const score_item&) {
    return chat_answer({"I refuse", "no"});
  });
  ASSERT_EQ(failing.code, errc::reward_failed);
  EXPECT_EQ(replay_item(round_trip(item, scored(failing, "llm")), catalog, limits).outcome,
            verdict::identical);
}

TEST(Replay, InfoGainAndEmInfoGainRecomputeFromSamplesAndEntailments) {
  reward_catalog catalog{config::arbiter_config{}};
  auto item = reward_item("info_gain", "Paris is the capital of France.", {"Paris"},
                          R"({"question":"What is the capital?","num_samples":3})");
  uint32_t nli = 0;
  auto answer = [&nli](const score_item& call) {
    if (call.kind == "generate") {
      auto r = chat_answer({"Paris", "paris, France", "Lyon"});
      auto out = std::make_shared<model_output>(*r.output);
      for (auto& t : out->texts) {
        t.mean_logprob = -0.25 * static_cast<double>(t.text.size() % 3 + 1);
        t.tokens = 2;
      }
      r.output = out;
      return r;
    }
    auto out = std::make_shared<model_output>();
    out->entailment = 0.1 + 0.17 * (nli++ % 5);
    out->neutral = 0.5 * (1.0 - out->entailment);
    out->contradiction = 1.0 - out->entailment - out->neutral;
    item_result r;
    r.status = item_status::ok;
    r.source = "tei";
    r.output = out;
    return r;
  };
  auto outcome = run_graph(item, catalog, answer);
  ASSERT_EQ(outcome.code, errc::none) << outcome.error;
  auto r = round_trip(item, scored(outcome, "llm"));
  auto got = replay_item(r, catalog, limits);
  EXPECT_EQ(got.outcome, verdict::identical) << got.reason;
  EXPECT_EQ(got.recomputed.score, outcome.score);
  // One entailment changed in the log: a different ΔIG.
  auto j = json::parse(r.result.evidence);
  j["steps"][1]["answers"][0]["output"]["entailment"] = 0.999;
  auto tampered = r;
  tampered.result.evidence = j.dump();
  EXPECT_EQ(replay_item(tampered, catalog, limits).outcome, verdict::differs);

  auto em = em_rollout();
  auto nested = run_graph(em, catalog, [](const score_item& call) {
    EXPECT_EQ(call.kind, "info_gain");
    return delta_answer(0.3125);
  });
  ASSERT_EQ(nested.code, errc::none) << nested.error;
  auto em_got = replay_item(round_trip(em, scored(nested, "llm")), catalog, limits);
  EXPECT_EQ(em_got.outcome, verdict::identical) << em_got.reason;
  EXPECT_EQ(em_got.recomputed.score, nested.score);
}

TEST(Replay, ItemsWithNothingRecordedAreNotReplayableAndSayWhy) {
  reward_catalog catalog{config::arbiter_config{}};
  auto item = reward_item("judge", "a", {"b"});
  item_result late;
  late.status = item_status::failed;
  late.code = errc::deadline_exceeded;
  late.error = "deadline passed";
  auto got = replay_item(round_trip(item, late), catalog, limits);
  EXPECT_EQ(got.outcome, verdict::not_replayable);
  EXPECT_NE(got.reason.find("deadline_exceeded"), std::string::npos) << got.reason;

  auto ig = reward_item("info_gain", "ctx", {"a"});
  item_result whole;
  whole.status = item_status::ok;
  whole.score = 0.5;
  whole.source = "ig-service";
  got = replay_item(round_trip(ig, whole), catalog, limits);
  EXPECT_EQ(got.outcome, verdict::not_replayable);
  EXPECT_NE(got.reason.find("ig-service"), std::string::npos) << got.reason;

  auto cpu = reward_item("lexical", "a", {"a"});
  got = replay_item(round_trip(cpu, late), catalog, limits);
  EXPECT_EQ(got.outcome, verdict::not_replayable) << "a CPU item that never ran";

  // A scored judge or embedding item always records its evidence: one without is damaged,
  // not "computed whole" (a tampered record passed as not replayable, exit 0).
  for (const char* kind : {"judge", "embedding"}) {
    item_result scored_whole = whole;
    scored_whole.source = "judge-fake";
    got = replay_item(round_trip(reward_item(kind, "a", {"b"}), scored_whole), catalog, limits);
    EXPECT_EQ(got.outcome, verdict::differs) << kind;
    EXPECT_NE(got.reason.find("the record is damaged"), std::string::npos) << got.reason;
  }
}

TEST(Replay, WhatThisBinaryOrCatalogLacksIsNamed) {
  reward_catalog catalog{config::arbiter_config{}};
  // A kind from another version: it differs (exit 1), naming the kind.
  auto item = reward_item("lexical", "a", {"a"});
  auto r = round_trip(item, scored(cpu::evaluate(item, limits), "cpu"));
  r.item.kind = "newkind";
  auto got = replay_item(r, catalog, limits);
  EXPECT_EQ(got.outcome, verdict::differs);
  EXPECT_NE(got.reason.find("'newkind' is not one this binary knows"), std::string::npos)
    << got.reason;

  // em_info_gain naming an info_gain reward this catalog lacks: the graph's own reason.
  auto em = em_rollout();
  auto nested = run_graph(em, catalog, [](const score_item&) { return delta_answer(0.25); });
  ASSERT_EQ(nested.code, errc::none) << nested.error;
  auto missing = round_trip(em, scored(nested, "llm"));
  missing.item.options = R"({"info_gain_reward":"ig_hard"})";
  got = replay_item(missing, catalog, limits);
  EXPECT_EQ(got.outcome, verdict::differs);
  EXPECT_NE(got.reason.find("ig_hard"), std::string::npos) << got.reason;
}

TEST(ReplayLog, AnItemKeyNamesWhatDecidesItsScore) {
  auto a = reward_item("embedding", "blue whale", {"whale", "fox"});
  auto b = a;
  b.step = "other step"; // not part of the score
  b.group = "other group";
  EXPECT_EQ(item_key(a), item_key(b));
  for (auto change : {+[](score_item& x) { x.extra_info = R"({"target_gt":1})"; },
                      +[](score_item& x) { x.ground_truth = {"whalefox"}; },
                      +[](score_item& x) { x.options = R"({"dimensions":8})"; },
                      +[](score_item& x) { x.reward = "embedding2"; }}) {
    auto c = a;
    change(c);
    EXPECT_NE(item_key(a), item_key(c));
  }
}
