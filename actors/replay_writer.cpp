#include "actors/replay_writer.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <prometheus/counter.h>

#include "arbiter/version.hpp"
#include "backends/replay/replay_log.hpp"
#include "common/log.hpp"

namespace arbiter::actors {

namespace {

/// scheduler -> writer: a finished request to append.
using replay_atom = caf::atom_constant<caf::atom("replay")>;
/// anyone -> writer: answered with ok once what came before is written.
using flush_atom = caf::atom_constant<caf::atom("flush")>;

struct file_closer {
  void operator()(std::FILE* f) const noexcept {
    std::fclose(f);
  }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

/// `now`, UTC, ISO 8601 with milliseconds.
std::string utc_time(std::chrono::system_clock::time_point now) {
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms.count()));
  return buf;
}

std::string utc_now() {
  return utc_time(std::chrono::system_clock::now());
}

/// Cuts what follows the last newline of the open log (`size` bytes): a record a crash or a
/// full disk left half written. Every record ends with a newline, so nothing whole is lost;
/// what comes next starts on a line of its own. Returns the new size (`size`: nothing cut).
uint64_t cut_torn_line(std::FILE* f, const std::string& path, uint64_t size) {
  const int fd = ::fileno(f);
  uint64_t end = size;
  char tail[4096];
  while (end > 0) {
    auto n = static_cast<size_t>(std::min<uint64_t>(end, sizeof tail));
    if (::pread(fd, tail, n, static_cast<off_t>(end - n)) != static_cast<ssize_t>(n)) {
      return size; // unreadable (a write-only file): leave it as it is
    }
    auto* newline = static_cast<const char*>(::memrchr(tail, '\n', n));
    if (newline != nullptr) {
      end -= n - static_cast<size_t>(newline - tail) - 1;
      break;
    }
    end -= n;
  }
  if (end != size && ::ftruncate(fd, static_cast<off_t>(end)) == 0) {
    log::warn("replay log: '", path, "' ended in a record cut short (", size - end,
              " bytes, from a crash or a full disk); it was removed");
    return end;
  }
  return size;
}

/// A log that opened but whose disk is full (or over quota): the server starts anyway, as it
/// carries on when a disk fills up under it, counting records as failed until one fits.
struct log_disk_full : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Opens `path` for appending and writes the `start` record; throws naming the reason
/// (`log_disk_full` when the disk has no room for it).
/// Unbuffered: each request's records go in one write, and a write the disk refuses leaves
/// nothing behind in a buffer to be written later.
file_ptr open_log(const std::string& path, uint64_t& size, replay_metrics& metrics) {
  file_ptr f{std::fopen(path.c_str(), "a+b")};
  if (!f) {
    throw std::runtime_error{"cannot open replay.path '" + path + "': " + std::strerror(errno)};
  }
  std::setvbuf(f.get(), nullptr, _IONBF, 0);
  auto start = backends::replay::encode_start(version, utc_now()) + "\n";
  std::fseek(f.get(), 0, SEEK_END);
  auto at = std::ftell(f.get());
  const auto was = at > 0 ? static_cast<uint64_t>(at) : 0;
  size = cut_torn_line(f.get(), path, was);
  if (size != was) {
    // The record cut off is missing: replay says the log is incomplete rather than report
    // every item it holds identical (helper-62).
    start = backends::replay::encode_gap(1, utc_now()) + "\n" + start;
  }
  if (std::fwrite(start.data(), 1, start.size(), f.get()) != start.size()) {
    const int error = errno;
    ::ftruncate(::fileno(f.get()), static_cast<off_t>(size));
    auto what = "cannot write replay.path '" + path + "': " + std::strerror(error);
    if (error == ENOSPC || error == EDQUOT) {
      throw log_disk_full{what};
    }
    throw std::runtime_error{what};
  }
  size += start.size();
  metrics.bytes.Increment(static_cast<double>(start.size()));
  return f;
}

struct writer_state {
  replay_settings cfg;
  file_ptr file;
  uint64_t size = 0;
  std::shared_ptr<replay_counts> counts;
  replay_metrics* metrics = nullptr;
  prometheus::Counter* written = nullptr;
  prometheus::Counter* failed = nullptr;
  bool warned = false;
  /// When the path was last checked to still name the open file.
  std::chrono::steady_clock::time_point checked{};

  static const char* name;
};

const char* writer_state::name = "arbiter.replay_writer";

using writer_actor = caf::stateful_actor<writer_state>;

/// Whether `path` still names the open file (not moved away or removed by someone else).
bool same_file(std::FILE* file, const std::string& path) {
  struct stat open_file {};
  struct stat named {};
  return ::fstat(::fileno(file), &open_file) == 0 && ::stat(path.c_str(), &named) == 0
         && open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

/// Opens the log again after it was closed or could not be opened; logs why it cannot.
void reopen(writer_state& st) {
  try {
    st.file = open_log(st.cfg.path, st.size, *st.metrics);
  } catch (const std::exception& e) {
    if (!st.warned) { // once: it is tried again at every request
      st.warned = true;
      log::error("replay log: ", e.what(), "; records are counted as failed until it can be opened");
    }
  }
}

/// Moves the log to PATH.1 (PATH.1 to PATH.2, ..., dropping PATH.keep_files) and opens a new
/// one.
void rotate(writer_state& st) {
  st.file.reset();
  const auto& path = st.cfg.path;
  auto numbered = [&path](uint32_t k) { return path + "." + std::to_string(k); };
  if (st.cfg.keep_files == 0) {
    std::remove(path.c_str());
  } else {
    std::remove(numbered(st.cfg.keep_files).c_str());
    for (uint32_t k = st.cfg.keep_files; k > 1; --k) {
      std::rename(numbered(k - 1).c_str(), numbered(k).c_str());
    }
    std::rename(path.c_str(), numbered(1).c_str());
  }
  reopen(st);
}

void append(writer_state& st, const replay_entry& entry) {
  auto time = utc_now();
  // A log moved or removed from outside (logrotate, a clean-up) would swallow what follows:
  // every `path_check`, check that the path still names it, and open a new one if not.
  auto now = std::chrono::steady_clock::now();
  if (st.file && now - st.checked >= st.cfg.path_check) {
    st.checked = now;
    if (!same_file(st.file.get(), st.cfg.path)) {
      log::warn("replay log: '", st.cfg.path, "' was moved or removed; opening it again");
      st.file.reset();
      st.warned = false;
    }
  }
  if (!st.file) {
    reopen(st); // closed, or it could not be opened: try again, shifting nothing
  }
  // One buffer and one write per request, after a `gap` line for requests dropped since.
  std::string lines;
  uint64_t records = 0;
  const uint64_t gap = st.counts->unlogged.exchange(0, std::memory_order_relaxed);
  if (gap > 0) {
    lines = backends::replay::encode_gap(gap, time) + "\n";
  } else if (entry.items.empty()) {
    return;
  }
  for (size_t i = 0; i < entry.items.size() && i < entry.results.size(); ++i) {
    const bool ended = i < entry.ended.size()
                       && entry.ended[i] != std::chrono::system_clock::time_point{};
    lines += backends::replay::encode(*entry.items[i], entry.results[i], entry.internal,
                                      ended ? utc_time(entry.ended[i]) : time);
    lines += '\n';
    ++records;
  }
  if (st.file && std::fwrite(lines.data(), 1, lines.size(), st.file.get()) == lines.size()) {
    st.size += lines.size();
    st.metrics->bytes.Increment(static_cast<double>(lines.size()));
    st.written->Increment(static_cast<double>(records));
    if (st.warned && records > 0) { // a gap record alone fits where the next may not
      st.warned = false;
      log::info("replay log: writing to '", st.cfg.path, "' again");
    }
  } else {
    const int error = errno;
    if (st.file) {
      // The part the disk took would glue the next record onto half of this one.
      ::ftruncate(::fileno(st.file.get()), static_cast<off_t>(st.size));
      std::clearerr(st.file.get());
    }
    st.failed->Increment(static_cast<double>(records));
    // Missing from the log: the next `gap` record says so.
    st.counts->unlogged.fetch_add(gap + records, std::memory_order_relaxed);
    if (!st.warned) {
      st.warned = true;
      log::error("replay log: cannot write '", st.cfg.path, "': ", std::strerror(error),
                 "; records are counted as failed until it can");
    }
  }
  if (st.size >= st.cfg.max_file_bytes) {
    rotate(st);
  }
}

caf::behavior writer(writer_actor* self, replay_settings cfg, std::FILE* file,
                     uint64_t size, std::shared_ptr<replay_counts> counts,
                     replay_metrics* metrics) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.warned = file == nullptr; // said at start: the disk was full
  st.file.reset(file);
  st.size = size;
  st.counts = std::move(counts);
  st.metrics = metrics;
  st.written = &metrics->records.Add({{"result", "written"}});
  st.failed = &metrics->records.Add({{"result", "failed"}});
  return {
    [self](replay_atom, const replay_entry& entry) {
      auto& s = self->state;
      append(s, entry);
      s.counts->backlog.fetch_sub(entry.items.size(), std::memory_order_relaxed);
    },
    [self](flush_atom) {
      append(self->state, replay_entry{}); // says what was dropped since the last record
      return caf::ok_atom::value;
    },
  };
}

} // namespace

replay_metrics::replay_metrics(metrics_registry& registry)
  : records(registry.counter("arbiter_replay_records_total",
                             "Replay log records written, dropped (the writer was behind) or "
                             "failed (the disk refused them)")),
    bytes(registry.counter("arbiter_replay_bytes_total", "Bytes appended to the replay log")
              .Add({})) {
}

replay_recorder::replay_recorder(caf::actor writer, uint64_t max_backlog,
                                 std::shared_ptr<replay_counts> counts, replay_metrics& metrics)
  : writer_(std::move(writer)),
    max_backlog_(max_backlog),
    counts_(std::move(counts)),
    dropped_(metrics.records.Add({{"result", "dropped"}})) {
}

void replay_recorder::record(bool internal, const std::vector<shared_item>& items,
                             const std::vector<item_result>& results,
                             const std::vector<std::chrono::system_clock::time_point>& ended) {
  auto n = items.size();
  // Dropped only while the writer is behind: a request larger than the limit still goes to
  // an idle writer.
  auto behind = counts_->backlog.load(std::memory_order_relaxed);
  if (behind > 0 && behind + n > max_backlog_) {
    dropped_.Increment(static_cast<double>(n));
    counts_->unlogged.fetch_add(n, std::memory_order_relaxed);
    return;
  }
  counts_->backlog.fetch_add(n, std::memory_order_relaxed);
  caf::anon_send(writer_, replay_atom::value, replay_entry{internal, items, results, ended});
}

bool replay_recorder::flush(std::chrono::milliseconds timeout) {
  caf::scoped_actor self{writer_.home_system()};
  bool done = false;
  self->request(writer_, timeout, flush_atom::value)
    .receive([&done](caf::ok_atom) { done = true; }, [](const caf::error&) {});
  return done;
}

replay_settings replay_settings::from(const config::replay_config& cfg) {
  replay_settings s;
  s.path = cfg.path;
  s.max_file_bytes = uint64_t{cfg.max_file_mb} << 20;
  s.keep_files = cfg.keep_files;
  s.max_backlog = cfg.max_backlog;
  return s;
}

std::shared_ptr<replay_recorder> spawn_replay_writer(caf::actor_system& sys,
                                                     const replay_settings& settings,
                                                     replay_metrics& metrics) {
  uint64_t size = 0;
  file_ptr file;
  try {
    file = open_log(settings.path, size, metrics);
  } catch (const log_disk_full& e) {
    log::error("replay log: ", e.what(), "; serving anyway: records are counted as failed "
               "(arbiter_replay_records_total{result=\"failed\"}) until the disk takes them");
  }
  auto counts = std::make_shared<replay_counts>();
  // The behavior may start on the writer's own thread later: it takes the file over then.
  auto actor =
    sys.spawn<caf::detached>(writer, settings, file.release(), size, counts, &metrics);
  return std::make_shared<replay_recorder>(std::move(actor), settings.max_backlog,
                                           std::move(counts), metrics);
}

} // namespace arbiter::actors
