// The cluster gateway in one process (actors/cluster.hpp): what it does with the messages a
// worker node sends, without the middleman (tests/e2e/test_cluster.py runs real nodes).
#include "actors/cluster.hpp"

#include <chrono>
#include <memory>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>

#include "actors/cpu_worker_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "arbiter/version.hpp"

using namespace arbiter;
using namespace arbiter::actors;
using namespace std::chrono_literals;

namespace {

/// Stands in for a node's watch actor: lives until told to exit.
caf::behavior idle(caf::event_based_actor*) {
  return {[](caf::ok_atom) {}};
}

class ClusterGateway : public ::testing::Test {
protected:
  ClusterGateway() : metrics_(registry_, {"normal"}), cluster_metrics_(registry_) {
    caf_cfg_.set("scheduler.max-threads", size_t{2});
    sys_ = std::make_unique<caf::actor_system>(caf_cfg_);
    config::scheduler_config cfg;
    cfg.priorities = {{"normal", 1000, config::queue_order::fifo}};
    cfg.default_priority = "normal";
    sched_ = spawn_scheduler(*sys_, cfg, metrics_);
    gateway_ = spawn_cluster_gateway(*sys_, sched_, cluster_metrics_, 3000ms, &node_models_);
  }

  ~ClusterGateway() override {
    for (auto& a : {sched_, gateway_}) {
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
  }

  /// Sends `(node_join_atom, hello, node)`; returns the error text, empty when taken.
  std::string join(const std::string& name, const caf::actor& node,
                   const std::string& version = arbiter::version, int64_t heartbeat_ms = 1000) {
    caf::scoped_actor self{*sys_};
    std::string out;
    node_hello hello{name, "host-1", 42, version, heartbeat_ms};
    self->request(gateway_, 5s, node_join_atom::value, hello, node)
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { out = sys_->render(e); });
    return out;
  }

  std::string add(const std::string& node, const caf::actor& worker,
                  std::vector<std::string> capabilities = {"cpu"}, std::string name = "cpu") {
    caf::scoped_actor self{*sys_};
    std::string out;
    scheduler::source_spec spec;
    spec.name = std::move(name);
    spec.capabilities = std::move(capabilities);
    self->request(gateway_, 5s, add_source_atom::value, node, spec, worker)
      .receive([](scheduler::source_id) {}, [&](caf::error& e) { out = sys_->render(e); });
    return out;
  }

  std::vector<node_info> nodes() {
    caf::scoped_actor self{*sys_};
    std::vector<node_info> out;
    self->request(gateway_, 5s, info_atom::value)
      .receive([&](std::vector<node_info>& v) { out = std::move(v); },
               [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
    return out;
  }

  scheduler_info snapshot() {
    caf::scoped_actor self{*sys_};
    scheduler_info out;
    self->request(sched_, 5s, info_atom::value)
      .receive([&](const scheduler_info& snap) { out = snap; },
               [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
    return out;
  }

  /// The routing keys the scheduler holds for source `name`.
  std::vector<std::string> capabilities_of(const std::string& name) {
    for (const auto& s : snapshot().sources) {
      if (s.name == name) {
        return s.capabilities;
      }
    }
    return {};
  }

  std::vector<std::string> scheduler_sources() {
    std::vector<std::string> out;
    for (const auto& s : snapshot().sources) {
      out.push_back(s.name);
    }
    return out;
  }

  metrics_registry registry_;
  scheduler::scheduler_metrics metrics_;
  cluster_metrics cluster_metrics_;
  node_models node_models_;
  caf::actor_system_config caf_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::actor sched_;
  caf::actor gateway_;
};

} // namespace

TEST_F(ClusterGateway, NamesANodesSourcesAfterItAndListsIt) {
  auto node = sys_->spawn(idle);
  auto worker = spawn_cpu_worker(*sys_, {});
  ASSERT_EQ(join("node-a", node), "");
  ASSERT_EQ(add("node-a", worker), "");
  EXPECT_EQ(scheduler_sources(), std::vector<std::string>{"node-a/cpu"});
  auto listed = nodes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "node-a");
  EXPECT_EQ(listed[0].host, "host-1");
  EXPECT_EQ(listed[0].pid, 42u);
  EXPECT_EQ(listed[0].state, "up");
  EXPECT_EQ(listed[0].sources, std::vector<std::string>{"node-a/cpu"});
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
}

TEST_F(ClusterGateway, ANodesSourceKeepsItsModelRoutesButNotItsOwnRewardsRoutes) {
  // The node's config named its source in a reward of its own ("chat@strict"): at the
  // coordinator that key would serve the coordinator's reward of that name, which may be
  // restricted to other sources. Rewards are the coordinator's; the model route stays.
  auto node = sys_->spawn(idle);
  auto worker = spawn_cpu_worker(*sys_, {});
  ASSERT_EQ(join("node-a", node), "");
  ASSERT_EQ(add("node-a", worker, {"chat", "chat@model:qwen3-8b", "chat@strict", "embed",
                                   "embed@strict"}, "judge"),
            "");
  EXPECT_EQ(capabilities_of("node-a/judge"),
            (std::vector<std::string>{"chat", "chat@model:qwen3-8b", "embed"}));
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
}

TEST_F(ClusterGateway, ANodesModelsAreServedWhileItIsUp) {
  // The pass-through routes (/v1/models, /v1/chat/completions, /v1/embeddings) read these:
  // a model only a node serves is served while that node is up, and away once it is lost.
  using entry = node_models::entry;
  auto node = sys_->spawn(idle);
  auto worker = spawn_cpu_worker(*sys_, {});
  ASSERT_EQ(join("node-a", node), "");
  EXPECT_TRUE(node_models_.get().entries->empty());
  ASSERT_EQ(add("node-a", worker, {"chat", "chat@model:qwen3-8b", "chat@strict", "embed",
                                   "embed@model:e5", "nli"}, "remote"),
            "");
  const auto up = node_models_.get();
  EXPECT_EQ(*up.entries, (std::vector<entry>{{"qwen3-8b", capability::chat, "node-a/remote", ""},
                                             {"e5", capability::embed, "node-a/remote", ""}}));
  caf::anon_send_exit(node, caf::exit_reason::remote_link_unreachable);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (node_models_.get().entries->at(0).away.empty()
         && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  const auto lost = node_models_.get();
  ASSERT_EQ(lost.entries->size(), 2u) << "a lost node's models are kept, marked away";
  for (const auto& e : *lost.entries) {
    EXPECT_EQ(e.away.rfind("node 'node-a' was lost: ", 0), 0u) << e.away;
  }
  EXPECT_GT(lost.version, up.version);
  // Its name joins again (restarted: new workers): its models come back as its sources
  // register.
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
  auto again = sys_->spawn(idle);
  auto restarted = spawn_cpu_worker(*sys_, {});
  ASSERT_EQ(join("node-a", again), "");
  EXPECT_TRUE(node_models_.get().entries->empty()) << "the name is up again, with no models";
  ASSERT_EQ(add("node-a", restarted, {"chat", "chat@model:qwen3-8b"}, "remote"), "");
  EXPECT_EQ(*node_models_.get().entries,
            (std::vector<entry>{{"qwen3-8b", capability::chat, "node-a/remote", ""}}));
  for (auto& a : {again, restarted}) {
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
}

TEST_F(ClusterGateway, ANodeLostLongerThanItsModelsStayAwayIsGoneAndTheyAreForgotten) {
  // A node scaled down for good: its models answered 503 model_unavailable for ever (until
  // 256 later losses pushed it out of the table), telling every SDK to retry.
  caf::anon_send_exit(gateway_, caf::exit_reason::user_shutdown);
  gateway_ = spawn_cluster_gateway(*sys_, sched_, cluster_metrics_, 3000ms, &node_models_, 300ms);
  auto node = sys_->spawn(idle);
  auto worker = spawn_cpu_worker(*sys_, {});
  ASSERT_EQ(join("node-a", node), "");
  ASSERT_EQ(add("node-a", worker, {"chat", "chat@model:qwen3-8b"}, "remote"), "");
  caf::anon_send_exit(node, caf::exit_reason::remote_link_unreachable);
  auto wait_for = [this](auto done) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!done(*node_models_.get().entries) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
  };
  using entries = std::vector<node_models::entry>;
  wait_for([](const entries& e) { return !e.empty() && !e[0].away.empty(); });
  ASSERT_EQ(node_models_.get().entries->size(), 1u) << "away first";
  wait_for([](const entries& e) { return e.empty(); });
  EXPECT_TRUE(node_models_.get().entries->empty()) << "then forgotten";
  EXPECT_EQ(nodes().size(), 1u) << "the node itself is still shown lost";
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
}

TEST_F(ClusterGateway, RefusesUnjoinedNodesBadNamesAndATakenName) {
  auto node = sys_->spawn(idle);
  auto other = sys_->spawn(idle);
  auto worker = spawn_cpu_worker(*sys_, {});
  EXPECT_NE(add("ghost", worker).find("has not joined"), std::string::npos);
  EXPECT_NE(join("a/b", node).find("without '/'"), std::string::npos);
  EXPECT_NE(join("", node).find("non-empty"), std::string::npos);
  EXPECT_NE(join("old", node, "0.0.1").find("runs arbiter 0.0.1, the coordinator"),
            std::string::npos);
  ASSERT_EQ(join("twin", node), "");
  EXPECT_NE(join("twin", other).find("already joined"), std::string::npos);
  EXPECT_EQ(join("twin", node), "") << "the same node joining again is taken";
  EXPECT_TRUE(scheduler_sources().empty());
  for (auto& a : {node, other, worker}) {
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
}

TEST_F(ClusterGateway, ANodeWhoseActorGoesIsShownLostAndItsNameCanJoinAgain) {
  auto node = sys_->spawn(idle);
  ASSERT_EQ(join("node-a", node), "");
  caf::anon_send_exit(node, caf::exit_reason::remote_link_unreachable);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  std::vector<node_info> listed;
  do {
    listed = nodes();
  } while (!listed.empty() && listed[0].state == "up"
           && std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "lost");
  EXPECT_EQ(listed[0].reason.rfind("its connection closed", 0), 0u) << listed[0].reason;
  EXPECT_NE(listed[0].reason.find("remote_link_unreachable"), std::string::npos);
  // A lost node's name is free: the node, restarted, joins under it again.
  auto again = sys_->spawn(idle);
  ASSERT_EQ(join("node-a", again), "");
  listed = nodes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "up");
  EXPECT_TRUE(listed[0].sources.empty());
  auto text = registry_.render();
  EXPECT_NE(text.find("arbiter_cluster_nodes{state=\"up\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("arbiter_cluster_nodes{state=\"lost\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("arbiter_cluster_node_events_total{event=\"joined\"} 2"),
            std::string::npos) << text;
  EXPECT_NE(text.find("arbiter_cluster_node_events_total{event=\"lost\"} 1"),
            std::string::npos) << text;
  caf::anon_send_exit(again, caf::exit_reason::user_shutdown);
}

TEST_F(ClusterGateway, ANodeThatLeavesIsShownLostAtOnceAndOnlyItsOwnActorCanSayItLeft) {
  caf::scoped_actor node{*sys_};
  ASSERT_EQ(join("node-a", caf::actor_cast<caf::actor>(node)), "");
  // Another actor naming the node is answered but changes nothing: the node is known by its
  // actor, and a stale process of the same name must not take a new one down.
  caf::scoped_actor stranger{*sys_};
  stranger->request(gateway_, 5s, node_leave_atom::value, "node-a")
    .receive([](caf::ok_atom) {}, [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
  auto listed = nodes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "up");
  node->request(gateway_, 5s, node_leave_atom::value, "node-a")
    .receive([](caf::ok_atom) {}, [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
  listed = nodes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "lost");
  EXPECT_EQ(listed[0].reason, "it stopped (a signal)");
  auto text = registry_.render();
  EXPECT_NE(text.find("arbiter_cluster_node_events_total{event=\"left\"} 1"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("arbiter_cluster_node_events_total{event=\"lost\"}"), std::string::npos)
    << text;
  // Its name is free again.
  auto again = sys_->spawn(idle);
  EXPECT_EQ(join("node-a", again), "");
  caf::anon_send_exit(again, caf::exit_reason::user_shutdown);
}

TEST_F(ClusterGateway, RefusesANodeWhoseHeartbeatIsNotWithinTheCoordinatorsTimeout) {
  // The coordinator loses a node after 3 s of silence: one that beats every 8 s would be
  // lost and join again for ever.
  auto node = sys_->spawn(idle);
  auto refused = join("slow-beat", node, arbiter::version, 8000);
  EXPECT_NE(refused.find("sends a heartbeat every 8000 ms, not within the coordinator's "
                         "cluster.timeout_ms (3000)"),
            std::string::npos)
    << refused;
  EXPECT_TRUE(nodes().empty());
  EXPECT_EQ(join("slow-beat", node, arbiter::version, 2000), "");
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
}

TEST_F(ClusterGateway, RefusesANodeThatWouldTakeTheCoordinatorForLostBetweenItsBeats) {
  // helper-51: a coordinator beating every 4 s and a node losing it after 3 s of silence:
  // the node left and joined again 18 times, and a 9 s call on it never ended.
  caf::anon_send_exit(gateway_, caf::exit_reason::user_shutdown);
  gateway_ = spawn_cluster_gateway(*sys_, sched_, cluster_metrics_, 10000ms, &node_models_,
                                   lost_models_away_for, 4000ms);
  auto node = sys_->spawn(idle);
  caf::scoped_actor self{*sys_};
  std::string refused;
  node_hello hello{"impatient", "host-1", 42, arbiter::version, 1000, 3000};
  self->request(gateway_, 5s, node_join_atom::value, hello, node)
    .receive([](caf::ok_atom) {}, [&](caf::error& e) { refused = sys_->render(e); });
  EXPECT_NE(refused.find("takes the coordinator for lost after 3000 ms of silence (its "
                         "cluster.timeout_ms), and the coordinator sends a heartbeat every "
                         "4000 ms"),
            std::string::npos)
    << refused;
  EXPECT_TRUE(nodes().empty());
  hello.timeout_ms = 5000;
  std::string joined = "not answered";
  self->request(gateway_, 5s, node_join_atom::value, hello, node)
    .receive([&](caf::ok_atom) { joined.clear(); },
             [&](caf::error& e) { joined = sys_->render(e); });
  EXPECT_EQ(joined, "");
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
}
