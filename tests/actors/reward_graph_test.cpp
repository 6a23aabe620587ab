// The reward-graph actor's judge graph with a stand-in scheduler: the chat calls it sends for
// an item (one per reference, n votes each, internal, at the item's priority and a little
// before its deadline), how it combines the replies (mean of votes, best reference, <think>
// ignored), and every way an item fails (no reference, no score, a score outside [0, 1], a
// failed call, a refused request). info_gain and em_info_gain run end to end in
// tests/e2e/test_local_models.py and test_info_gain.py.
#include "actors/reward_graph_actor.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>

#include "actors/messages.hpp"
#include "backends/reward_catalog.hpp"
#include "config/config.hpp"

using namespace arbiter;
using namespace arbiter::actors;
using namespace std::chrono_literals;

namespace {

/// How the stand-in scheduler answers each model call, and what it was sent.
struct call_script {
  std::mutex mutex;
  std::vector<score_request> seen;
  /// The result for one call; unset: the request is refused as `rejection`.
  std::function<item_result(const score_item&)> answer;
  std::string rejection = "queue_full";
};

caf::behavior stand_in_scheduler(caf::event_based_actor*, std::shared_ptr<call_script> s) {
  return {
    [s](score_atom, score_request& req, reply_callback& reply_to) {
      score_reply reply;
      std::lock_guard<std::mutex> guard{s->mutex};
      s->seen.push_back(req);
      if (!s->answer) {
        reply.admitted = false;
        reply.rejection = s->rejection;
        reply.reason = "the queue is full";
      } else {
        for (const auto& item : req.items) {
          reply.results.push_back(s->answer(*item));
        }
      }
      reply_to(std::move(reply));
    },
  };
}

/// A chat call's answer: these completions, from source "judge-a".
item_result texts(std::vector<std::string> completions) {
  auto output = std::make_shared<model_output>();
  for (auto& c : completions) {
    generated_text t;
    t.text = std::move(c);
    output->texts.push_back(std::move(t));
  }
  item_result r;
  r.status = item_status::ok;
  r.source = "judge-a";
  r.output = std::move(output);
  return r;
}

class RewardGraph : public ::testing::Test {
protected:
  RewardGraph() : system_(two_threads(caf_cfg_)), catalog_(config_) {
    script_ = std::make_shared<call_script>();
    scheduler_ = system_.spawn(stand_in_scheduler, script_);
    graph_ = spawn_reward_graph(system_, scheduler_, catalog_);
  }

  ~RewardGraph() override {
    caf::anon_send_exit(graph_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(scheduler_, caf::exit_reason::user_shutdown);
  }

  static caf::actor_system_config& two_threads(caf::actor_system_config& cfg) {
    cfg.set("scheduler.max-threads", size_t{2});
    return cfg;
  }

  /// A judge item for `candidate` against `references`, with `extra_info` (a JSON object).
  static shared_item judge_item(std::string candidate, std::vector<std::string> references,
                                std::string extra_info = {}) {
    score_item item;
    item.reward = "judge";
    item.kind = "judge";
    item.capability = "judge";
    item.solution_str = std::move(candidate);
    item.ground_truth = std::move(references);
    item.extra_info = std::move(extra_info);
    return std::make_shared<const score_item>(std::move(item));
  }

  /// Runs `items` as one batch through the graph actor; one outcome per item.
  std::vector<item_outcome> run(std::vector<shared_item> items, size_t priority = 0) {
    work_batch batch;
    batch.id = 1;
    batch.items = std::move(items);
    batch.priority = priority;
    batch.deadline = steady_clock::now() + 10s;
    deadline_ = batch.deadline;
    caf::scoped_actor self{system_};
    std::vector<item_outcome> out;
    self->request(graph_, 20s, work_atom::value, std::move(batch))
      .receive([&](work_result& r) { out = std::move(r.outcomes); },
               [&](caf::error& e) { ADD_FAILURE() << system_.render(e); });
    return out;
  }

  std::vector<score_request> seen() {
    std::lock_guard<std::mutex> guard{script_->mutex};
    return script_->seen;
  }

  /// Sets how the stand-in answers (under its lock: the actor reads it on its own thread).
  void answer_with(std::function<item_result(const score_item&)> answer) {
    std::lock_guard<std::mutex> guard{script_->mutex};
    script_->answer = std::move(answer);
  }

  void refuse_as(std::string rejection) {
    std::lock_guard<std::mutex> guard{script_->mutex};
    script_->answer = nullptr;
    script_->rejection = std::move(rejection);
  }

  caf::actor_system_config caf_cfg_;
  caf::actor_system system_;
  config::arbiter_config config_ = config::embedded_default();
  backends::reward_catalog catalog_;
  std::shared_ptr<call_script> script_;
  caf::actor scheduler_;
  caf::actor graph_;
  time_point deadline_;
};

} // namespace

TEST_F(RewardGraph, JudgeAveragesVotesAndKeepsTheBestReference) {
  answer_with([](const score_item& call) {
    // The reference is in the prompt; "a" earns 0.2 and 0.4, "b" 0.9 and 0.7.
    if (call.call->prompt.find("reference-b") != std::string::npos) {
      return texts({"<think>REWARD: 0.0</think> **REWARD**: 0.9", "reward = 0.7"});
    }
    return texts({"REWARD: 0.2", "REWARD: [0.4]"});
  });
  auto out = run({judge_item("candidate", {"reference-a", "reference-b"}, R"({"n": 2})")}, 2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].code, errc::none) << out[0].error;
  EXPECT_DOUBLE_EQ(out[0].score, 0.8);
  EXPECT_EQ(out[0].sources, (std::vector<std::string>{"judge-a"}));

  auto requests = seen();
  ASSERT_EQ(requests.size(), 1u);
  const auto& req = requests[0];
  EXPECT_TRUE(req.internal);
  EXPECT_EQ(req.priority, 2u);
  EXPECT_LT(req.deadline, deadline_);
  EXPECT_GT(req.deadline, deadline_ - 1s);
  ASSERT_EQ(req.items.size(), 2u);
  for (const auto& shared : req.items) {
    const auto& call = *shared;
    EXPECT_EQ(call.kind, "chat");
    EXPECT_EQ(call.capability, "chat");
    ASSERT_NE(call.call, nullptr);
    EXPECT_EQ(call.call->n, 2u);
    EXPECT_NE(call.call->prompt.find("candidate"), std::string::npos);
  }
}

TEST_F(RewardGraph, JudgeFailuresSayWhy) {
  answer_with([](const score_item& call) {
    if (call.call->prompt.find("no-score") != std::string::npos) {
      return texts({"I cannot decide."});
    }
    if (call.call->prompt.find("too-high") != std::string::npos) {
      return texts({"REWARD: 7"});
    }
    item_result failed;
    failed.status = item_status::failed;
    failed.code = errc::upstream_failed;
    failed.error = "judge-a answered 503";
    failed.retry_after_ms = 4500; // ejected for another 4.5 s
    return failed;
  });
  auto out = run({judge_item("x", {"no-score"}), judge_item("x", {"too-high"}),
                  judge_item("x", {"call-fails"}), judge_item("x", {})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].code, errc::reward_failed);
  EXPECT_EQ(out[0].error, "judge reply has no REWARD score: \"I cannot decide.\"");
  EXPECT_EQ(out[1].code, errc::reward_failed);
  EXPECT_EQ(out[1].error, "judge score 7 outside [0, 1]: \"REWARD: 7\"");
  EXPECT_EQ(out[2].code, errc::upstream_failed);
  EXPECT_EQ(out[2].error, "judge call 1 of 1 failed: judge-a answered 503");
  EXPECT_EQ(out[2].retry_after_ms, 4500) << "a trainer route's Retry-After";
  EXPECT_EQ(out[3].code, errc::reward_failed);
  EXPECT_EQ(out[3].error, "judge needs at least one reference in ground_truth");
  // Three items sent their calls; the one without a reference sent none.
  size_t calls = 0;
  for (const auto& req : seen()) {
    calls += req.items.size();
  }
  EXPECT_EQ(calls, 3u);
}

TEST_F(RewardGraph, AnItemWhoseCallsWereAllSharedSaysSoForItsStepsCacheHits) {
  // Each reference's call answered by: the cache (a), an identical call in flight (b), or a
  // call of its own (c). Only an item none of whose calls was made for it is coalesced.
  answer_with([](const score_item& call) {
    auto r = texts({"REWARD: 0.5"});
    r.cached = call.call->prompt.find("ref-a") != std::string::npos;
    r.coalesced = call.call->prompt.find("ref-b") != std::string::npos;
    return r;
  });
  auto out = run({judge_item("x", {"ref-a"}), judge_item("x", {"ref-b"}),
                  judge_item("x", {"ref-a", "ref-b"}), judge_item("x", {"ref-b", "ref-c"})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].cached);
  EXPECT_FALSE(out[0].coalesced);
  EXPECT_FALSE(out[1].cached);
  EXPECT_TRUE(out[1].coalesced);
  EXPECT_FALSE(out[2].cached);
  EXPECT_TRUE(out[2].coalesced) << "one call from the cache, one shared in flight";
  EXPECT_FALSE(out[3].cached);
  EXPECT_FALSE(out[3].coalesced) << "one of its calls was its own";
}

TEST_F(RewardGraph, ARefusedCallRequestFailsTheItemAsOverloadedOrShuttingDown) {
  auto out = run({judge_item("x", {"y"})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].code, errc::overloaded);
  EXPECT_EQ(out[0].error, "the reward's model calls were refused: the queue is full");
  refuse_as("draining");
  out = run({judge_item("x", {"y"})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].code, errc::shutting_down);
}
