// The router without a network: requests handed to `router::handle` as the HTTP server hands
// them, a stand-in scheduler actor that records what reaches it and answers with set scores or
// a refusal. What the route table decides before any route runs (404, 401, 405, 415), what a
// scoring route sends to the scheduler, how its answer and its refusals are written, and
// draining. The same paths over real HTTP are in tests/e2e.
#include "net/routes.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "backends/reward_catalog.hpp"
#include "common/metrics.hpp"
#include "config/config.hpp"
#include "net/http_metrics.hpp"
#include "scheduler/scheduler_metrics.hpp"

using namespace arbiter;
using namespace arbiter::net;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

/// What the stand-in scheduler saw, and how it answers.
struct scheduler_script {
  std::mutex mutex;
  std::vector<actors::score_request> seen;
  /// When set, requests are refused with this answer: every one, or the next `refusals`.
  std::optional<actors::score_reply> refusal;
  int refusals = -1;
  /// The tickets of `abandon_atom`, in order.
  std::vector<uint64_t> abandoned;
  /// When set, the next request is not answered: its answer waits in `parked` for the test.
  bool park_next = false;
  actors::reply_callback parked;
};

/// Answers each request with scores 0.25, 1.25, 2.25, ... (one per item, source "fake"), or
/// with the script's refusal.
caf::behavior stand_in_scheduler(caf::event_based_actor*, std::shared_ptr<scheduler_script> s) {
  auto answer = [s](actors::score_request& req, actors::reply_callback& reply_to) {
    actors::score_reply reply;
    {
      std::lock_guard<std::mutex> guard{s->mutex};
      s->seen.push_back(req);
      if (s->park_next) {
        s->park_next = false;
        s->parked = std::move(reply_to);
        return;
      }
      if (s->refusal && s->refusals != 0) {
        reply = *s->refusal;
        if (s->refusals > 0) {
          --s->refusals;
        }
      }
    }
    if (reply.admitted) {
      // A ticket abandoned before its request came: its items end client_closed, as the
      // scheduler's `early_abandons` make them.
      bool closed = false;
      {
        std::lock_guard<std::mutex> guard{s->mutex};
        closed = req.ticket != 0
                 && std::find(s->abandoned.begin(), s->abandoned.end(), req.ticket)
                      != s->abandoned.end();
      }
      for (size_t i = 0; i < req.items.size(); ++i) {
        item_result r;
        if (closed) {
          r.code = errc::client_closed;
          r.error = "the client closed its connection";
        } else {
          r.score = 0.25 + static_cast<double>(i);
          r.status = item_status::ok;
          r.source = "fake";
        }
        reply.results.push_back(std::move(r));
      }
    }
    reply_to(std::move(reply));
  };
  return {
    [answer](actors::score_atom, actors::score_request& req, actors::reply_callback& to) {
      answer(req, to);
    },
    [answer](actors::score_atom, std::vector<actors::score_submission>& batch) {
      for (auto& one : batch) {
        answer(one.request, one.reply_to);
      }
    },
    [s](actors::abandon_atom, uint64_t ticket) {
      std::lock_guard<std::mutex> guard{s->mutex};
      s->abandoned.push_back(ticket);
    },
  };
}

class Router : public ::testing::Test {
protected:
  Router()
    : system_(two_threads(caf_cfg_)), http_metrics_(registry_),
      scheduler_metrics_(registry_, {"high", "normal", "low"}) {
    config_.protocols.reward = "lexical";
    catalog_ = std::make_unique<backends::reward_catalog>(config_);
    script_ = std::make_shared<scheduler_script>();
    scheduler_ = system_.spawn(stand_in_scheduler, script_);
  }

  ~Router() override {
    caf::anon_send_exit(scheduler_, caf::exit_reason::user_shutdown);
  }

  static caf::actor_system_config& two_threads(caf::actor_system_config& cfg) {
    cfg.set("scheduler.max-threads", size_t{2});
    return cfg;
  }

  /// A router over the stand-in scheduler (or `shards`, the stand-in first); `keys` makes
  /// every keyed route need one of them.
  std::unique_ptr<router> make_router(std::vector<std::string> keys = {},
                                      std::vector<caf::actor> shards = {}) {
    router_context ctx;
    ctx.system = &system_;
    ctx.scheduler = scheduler_;
    ctx.config = &config_;
    ctx.catalog = catalog_.get();
    ctx.registry = &registry_;
    ctx.metrics = &http_metrics_;
    ctx.scheduler_metrics = &scheduler_metrics_;
    if (!keys.empty()) {
      ctx.keys = api_keys{keys};
    }
    ctx.shards = std::move(shards);
    return std::make_unique<router>(std::move(ctx));
  }

  /// Hands one request to `r` and waits for its reply.
  static http_reply call(router& r, const std::string& method, const std::string& target,
                         std::string body = {},
                         const std::string& content_type = "application/json",
                         const std::string& authorization = {},
                         const std::string& step = {},
                         const std::string& content_encoding = {}) {
    std::promise<http_reply> promise;
    auto future = promise.get_future();
    http_request req{method,          target, authorization, content_type, std::move(body),
                     step,            content_encoding};
    r.handle(
      std::move(req), [&promise](http_reply reply) { promise.set_value(std::move(reply)); },
      [](std::function<void()> fn) { fn(); });
    if (future.wait_for(10s) != std::future_status::ready) {
      ADD_FAILURE() << method << " " << target << ": no reply within 10 s";
      return {};
    }
    return future.get();
  }

  static std::string header(const http_reply& r, const std::string& name) {
    for (const auto& [key, value] : r.headers) {
      if (key == name) {
        return value;
      }
    }
    return {};
  }

  /// From now on the stand-in scheduler refuses every request so (or the next `count`).
  void refuse_all(const std::string& rejection, const std::string& reason,
                  int64_t retry_after_s, int count = -1) {
    actors::score_reply refusal;
    refusal.admitted = false;
    refusal.rejection = rejection;
    refusal.reason = reason;
    refusal.retry_after_s = retry_after_s;
    std::lock_guard<std::mutex> guard{script_->mutex};  // the actor reads it on its thread
    script_->refusal = refusal;
    script_->refusals = count;
  }

  std::vector<actors::score_request> seen() {
    std::lock_guard<std::mutex> guard{script_->mutex};
    return script_->seen;
  }

  std::vector<uint64_t> abandoned() {
    std::lock_guard<std::mutex> guard{script_->mutex};
    return script_->abandoned;
  }

  /// Waits up to 10 s until the router holds `n` requests for a refusal's Retry-After
  /// (arbiter_held_requests).
  bool held_now(double n) {
    auto until = std::chrono::steady_clock::now() + 10s;
    while (http_metrics_.held_now.Value() != n) {
      if (std::chrono::steady_clock::now() > until) {
        return false;
      }
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  /// Waits up to 10 s until the stand-in scheduler has seen `n` requests.
  bool seen_at_least(size_t n) {
    auto until = std::chrono::steady_clock::now() + 10s;
    while (seen().size() < n) {
      if (std::chrono::steady_clock::now() > until) {
        return false;
      }
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  caf::actor_system_config caf_cfg_;
  caf::actor_system system_;
  metrics_registry registry_;
  http_metrics http_metrics_;
  scheduler::scheduler_metrics scheduler_metrics_;
  config::arbiter_config config_ = config::embedded_default();
  std::unique_ptr<backends::reward_catalog> catalog_;
  std::shared_ptr<scheduler_script> script_;
  caf::actor scheduler_;
};

const std::string two_items = R"({"items": [
  {"solution_str": "Paris", "ground_truth": "paris", "reward": "lexical"},
  {"solution_str": "4", "ground_truth": ["4", "four"], "reward": "exact_match",
   "priority": "high"}]})";

} // namespace

TEST_F(Router, ScoreSendsResolvedItemsToTheSchedulerAndWritesItsAnswer) {
  auto r = make_router();
  auto reply = call(*r, "POST", "/v1/score", two_items);
  ASSERT_EQ(reply.status, 200u) << reply.body;
  auto doc = json::parse(reply.body);
  EXPECT_EQ(doc["scores"], json::parse("[0.25, 1.25]"));
  EXPECT_EQ(doc["results"][1]["status"], "ok");
  EXPECT_EQ(doc["results"][1]["source"], "fake");

  auto requests = seen();
  ASSERT_EQ(requests.size(), 1u);
  const auto& req = requests[0];
  ASSERT_EQ(req.items.size(), 2u);
  EXPECT_EQ(req.items[0]->kind, "lexical");
  EXPECT_EQ(req.items[0]->capability, "cpu");
  EXPECT_EQ(req.items[1]->kind, "exact_match");
  EXPECT_EQ(req.items[1]->ground_truth, (std::vector<std::string>{"4", "four"}));
  EXPECT_FALSE(req.internal);
  // The request's deadline is the default one, from now.
  const auto left = req.deadline - steady_clock::now();
  EXPECT_GT(left, config_.scheduler.default_deadline - 5s);
  EXPECT_LE(left, config_.scheduler.default_deadline);
}

TEST_F(Router, TheRouteTableAnswersBeforeAnyRouteRuns) {
  auto r = make_router({"k-1"});
  EXPECT_EQ(call(*r, "GET", "/nowhere").status, 404u);
  // No key, a wrong key, then the right key.
  EXPECT_EQ(call(*r, "POST", "/v1/score", two_items).status, 401u);
  EXPECT_EQ(call(*r, "POST", "/v1/score", two_items, "application/json", "Bearer k-2").status,
            401u);
  auto ok = call(*r, "POST", "/v1/score", two_items, "application/json", "Bearer k-1");
  EXPECT_EQ(ok.status, 200u) << ok.body;
  // /health needs no key; a keyed route's wrong method is 405 once the key is right.
  EXPECT_EQ(call(*r, "GET", "/health").status, 200u);
  EXPECT_EQ(call(*r, "GET", "/v1/score", {}, "application/json", "Bearer k-1").status, 405u);
  auto media = call(*r, "POST", "/v1/score", two_items, "text/plain", "Bearer k-1");
  EXPECT_EQ(media.status, 415u);
  EXPECT_NE(media.body.find("Content-Type"), std::string::npos) << media.body;
  // Only the one accepted request reached the scheduler.
  EXPECT_EQ(seen().size(), 1u);
}

TEST_F(Router, OnlyTheScoringRoutesAreWatchedForAHangUp) {
  auto r = make_router();
  for (const char* target : {"/v1/score", "/v1/score?x=1", "/compute_info_gain", "/get_reward",
                             "/remote_rm", "/v1/chat/completions", "/v1/embeddings", "/embed",
                             "/predict"}) {
    EXPECT_TRUE(r->abandonable(target)) << target;
  }
  for (const char* target : {"/health", "/info", "/metrics", "/v1/models", "/v1/steps",
                             "/v1/steps/step-1", "/nope", ""}) {
    EXPECT_FALSE(r->abandonable(target)) << target;
  }
}

TEST_F(Router, AnEncodedBodyIs415NamingContentEncodingAndAByteOrderMarkIsSkipped) {
  auto r = make_router();
  auto gzip = call(*r, "POST", "/v1/score", "\x1f\x8b\x08", "application/json", {}, {}, "gzip");
  EXPECT_EQ(gzip.status, 415u);
  auto doc = json::parse(gzip.body);
  EXPECT_EQ(doc["error"]["field"], "Content-Encoding") << gzip.body;
  EXPECT_NE(gzip.body.find("gzip is not supported"), std::string::npos) << gzip.body;
  EXPECT_EQ(header(gzip, "Accept-Encoding"), "identity");
  // OpenAI routes refuse it in OpenAI's shape.
  auto chat = call(*r, "POST", "/v1/chat/completions", "{}", "application/json", {}, {}, "br");
  EXPECT_EQ(chat.status, 415u);
  EXPECT_EQ(json::parse(chat.body)["error"]["type"], "invalid_request_error") << chat.body;
  EXPECT_TRUE(seen().empty());
  // `identity` is the body as sent, and a UTF-8 byte order mark before the JSON is skipped.
  auto plain = call(*r, "POST", "/v1/score", "\xEF\xBB\xBF" + two_items, "application/json", {},
                    {}, " Identity ");
  ASSERT_EQ(plain.status, 200u) << plain.body;
  EXPECT_EQ(json::parse(plain.body)["scores"], json::parse("[0.25, 1.25]"));
  EXPECT_EQ(seen().size(), 1u);
}

TEST_F(Router, AStepHeaderThatIsNotUtf8IsRefusedNamingIt) {
  auto r = make_router();
  auto reply = call(*r, "POST", "/v1/score", two_items, "application/json", {}, "epoch-\xfc");
  EXPECT_EQ(reply.status, 400u);
  EXPECT_EQ(json::parse(reply.body)["error"]["field"], "X-Arbiter-Step") << reply.body;
  EXPECT_TRUE(seen().empty());
}

TEST_F(Router, ABadBodyIsRefusedNamingItsFieldAndNeverReachesTheScheduler) {
  auto r = make_router();
  auto reply = call(*r, "POST", "/v1/score", R"({"items": [{"solution_str": 5}]})");
  EXPECT_EQ(reply.status, 400u);
  auto doc = json::parse(reply.body);
  EXPECT_EQ(doc["error"]["field"], "items[0].solution_str") << reply.body;
  EXPECT_TRUE(seen().empty());
}

TEST_F(Router, ASchedulerRefusalBecomes429WithRetryAfter) {
  refuse_all("queue_full", "the normal queue is full", 7);
  auto r = make_router();
  auto reply = call(*r, "POST", "/v1/score", two_items);
  EXPECT_EQ(reply.status, 429u) << reply.body;
  EXPECT_EQ(header(reply, "Retry-After"), "7");
  EXPECT_NE(reply.body.find("the normal queue is full"), std::string::npos) << reply.body;
}

TEST_F(Router, TrainerRoutesHoldARefusalForItsRetryAfterWithinTheDeadline) {
  // OpenRLHF sends a refused sample again at once, 5 times 1 s apart, whatever Retry-After
  // says (helper-72: 96 of 320 samples lost their rewards in 5 s). The trainer routes wait
  // the Retry-After out for it, within the request's deadline, and send it again;
  // /v1/score answers at once.
  refuse_all("deadline_unmeetable", "expected to be answered after its deadline", 1);
  config_.scheduler.default_deadline = 1500ms;
  auto r = make_router();
  const std::string sample = R"({"query": ["Q? 4"], "prompts": ["Q?"], "labels": ["4"]})";
  auto timed = [&](const std::string& target, const std::string& body) {
    auto start = std::chrono::steady_clock::now();
    auto reply = call(*r, "POST", target, body);
    return std::make_pair(reply, std::chrono::steady_clock::now() - start);
  };
  // Held 1 s, sent again, refused again and held the rest of its deadline.
  auto [held, held_for] = timed("/get_reward", sample);
  EXPECT_EQ(held.status, 429u) << held.body;
  EXPECT_GE(held_for, 1400ms);
  EXPECT_EQ(header(held, "Retry-After"), "1");
  EXPECT_NE(held.body.find("expected to be answered after its deadline (held 14"),
            std::string::npos)
    << held.body;
  EXPECT_NE(held.body.find(" ms for a client that retries at once; tried 2 times)"),
            std::string::npos)
    << held.body;
  ASSERT_EQ(seen().size(), 2u);
  EXPECT_EQ(seen()[1].items.at(0), seen()[0].items.at(0));  // the same item, not a copy
  EXPECT_EQ(seen()[1].deadline, seen()[0].deadline);
  auto [now, now_for] = timed("/v1/score", two_items);
  EXPECT_EQ(now.status, 429u) << now.body;
  EXPECT_LT(now_for, 500ms);
  EXPECT_EQ(seen().size(), 3u);
  // A Retry-After past the deadline is held to the deadline, and what is left of it is said.
  refuse_all("deadline_unmeetable", "expected to be answered after its deadline", 30);
  auto [capped, capped_for] =
    timed("/remote_rm", R"({"prompt": "Q?", "response": "4", "label": "4"})");
  EXPECT_EQ(capped.status, 429u) << capped.body;
  EXPECT_GE(capped_for, 1300ms);
  EXPECT_LT(capped_for, 5s);
  EXPECT_EQ(header(capped, "Retry-After"), "29");
  EXPECT_NE(capped.body.find("retries at once; tried once)"), std::string::npos) << capped.body;
  EXPECT_EQ(seen().size(), 4u);  // not sent again: its deadline had come
}

TEST_F(Router, AHeldRequestSentAgainIsAnsweredWithItsScores) {
  // One attempt of a client is scored once the queue has room, held as long as it is full,
  // where its Retry-After alone answered it 429 (and OpenRLHF's 5 attempts spanned 5
  // Retry-Afters, not 5 deadlines).
  refuse_all("queue_full", "the normal queue is full", 1, 2);
  config_.scheduler.default_deadline = 5000ms;
  auto r = make_router();
  auto start = std::chrono::steady_clock::now();
  auto reply = call(*r, "POST", "/get_reward",
                    R"({"query": ["Q? 4"], "prompts": ["Q?"], "labels": ["4"]})");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(reply.status, 200u) << reply.body;
  EXPECT_EQ(json::parse(reply.body)["rewards"], json::parse("[0.25]")) << reply.body;
  EXPECT_GE(took, 1900ms);
  EXPECT_LT(took, 4s);
  EXPECT_EQ(seen().size(), 3u);
}

TEST_F(Router, ARequestSentAgainTooLateForItsWorkIsAnsweredTheHeldRefusal) {
  // Admission says 413 to a request whose work alone takes more than twice the time it has
  // left: sent again near its deadline, it was not too large when it came.
  refuse_all("queue_full", "the normal queue is full", 1);
  config_.scheduler.default_deadline = 5000ms;
  auto r = make_router();
  auto reply = std::async(std::launch::async, [&] {
    return call(*r, "POST", "/get_reward",
                R"({"query": ["Q? 4"], "prompts": ["Q?"], "labels": ["4"]})");
  });
  ASSERT_TRUE(seen_at_least(1));
  refuse_all("too_large", "its item alone takes about 9000 ms", 0);
  auto answer = reply.get();
  EXPECT_EQ(answer.status, 429u) << answer.body;
  EXPECT_EQ(header(answer, "Retry-After"), "1");
  EXPECT_NE(answer.body.find("the normal queue is full (held 1000 ms for a client that retries "
                             "at once; tried 2 times)"),
            std::string::npos)
    << answer.body;
  EXPECT_EQ(seen().size(), 2u);
}

TEST_F(Router, AHangUpEndsAHeldRequestAndTheOneSentAgain) {
  refuse_all("queue_full", "the normal queue is full", 1);
  config_.scheduler.default_deadline = 20000ms;
  auto r = make_router();
  std::promise<http_reply> promise;
  auto future = promise.get_future();
  http_request req{"POST", "/get_reward", "", "application/json",
                   R"({"query": ["Q? 4"], "prompts": ["Q?"], "labels": ["4"]})", "", ""};
  req.ticket = 7;
  r->handle(
    std::move(req), [&promise](http_reply reply) { promise.set_value(std::move(reply)); },
    [](std::function<void()> fn) { fn(); });
  ASSERT_TRUE(seen_at_least(1));
  refuse_all("queue_full", "the normal queue is full", 5);
  ASSERT_TRUE(seen_at_least(2));  // sent again after 1 s, and held for 5 s
  // Sent again under a ticket of its own: a refused part of a request split among shards
  // leaves its ticket abandoned on the shards that refused it.
  auto again = seen()[1].ticket;
  EXPECT_NE(again, 0u);
  EXPECT_NE(again, 7u);
  ASSERT_TRUE(held_now(1));  // held again
  auto hung_up = std::chrono::steady_clock::now();
  r->abandon(7);
  ASSERT_EQ(future.wait_for(3s), std::future_status::ready) << "the hold outlived the hang-up";
  EXPECT_EQ(future.get().status, 429u);
  EXPECT_LT(std::chrono::steady_clock::now() - hung_up, 3s);
  // Both tickets reach the scheduler's shards (as messages, so after a while).
  auto abandoned_both = [&] {
    auto ends = abandoned();
    return std::find(ends.begin(), ends.end(), 7u) != ends.end()
           && std::find(ends.begin(), ends.end(), again) != ends.end();
  };
  for (int i = 0; i < 200 && !abandoned_both(); ++i) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(abandoned_both());
  EXPECT_TRUE(held_now(0));
  EXPECT_EQ(seen().size(), 2u);  // answered, so never sent again
}

TEST_F(Router, ARequestSplitAmongShardsIsSentAgainUnderATicketNoShardSawAbandoned) {
  // The first shard refuses its part once while the other part is out: the request is
  // refused whole, and its ticket abandoned on every shard so that the other part's work
  // stops. Sent again under that ticket, the other shard would end its part client_closed.
  refuse_all("queue_full", "the normal queue is full", 1, 1);
  auto second = std::make_shared<scheduler_script>();
  second->park_next = true;
  auto other = system_.spawn(stand_in_scheduler, second);
  config_.scheduler.default_deadline = 5000ms;
  auto r = make_router({}, {scheduler_, other});
  // Eight prompts, each a group of its own, spread over both shards.
  json body = {{"query", json::array()}, {"prompts", json::array()}, {"labels", json::array()}};
  for (int i = 0; i < 8; ++i) {
    auto prompt = "Q" + std::to_string(i) + "? ";
    body["query"].push_back(prompt + "4");
    body["prompts"].push_back(prompt);
    body["labels"].push_back("4");
  }
  std::promise<http_reply> promise;
  auto future = promise.get_future();
  http_request req{"POST", "/get_reward", "", "application/json", body.dump(), "", ""};
  req.ticket = 9;
  r->handle(
    std::move(req), [&promise](http_reply reply) { promise.set_value(std::move(reply)); },
    [](std::function<void()> fn) { fn(); });
  // The other part is out when the first is refused; then it is admitted (and dropped).
  auto other_part_abandoned = [&] {
    std::lock_guard<std::mutex> guard{second->mutex};
    return second->parked
           && std::find(second->abandoned.begin(), second->abandoned.end(), 9u)
                != second->abandoned.end();
  };
  for (int i = 0; i < 400 && !other_part_abandoned(); ++i) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(other_part_abandoned());
  actors::reply_callback answer_it;
  size_t part_items = 0;
  {
    std::lock_guard<std::mutex> guard{second->mutex};
    answer_it = std::move(second->parked);
    part_items = second->seen.at(0).items.size();
  }
  actors::score_reply admitted;
  admitted.results.resize(part_items);
  answer_it(std::move(admitted));
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  auto reply = future.get();
  EXPECT_EQ(reply.status, 200u) << reply.body;
  EXPECT_EQ(reply.body.find("client_closed"), std::string::npos) << reply.body;
  std::vector<actors::score_request> second_seen;
  {
    std::lock_guard<std::mutex> guard{second->mutex};
    second_seen = second->seen;
  }
  ASSERT_EQ(second_seen.size(), 2u);  // split both times
  EXPECT_EQ(second_seen[0].ticket, 9u);
  EXPECT_NE(second_seen[1].ticket, 9u);
  EXPECT_EQ(seen().size(), 2u);
  caf::anon_send_exit(other, caf::exit_reason::user_shutdown);
}

TEST_F(Router, TheDrainAnswersTheRefusalsItHolds) {
  refuse_all("queue_full", "the normal queue is full", 25);
  auto r = make_router();
  auto start = std::chrono::steady_clock::now();
  auto held = std::async(std::launch::async, [&] {
    return call(*r, "POST", "/get_reward",
                R"({"query": ["Q? 4"], "prompts": ["Q?"], "labels": ["4"]})");
  });
  // Held once the scheduler has refused it (the stand-in answers at once).
  ASSERT_TRUE(held_now(1));
  r->begin_drain(5000ms);
  EXPECT_EQ(http_metrics_.held_now.Value(), 0);
  auto reply = held.get();
  EXPECT_EQ(reply.status, 429u) << reply.body;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // A refusal while draining is not held: it is the drain's 503.
  auto late = call(*r, "POST", "/get_reward",
                   R"({"query": ["Q? 4"], "prompts": ["Q?"], "labels": ["4"]})");
  EXPECT_EQ(late.status, 503u) << late.body;
}

TEST_F(Router, TrainerRoutesUseTheProtocolRewardAndTheirOwnShapes) {
  auto r = make_router();
  auto reply = call(*r, "POST", "/get_reward",
                    R"({"query": ["What is 2+2? 4", "Capital of France? Paris"],
                        "prompts": ["What is 2+2?", "Capital of France?"],
                        "labels": ["4", "Paris"]})");
  ASSERT_EQ(reply.status, 200u) << reply.body;
  auto doc = json::parse(reply.body);
  EXPECT_EQ(doc["rewards"], json::parse("[0.25, 1.25]")) << reply.body;
  auto requests = seen();
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_EQ(requests[0].items.size(), 2u);
  EXPECT_EQ(requests[0].items[0]->reward, "lexical");
  EXPECT_EQ(requests[0].items[0]->solution_str, "4");
  EXPECT_EQ(requests[0].items[1]->ground_truth, (std::vector<std::string>{"Paris"}));
}

TEST_F(Router, DrainingRefusesNewWorkAndSaysSoOnHealth) {
  auto r = make_router();
  r->begin_drain(std::chrono::milliseconds{9500});
  auto health = call(*r, "GET", "/health");
  EXPECT_EQ(health.status, 503u);
  EXPECT_NE(health.body.find("draining"), std::string::npos);
  auto reply = call(*r, "POST", "/v1/score", two_items);
  EXPECT_EQ(reply.status, 503u) << reply.body;
  // The drain's time left, so that a client's retry finds the process restarted, not this
  // one still going (it said 1 s, and clients gave up during a restart).
  EXPECT_EQ(header(reply, "Retry-After"), "10");
  EXPECT_TRUE(seen().empty());
  auto gone = make_router();
  gone->begin_drain();
  EXPECT_EQ(header(call(*gone, "POST", "/v1/score", two_items), "Retry-After"), "1");
}
