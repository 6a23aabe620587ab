#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/score_types.hpp"
#include "common/time_source.hpp"
#include "config/config.hpp"
#include "scheduler/admission.hpp"
#include "scheduler/ids.hpp"
#include "scheduler/priority_queues.hpp"
#include "scheduler/scheduler_metrics.hpp"
#include "scheduler/source_registry.hpp"

namespace arbiter::scheduler {

/// A batch of items the scheduler sends to one source.
struct dispatch_batch {
  batch_id id = 0;
  source_id source = 0;
  std::vector<shared_item> items;
};

/// A request whose every item has an answer.
struct finished_request {
  request_id id = 0;
  /// One result per item, in the request's order.
  std::vector<item_result> results;
};

/// What /info shows of the scheduler.
struct scheduler_snapshot {
  struct queue {
    std::string priority;
    size_t depth = 0;
    size_t capacity = 0;
  };
  std::vector<queue> queues;
  std::vector<source_info> sources;
  size_t pending_requests = 0;
  bool draining = false;
};

/// The scheduler's state machine, without actors: admission, priority queues, dispatch to
/// sources, deadlines and draining. The scheduler actor translates messages into these calls;
/// tests drive it with a `manual_time_source`.
///
/// Every admitted item ends exactly once: scored by a source, or failed with a reason
/// (`deadline_exceeded`, `shutting_down`, `worker_failed`, `no_eligible_source`). A request is
/// finished when all of its items have ended; `take_finished` hands it out.
class scheduler_core {
public:
  scheduler_core(const config::scheduler_config& cfg, const time_source& clock,
                 scheduler_metrics& metrics);

  scheduler_core(const scheduler_core&) = delete;
  scheduler_core& operator=(const scheduler_core&) = delete;

  /// Registers a source serving `capabilities` and returns its id.
  source_id add_source(std::string name, std::vector<std::string> capabilities);

  /// Removes a source. Its in-flight items fail with `worker_failed`.
  void remove_source(source_id id, const std::string& reason);

  /// Admits or refuses a request. On admission the core owns the items and will finish the
  /// request (see `take_finished`); on refusal nothing was queued and the caller answers the
  /// client with the result's reason and Retry-After. Items whose capability no source serves
  /// fail at once with `no_eligible_source`.
  [[nodiscard]] admission_result submit(request_id id, size_t priority, time_point deadline,
                                        std::vector<score_item> items);

  /// Takes every batch that can be sent now: for each class in priority order and each
  /// capability waiting in it, as long as a source serving it has a free slot. The caller
  /// must send each batch and later report it with `complete` or `fail_batch`.
  std::vector<dispatch_batch> dispatch();

  /// Records a source's answer for `batch`: one outcome per item, in the batch's order.
  /// Late answers (the item already ended) are ignored.
  void complete(batch_id batch, const std::vector<item_outcome>& outcomes);

  /// Fails every item of `batch` with `code` (the source failed or did not answer).
  void fail_batch(batch_id batch, errc code, const std::string& reason);

  /// Fails what has run out of time: items past their request's deadline and, once the drain
  /// deadline has passed, everything. Call it at `next_wakeup()`.
  void on_timer();

  /// The earliest time `on_timer` has something to do, if any.
  std::optional<time_point> next_wakeup() const;

  /// Stops admitting. Queued and running work may finish until `drain_deadline`; then what
  /// remains fails with `shutting_down`.
  void begin_drain(time_point drain_deadline);

  bool draining() const noexcept {
    return draining_;
  }

  /// True when no admitted request is waiting for an answer.
  bool idle() const noexcept {
    return requests_.empty();
  }

  /// Hands out the requests finished since the last call.
  std::vector<finished_request> take_finished();

  scheduler_snapshot snapshot() const;

private:
  enum class item_state : uint8_t { queued, running, done };

  struct pending_request {
    size_t priority = 0;
    time_point deadline;
    time_point admitted;
    std::vector<shared_item> items;
    std::vector<item_result> results;
    std::vector<item_state> states;
    std::vector<task_id> tasks;
    std::vector<time_point> enqueued;
    size_t remaining = 0;
  };

  struct inflight_batch {
    source_id source = 0;
    std::string source_name;
    time_point dispatched;
    std::vector<std::pair<request_id, uint32_t>> items;
  };

  /// Ends item `index` of `req` with `result`. Returns true when it was the request's last
  /// open item; the caller then calls `finish`.
  bool end_item(request_id id, pending_request& req, uint32_t index, item_result result);
  /// Ends every item of `id` that has not ended, with `code`.
  void fail_remaining(request_id id, errc code, const std::string& reason);
  void finish(request_id id);
  void release_batch(const inflight_batch& batch);
  /// Ends every still-running item of `batch` with the result `fill(result, position,
  /// item)` writes, then finishes the requests that completed.
  template <class Fill>
  void settle(batch_id batch, Fill&& fill);
  prometheus::Counter& items_counter(const std::string& reward, item_status status);
  prometheus::Counter& failure_counter(errc code);

  config::scheduler_config cfg_;
  const time_source& clock_;
  scheduler_metrics& metrics_;
  priority_queues queues_;
  source_registry sources_;
  std::unordered_map<std::string, service_estimator> estimates_;
  std::unordered_map<request_id, pending_request> requests_;
  std::set<std::pair<time_point, request_id>> deadlines_;
  std::unordered_map<batch_id, inflight_batch> batches_;
  std::vector<finished_request> finished_;
  std::vector<prometheus::Gauge*> depth_gauges_;
  std::unordered_map<source_id, prometheus::Gauge*> inflight_gauges_;
  std::vector<prometheus::Histogram*> wait_histograms_;
  prometheus::Histogram* run_histogram_;
  prometheus::Histogram* schedule_histogram_;
  std::map<std::pair<std::string, item_status>, prometheus::Counter*> item_counters_;
  std::map<errc, prometheus::Counter*> failure_counters_;
  task_id next_task_ = 1;
  batch_id next_batch_ = 1;
  bool draining_ = false;
  time_point drain_deadline_;
};

} // namespace arbiter::scheduler
