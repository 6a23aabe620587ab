// The replay log's writer on a real actor system and real files: every record handed to it is
// written, flush waits for them, the file rotates past its size keeping `keep_files`, a
// backlog past `max_backlog` drops (and counts) instead of queueing, and a log moved away from
// outside is noticed: while its folder is gone the records count as failed, and once it can
// be opened again they are written to a new file — without shifting the rotated files again.
#include "actors/replay_writer.hpp"

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <gtest/gtest.h>

#include "backends/replay/replay_log.hpp"
#include "common/metrics.hpp"

using namespace arbiter;
using namespace arbiter::actors;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in{file};
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    out.push_back(line);
  }
  return out;
}

/// `n` lexical items of about `bytes` bytes each, and their results.
void make_request(size_t n, size_t bytes, std::vector<shared_item>& items,
                  std::vector<item_result>& results) {
  items.clear();
  results.clear();
  for (size_t i = 0; i < n; ++i) {
    auto item = std::make_shared<score_item>();
    item->reward = item->kind = "lexical";
    item->capability = "cpu";
    item->solution_str = std::string(bytes, 'x') + std::to_string(i);
    item->ground_truth = {"x"};
    items.push_back(std::move(item));
    item_result r;
    r.status = item_status::ok;
    r.score = 0.5;
    r.source = "cpu";
    results.push_back(std::move(r));
  }
}

double counter(metrics_registry& registry, const std::string& series) {
  auto text = registry.render();
  auto at = text.find(series + " ");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 1));
}

class ReplayWriter : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path()
          / ("arbiter-replay-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed())
             + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override {
    fs::remove_all(dir);
  }

  fs::path dir;
  // Before the actor system, so they outlive the writer (destroyed in reverse order).
  metrics_registry registry;
  replay_metrics metrics{registry};
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
};

} // namespace

TEST_F(ReplayWriter, WritesEveryRecordAndRotatesKeepingTheNewestFiles) {
  replay_settings c;
  c.path = (dir / "r.jsonl").string();
  c.max_file_bytes = 64 << 10;
  c.keep_files = 2;
  auto recorder = spawn_replay_writer(sys, c, metrics);
  std::vector<shared_item> items;
  std::vector<item_result> results;
  // 40 requests of 10 records of about 400 bytes: 160 KiB, rotated past every 64 KiB. (Small:
  // the sanitizer builds run it too.)
  for (int k = 0; k < 40; ++k) {
    make_request(10, 400, items, results);
    recorder->record(false, items, results);
  }
  ASSERT_TRUE(recorder->flush(60s));
  EXPECT_EQ(counter(registry, R"(arbiter_replay_records_total{result="written"})"), 400.0);
  EXPECT_TRUE(fs::exists(dir / "r.jsonl"));
  EXPECT_TRUE(fs::exists(dir / "r.jsonl.1"));
  EXPECT_TRUE(fs::exists(dir / "r.jsonl.2"));
  EXPECT_FALSE(fs::exists(dir / "r.jsonl.3")) << "keep_files = 2";
  size_t records = 0;
  for (const char* name : {"r.jsonl", "r.jsonl.1", "r.jsonl.2"}) {
    auto lines = lines_of(dir / name);
    ASSERT_FALSE(lines.empty()) << name;
    EXPECT_EQ(backends::replay::decode(lines.front()).type, backends::replay::record_type::start)
      << name;
    for (size_t i = 1; i < lines.size(); ++i) {
      auto r = backends::replay::decode(lines[i]);
      EXPECT_EQ(r.type, backends::replay::record_type::item);
      ++records;
    }
    EXPECT_LT(fs::file_size(dir / name), (64u << 10) + 16u * 1024u) << name;
  }
  EXPECT_GT(records, 150u);
  EXPECT_LT(records, 400u) << "the oldest file was dropped";
}

TEST_F(ReplayWriter, ABacklogPastItsLimitDropsAndCounts) {
  replay_settings c;
  c.path = (dir / "r.jsonl").string();
  c.max_backlog = 150;
  auto recorder = spawn_replay_writer(sys, c, metrics);
  std::vector<shared_item> items;
  std::vector<item_result> results;
  make_request(100, 10, items, results);
  // Sent faster than a record is written: some requests find the writer behind.
  for (int k = 0; k < 50; ++k) {
    recorder->record(false, items, results);
  }
  ASSERT_TRUE(recorder->flush(60s));
  auto written = counter(registry, R"(arbiter_replay_records_total{result="written"})");
  auto dropped = counter(registry, R"(arbiter_replay_records_total{result="dropped"})");
  EXPECT_EQ(written + dropped, 5000.0);
  EXPECT_GT(dropped, 0.0);
  // The log says what it lacks: gap records before the records that follow a drop, and one
  // at the flush for drops after the last request.
  auto lines = lines_of(dir / "r.jsonl");
  double gaps = 0;
  double said = 0;
  for (const auto& line : lines) {
    auto r = backends::replay::decode(line);
    if (r.type == backends::replay::record_type::gap) {
      ++gaps;
      said += static_cast<double>(r.dropped);
    }
  }
  EXPECT_EQ(said, dropped);
  EXPECT_EQ(static_cast<double>(lines.size()), written + gaps + 1);
}

TEST_F(ReplayWriter, ARequestLargerThanTheLimitIsWrittenWhenNothingIsPending) {
  replay_settings c;
  c.path = (dir / "r.jsonl").string();
  c.max_backlog = 10;
  auto recorder = spawn_replay_writer(sys, c, metrics);
  std::vector<shared_item> items;
  std::vector<item_result> results;
  make_request(25, 10, items, results);
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  recorder->record(false, items, results); // idle again: written too
  ASSERT_TRUE(recorder->flush(60s));
  EXPECT_EQ(counter(registry, R"(arbiter_replay_records_total{result="written"})"), 50.0);
  EXPECT_EQ(lines_of(dir / "r.jsonl").size(), 1u + 50u);
}

TEST_F(ReplayWriter, AVanishedFolderCountsFailuresThenWritesAgain) {
  replay_settings c;
  c.path = (dir / "logs" / "r.jsonl").string();
  c.max_file_bytes = 16 << 10;
  c.keep_files = 3;
  c.path_check = 0ms; // check the path before every write
  fs::create_directories(dir / "logs");
  auto recorder = spawn_replay_writer(sys, c, metrics);
  std::vector<shared_item> items;
  std::vector<item_result> results;
  make_request(20, 1000, items, results); // over 16 KiB: rotates after this request
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  ASSERT_TRUE(fs::exists(dir / "logs" / "r.jsonl.1"));
  fs::remove_all(dir / "logs");
  make_request(10, 10, items, results);
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  EXPECT_GE(counter(registry, R"(arbiter_replay_records_total{result="failed"})"), 10.0);
  fs::create_directories(dir / "logs");
  recorder->record(false, items, results);
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  auto lines = lines_of(dir / "logs" / "r.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.size(), 1u + 1u + 20u)
    << "reopened: a start line, a gap for the 10 lost, and both requests";
  EXPECT_EQ(backends::replay::decode(lines.at(1)).dropped, 10u);
  EXPECT_FALSE(fs::exists(dir / "logs" / "r.jsonl.1")) << "nothing was shifted on reopening";
}

TEST_F(ReplayWriter, ALogMovedAwayIsOpenedAgainAtItsPath) {
  replay_settings c;
  c.path = (dir / "r.jsonl").string();
  c.path_check = 0ms;
  auto recorder = spawn_replay_writer(sys, c, metrics);
  std::vector<shared_item> items;
  std::vector<item_result> results;
  make_request(5, 10, items, results);
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  fs::rename(dir / "r.jsonl", dir / "moved.jsonl"); // as logrotate does
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  EXPECT_EQ(lines_of(dir / "moved.jsonl").size(), 1u + 5u);
  EXPECT_EQ(lines_of(dir / "r.jsonl").size(), 1u + 5u) << "a new file with its start line";
}

namespace {

/// While alive, files this process writes may not grow past `bytes` (the disk refuses the rest,
/// as a full one does: a short write, then EFBIG).
class file_size_limit {
public:
  explicit file_size_limit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = saved_;
    lower.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lower);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

private:
  rlimit saved_{};
  void (*previous_)(int) = nullptr;
};

/// Every line of `file` is a whole record.
void expect_whole_records(const fs::path& file) {
  for (const auto& line : lines_of(file)) {
    EXPECT_NO_THROW(backends::replay::decode(line)) << line.substr(0, 80);
  }
}

} // namespace

TEST_F(ReplayWriter, ARequestTheDiskRefusesLeavesNoHalfRecordBehind) {
  replay_settings c;
  c.path = (dir / "r.jsonl").string();
  auto recorder = spawn_replay_writer(sys, c, metrics);
  std::vector<shared_item> items;
  std::vector<item_result> results;
  make_request(5, 10, items, results);
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  {
    file_size_limit full{fs::file_size(dir / "r.jsonl") + 6000};
    make_request(20, 1000, items, results); // about 25 KB: the disk takes 6 KB of it
    recorder->record(false, items, results);
    make_request(3, 10, items, results); // fits in what is left
    recorder->record(false, items, results);
    ASSERT_TRUE(recorder->flush(60s));
  }
  EXPECT_EQ(counter(registry, R"(arbiter_replay_records_total{result="failed"})"), 20.0);
  EXPECT_EQ(counter(registry, R"(arbiter_replay_records_total{result="written"})"), 8.0);
  auto lines = lines_of(dir / "r.jsonl");
  ASSERT_EQ(lines.size(), 1u + 5u + 1u + 3u) << "a gap record says the 20 refused are missing";
  EXPECT_EQ(backends::replay::decode(lines.at(6)).dropped, 20u);
  expect_whole_records(dir / "r.jsonl");
  EXPECT_EQ(counter(registry, "\narbiter_replay_bytes_total"),
            static_cast<double>(fs::file_size(dir / "r.jsonl")))
    << "the start line counts too";
}

TEST_F(ReplayWriter, ALogThatEndsInARecordCutShortIsMendedBeforeItsNextStart) {
  std::vector<shared_item> items;
  std::vector<item_result> results;
  make_request(2, 10, items, results);
  const auto whole = backends::replay::encode(*items[0], results[0], false, "2026-01-01T00:00:00Z");
  {
    std::ofstream out{dir / "r.jsonl", std::ios::binary};
    out << whole << "\n" << whole.substr(0, whole.size() / 2); // a crash mid-record
  }
  replay_settings c;
  c.path = (dir / "r.jsonl").string();
  auto recorder = spawn_replay_writer(sys, c, metrics);
  recorder->record(false, items, results);
  ASSERT_TRUE(recorder->flush(60s));
  auto lines = lines_of(dir / "r.jsonl");
  ASSERT_EQ(lines.size(), 1u + 1u + 1u + 2u)
    << "the whole record, a gap for the one cut off, a start line, the request";
  EXPECT_EQ(lines[0], whole);
  auto gap = backends::replay::decode(lines[1]);
  EXPECT_EQ(gap.type, backends::replay::record_type::gap) << lines[1];
  EXPECT_EQ(gap.dropped, 1u) << "replay then says the log is incomplete";
  expect_whole_records(dir / "r.jsonl");
}
