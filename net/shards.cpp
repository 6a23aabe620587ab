#include "net/shards.hpp"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace arbiter::net {

std::vector<shard_part> plan_shards(const std::vector<shared_item>& items, size_t shards,
                                    size_t spare) {
  if (shards <= 1 || items.empty()) {
    std::vector<shard_part> whole(1);
    whole.front().items.reserve(items.size());
    for (uint32_t i = 0; i < items.size(); ++i) {
      whole.front().items.push_back(i);
    }
    return whole;
  }
  bool all_cpu = true;
  // Groups with a model reward's member here: all their members stay on shard 0 together.
  std::unordered_set<std::string_view> on_first;
  for (const auto& item : items) {
    if (item->capability != "cpu") {
      all_cpu = false;
      if (!item->group.empty()) {
        on_first.insert(item->group);
      }
    }
  }
  std::vector<std::vector<uint32_t>> by_shard(shards);
  std::hash<std::string> hash;
  for (uint32_t i = 0; i < items.size(); ++i) {
    const auto& item = *items[i];
    size_t shard = 0;
    if (item.capability == "cpu" && !item.group.empty() && on_first.count(item.group) == 0) {
      shard = hash(item.group) % shards;
    } else if (all_cpu) {
      shard = spare % shards;
    }
    by_shard[shard].push_back(i);
  }
  std::vector<shard_part> parts;
  for (size_t s = 0; s < shards; ++s) {
    if (!by_shard[s].empty()) {
      parts.push_back({s, std::move(by_shard[s])});
    }
  }
  return parts;
}

namespace {

/// The answers of a split request's parts, gathered until the last one arrives.
struct reply_join {
  std::mutex mutex;
  size_t parts_left = 0;
  actors::reply_callback reply_to;
  actors::score_reply joined;
  /// The first refusal, if a part was refused.
  std::optional<actors::score_reply> refused;
  std::unordered_map<std::string, scheduler::group_summary> groups;
  /// Called once, at the first refusal while other parts are out.
  std::function<void()> on_refused;
};

} // namespace

std::vector<shard_submission> split_request(actors::score_request req,
                                            const std::vector<shard_part>& plan,
                                            actors::reply_callback reply_to,
                                            std::function<void()> on_refused) {
  const size_t n = req.items.size();
  auto join = std::make_shared<reply_join>();
  join->parts_left = plan.size();
  join->reply_to = std::move(reply_to);
  join->on_refused = std::move(on_refused);
  join->joined.results.resize(n);
  join->joined.items.resize(n);
  std::vector<shard_submission> out;
  out.reserve(plan.size());
  for (const auto& part : plan) {
    shard_submission sub;
    sub.shard = part.shard;
    auto& r = sub.submission.request;
    r.priority = req.priority;
    r.deadline = req.deadline;
    r.internal = req.internal;
    r.ticket = req.ticket;
    r.items.reserve(part.items.size());
    for (auto i : part.items) {
      r.items.push_back(std::move(req.items[i]));
    }
    sub.submission.reply_to = [join, where = part.items](actors::score_reply&& answer) {
      std::unique_lock<std::mutex> lock{join->mutex};
      if (!answer.admitted) {
        if (!join->refused) {
          join->refused = std::move(answer);
          if (join->parts_left > 1 && join->on_refused) {
            // The parts admitted elsewhere would run for nothing: their calls are dropped.
            join->on_refused();
          }
        }
      } else if (!join->refused) {
        for (size_t k = 0; k < where.size() && k < answer.results.size(); ++k) {
          join->joined.results[where[k]] = std::move(answer.results[k]);
        }
        for (size_t k = 0; k < where.size() && k < answer.items.size(); ++k) {
          join->joined.items[where[k]] = std::move(answer.items[k]);
        }
        for (auto& g : answer.groups) {
          auto name = g.group;
          join->groups.emplace(std::move(name), std::move(g));
        }
      }
      if (--join->parts_left > 0) {
        return;
      }
      lock.unlock();
      // The last part: every other has answered, so nothing else touches the join now.
      if (join->refused) {
        join->reply_to(std::move(*join->refused));
        return;
      }
      std::unordered_set<std::string> seen;
      for (const auto& item : join->joined.items) {
        if (!item || item->group.empty() || !seen.insert(item->group).second) {
          continue;
        }
        if (auto found = join->groups.find(item->group); found != join->groups.end()) {
          join->joined.groups.push_back(std::move(found->second));
        }
      }
      join->reply_to(std::move(join->joined));
    };
    out.push_back(std::move(sub));
  }
  return out;
}

sharded_snapshot merge_snapshots(std::vector<actors::scheduler_info> shards) {
  sharded_snapshot out;
  for (size_t s = 0; s < shards.size(); ++s) {
    auto& snap = shards[s];
    if (s == 0) {
      out.merged.queues = std::move(snap.queues);
    } else {
      for (size_t q = 0; q < snap.queues.size() && q < out.merged.queues.size(); ++q) {
        out.merged.queues[q].depth += snap.queues[q].depth;
        out.merged.queues[q].capacity += snap.queues[q].capacity;
      }
    }
    for (auto& source : snap.sources) {
      out.merged.sources.push_back(std::move(source));
      out.source_shard.push_back(s);
    }
    out.merged.pending_requests += snap.pending_requests;
    out.merged.draining = out.merged.draining || snap.draining;
  }
  return out;
}

actors::step_accounts merge_steps(std::vector<actors::step_accounts> shards, size_t most) {
  actors::step_accounts out;
  std::unordered_map<std::string, size_t> where;
  for (auto& accounts : shards) {
    for (auto& account : accounts) {
      auto [found, fresh] = where.try_emplace(account.step, out.size());
      if (fresh) {
        out.push_back(std::move(account));
      } else {
        scheduler::add_account(out[found->second], account);
      }
    }
  }
  // The `most` used last are kept (as each shard keeps them), in one order for all shards: by
  // when each step began.
  if (out.size() > most) {
    std::stable_sort(out.begin(), out.end(),
                     [](const auto& a, const auto& b) { return a.used > b.used; });
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(most), out.end());
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.begun < b.begun;
  });
  return out;
}

std::optional<scheduler::step_account> find_step(std::vector<actors::step_accounts> shards,
                                                 const std::string& step, size_t most) {
  for (auto& account : merge_steps(std::move(shards), most)) {
    if (account.step == step) {
      return std::move(account);
    }
  }
  return std::nullopt;
}

} // namespace arbiter::net
