// `arbiter replay LOG...`: recomputes every reward item of replay logs from what they recorded
// (docs/replay.md) and prints each item whose score differs from the one returned at the time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/replay/replayer.hpp"
#include "backends/reward_catalog.hpp"
#include "backends/rewards/reward_kinds.hpp"
#include "common/text_excerpt.hpp"
#include "exe/serve.hpp"
#include "exe/startup.hpp"

namespace arbiter::exe {

namespace {

using json = nlohmann::json;
namespace replay = backends::replay;

/// Counts per reward kind.
struct tally {
  uint64_t items = 0;
  uint64_t identical = 0;
  uint64_t differs = 0;
  uint64_t not_replayable = 0;
};

/// Groups not-replayable reasons: the reason, cut at a word near 200 characters (what
/// follows names one item: a text, an address). At 120, a hang-up's reason lost its end
/// ("this item's ...", helper-64).
std::string reason_heading(const std::string& reason) {
  auto cut = utf8_prefix(reason, 200);
  if (cut.size() == reason.size()) {
    return reason;
  }
  if (auto space = cut.rfind(' '); space != std::string_view::npos && space > 100) {
    cut = cut.substr(0, space);
  }
  return std::string{cut} + " …";
}

/// Whether the shorter of two files is the start of the longer: a copy of a log, maybe taken
/// while the server went on writing. Rotated files never are: each begins with its own
/// `start` record and holds other records.
bool one_begins_the_other(const std::string& a, const std::string& b) {
  std::ifstream x{a, std::ios::binary};
  std::ifstream y{b, std::ios::binary};
  std::string first_x;
  std::string first_y;
  if (!std::getline(x, first_x) || !std::getline(y, first_y) || first_x != first_y
      || first_x.find("\"type\":\"start\"") == std::string::npos) {
    return false;
  }
  std::vector<char> bx(1 << 16);
  std::vector<char> by(1 << 16);
  while (true) {
    x.read(bx.data(), static_cast<std::streamsize>(bx.size()));
    y.read(by.data(), static_cast<std::streamsize>(by.size()));
    const auto n = std::min(x.gcount(), y.gcount());
    if (!std::equal(bx.begin(), bx.begin() + n, by.begin())) {
      return false;
    }
    if (x.gcount() < static_cast<std::streamsize>(bx.size())
        || y.gcount() < static_cast<std::streamsize>(by.size())) {
      return true; // one ended, and all of it matched the other
    }
  }
}

/// Files that would count items twice: one given twice (or a link to it), or a copy of
/// another. Their items would be counted, and their cached twins found, twice.
bool files_given_twice(const std::vector<std::string>& files) {
  for (size_t i = 0; i < files.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      std::error_code missing; // a file that cannot be read is reported when it is opened
      if (std::filesystem::equivalent(files[i], files[j], missing)) {
        std::cerr << "arbiter replay: '" << files[i] << "' is given twice ('" << files[j]
                  << "')\n";
        return true;
      }
      if (one_begins_the_other(files[i], files[j])) {
        std::cerr << "arbiter replay: '" << files[i] << "' and '" << files[j]
                  << "' begin with the same start record, and one holds the start of the "
                     "other: a copy of the log; give one of them\n";
        return true;
      }
    }
  }
  return false;
}

/// Files replay cannot read as they are: a pipe (`cat LOG | arbiter replay /dev/stdin`: a
/// second pass, for the cached items' evidence, found it empty and called them unreplayable),
/// or a compressed log (logrotate's `compress`: every line was a JSON error).
bool files_unfit(const std::vector<std::string>& files) {
  for (const auto& file : files) {
    std::error_code error;
    auto status = std::filesystem::status(file, error);
    if (error) {
      continue; // reported when it is opened
    }
    if (!std::filesystem::is_regular_file(status)) {
      std::cerr << "arbiter replay: '" << file
                << "' is not a regular file (a pipe, a device, a folder?): replay reads each "
                   "file twice; write it to a file first (zcat LOG.gz > LOG)\n";
      return true;
    }
    std::ifstream in{file, std::ios::binary};
    unsigned char head[6] = {};
    in.read(reinterpret_cast<char*>(head), sizeof head);
    const auto n = in.gcount();
    const char* packed = nullptr;
    // Named with the command that writes it out whatever the file's name (gunzip -k refuses
    // a name without .gz).
    if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b) {
      packed = "gzip (zcat";
    } else if (n >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f
               && head[3] == 0xfd) {
      packed = "zstd (zstdcat";
    } else if (n >= 6 && head[0] == 0xfd && head[1] == '7' && head[2] == 'z' && head[3] == 'X'
               && head[4] == 'Z' && head[5] == 0) {
      packed = "xz (xzcat";
    } else if (n >= 3 && head[0] == 'B' && head[1] == 'Z' && head[2] == 'h') {
      packed = "bzip2 (bzcat";
    }
    if (packed != nullptr) {
      std::cerr << "arbiter replay: '" << file << "' is compressed with " << packed << " '"
                << file << "' > LOG first, and give LOG)\n";
      return true;
    }
  }
  return false;
}

/// Unreadable lines reported on stderr per file, before the rest are only counted: a file
/// that is not a log (a binary file, a log compressed by logrotate) would print every line.
constexpr uint64_t unreadable_lines_shown = 10;

} // namespace

int replay_logs(const replay_options& options) {
  if (files_unfit(options.files) || files_given_twice(options.files)) {
    return 2;
  }
  config::arbiter_config cfg;
  if (!load_configuration(options.config_file, {}, cfg, config_use::replay)) {
    return 2;
  }
  const backends::reward_catalog catalog{cfg};
  const backends::cpu_limits limits{cfg.cpu.max_lexical_chars};

  std::map<std::string, tally> kinds;
  std::map<std::string, uint64_t> unreplayable_reasons;
  json differences = json::array();
  uint64_t calls = 0;
  uint64_t unreadable = 0;
  uint64_t dropped = 0;
  uint64_t skipped_steps = 0;

  auto count = [&](const std::string& file, uint64_t line_no, const replay::record& r,
                   const replay::replay_result& result) {
    auto& t = kinds[r.item.kind];
    ++t.items;
    switch (result.outcome) {
      case replay::verdict::identical:
        ++t.identical;
        break;
      case replay::verdict::not_replayable:
        ++t.not_replayable;
        ++unreplayable_reasons[r.item.kind + ": " + reason_heading(result.reason)];
        break;
      case replay::verdict::differs: {
        ++t.differs;
        json d = {{"file", file},          {"line", line_no},
                  {"step", r.item.step},   {"reward", r.item.reward},
                  {"kind", r.item.kind},   {"status", to_string(r.result.status)},
                  {"score", r.result.score}, {"reason", result.reason}};
        if (result.recomputed.code == errc::none) {
          d["replayed"] = result.recomputed.score;
        }
        if (!options.json) {
          std::cout << "DIFF " << file << ":" << line_no << " reward=" << r.item.reward
                    << " kind=" << r.item.kind
                    << (r.item.step.empty() ? "" : " step=" + r.item.step) << ": "
                    << result.reason << "\n";
        }
        differences.push_back(std::move(d));
        break;
      }
    }
  };

  // Calls `f(file, line number, record)` for every readable record of every file.
  // Progress on stderr every few seconds, for logs that take a while.
  uint64_t read_lines = 0;
  auto last_progress = std::chrono::steady_clock::now();
  auto progress = [&](const char* pass) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_progress >= std::chrono::seconds{5}) {
      last_progress = now;
      std::cerr << "arbiter replay: " << pass << ": " << read_lines << " lines read\n";
    }
  };
  auto each_record = [&](bool report, const auto& f) {
    read_lines = 0;
    for (const auto& file : options.files) {
      std::ifstream in{file};
      if (!in) {
        std::cerr << "arbiter replay: cannot open '" << file << "'\n";
        return false;
      }
      uint64_t line_no = 0;
      uint64_t unreadable_here = 0;
      for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.empty()) {
          continue;
        }
        replay::record r;
        try {
          r = replay::decode(line);
        } catch (const std::exception& e) {
          if (report) {
            ++unreadable;
            if (++unreadable_here <= unreadable_lines_shown) {
              std::cerr << file << ":" << line_no << ": " << utf8_prefix(e.what(), 300) << "\n";
            }
          }
          continue;
        }
        ++read_lines;
        progress(report ? "replaying" : "finding the cached items' evidence");
        f(file, line_no, std::move(r));
      }
      if (unreadable_here > unreadable_lines_shown) {
        std::cerr << file << ": " << unreadable_here - unreadable_lines_shown
                  << " more lines could not be read (" << unreadable_here << " of " << line_no
                  << "): is it a replay log?\n";
      }
    }
    return true;
  };

  // An item answered from the cache carries no evidence of its own: the record of the item
  // that computed it does, the latest one before it (an entry that expired was computed again,
  // maybe from another source's vectors). Those wait until a second pass has found it.
  // Records are ordered by time (each item's is when it got its answer), then by the order of
  // the files given, then by line.
  using place = std::tuple<std::string, size_t, uint64_t>;
  auto place_of = [&](const std::string& file, uint64_t line_no, const replay::record& r) {
    auto index = std::find(options.files.begin(), options.files.end(), file)
                 - options.files.begin();
    return place{r.time, static_cast<size_t>(index), line_no};
  };
  struct deferred {
    std::string file;
    uint64_t line = 0;
    replay::record record;
    std::string key;
    place at;
  };
  std::vector<deferred> from_cache;
  // item key -> where each record that computed it is, with its evidence
  std::map<std::string, std::vector<std::pair<place, std::string>>> wanted;
  bool readable = each_record(true, [&](const std::string& file, uint64_t line_no,
                                        replay::record r) {
    if (r.type == replay::record_type::call) {
      if (!options.step || r.item.step == *options.step) {
        ++calls;
      }
      return;
    }
    if (r.type == replay::record_type::gap) {
      dropped += r.dropped; // of any step: a gap record cannot say whose they were
      return;
    }
    if (r.type != replay::record_type::item) {
      return;
    }
    if (options.step && r.item.step != *options.step) {
      ++skipped_steps;
      return;
    }
    const auto* kind = backends::find_reward_kind(r.item.kind);
    if (r.result.cached && r.result.evidence.empty() && r.result.status == item_status::ok
        && kind != nullptr && kind->runner != backends::reward_runner::cpu) {
      auto key = replay::item_key(r.item);
      wanted.try_emplace(key);
      auto at = place_of(file, line_no, r);
      from_cache.push_back({file, line_no, std::move(r), std::move(key), std::move(at)});
      return;
    }
    count(file, line_no, r, replay::replay_item(r, catalog, limits));
  });
  if (!readable) {
    return 2;
  }
  if (!from_cache.empty()) {
    each_record(false, [&](const std::string& file, uint64_t line_no, replay::record r) {
      if (r.type != replay::record_type::item || r.result.evidence.empty()) {
        return;
      }
      auto found = wanted.find(replay::item_key(r.item));
      if (found != wanted.end()) {
        found->second.emplace_back(place_of(file, line_no, r), std::move(r.result.evidence));
      }
    });
    for (auto& d : from_cache) {
      const std::string* evidence = nullptr;
      const place* latest = nullptr;
      for (const auto& [at, text] : wanted[d.key]) {
        // Up to the same millisecond, wherever its line is: a request holding the item that
        // computed it may have ended (and been written) after the cached twin's.
        if (std::get<0>(at) <= std::get<0>(d.at) && (latest == nullptr || *latest < at)) {
          latest = &at;
          evidence = &text;
        }
      }
      if (evidence == nullptr) {
        replay::replay_result none;
        none.outcome = replay::verdict::not_replayable;
        none.reason = "answered from the cache; the record of the item that computed it is "
                      "not in these files";
        count(d.file, d.line, d.record, none);
        continue;
      }
      d.record.result.evidence = *evidence;
      count(d.file, d.line, d.record, replay::replay_item(d.record, catalog, limits));
    }
  }

  tally total;
  for (const auto& [kind, t] : kinds) {
    total.items += t.items;
    total.identical += t.identical;
    total.differs += t.differs;
    total.not_replayable += t.not_replayable;
  }
  if (options.json) {
    json by_kind = json::object();
    for (const auto& [kind, t] : kinds) {
      by_kind[kind] = {{"items", t.items},
                       {"identical", t.identical},
                       {"differs", t.differs},
                       {"not_replayable", t.not_replayable}};
    }
    std::cout << json{{"items", total.items},
                      {"identical", total.identical},
                      {"differs", total.differs},
                      {"not_replayable", total.not_replayable},
                      {"calls", calls},
                      {"unreadable_lines", unreadable},
                      {"dropped_records", dropped},
                      {"by_kind", by_kind},
                      {"not_replayable_reasons", unreplayable_reasons},
                      {"differences", differences}}
                   .dump(2)
              << "\n";
  } else {
    std::printf("%-18s %9s %10s %8s %15s\n", "kind", "items", "identical", "differ",
                "not replayable");
    for (const auto& [kind, t] : kinds) {
      std::printf("%-18s %9llu %10llu %8llu %15llu\n", kind.c_str(),
                  static_cast<unsigned long long>(t.items),
                  static_cast<unsigned long long>(t.identical),
                  static_cast<unsigned long long>(t.differs),
                  static_cast<unsigned long long>(t.not_replayable));
    }
    std::printf("%-18s %9llu %10llu %8llu %15llu\n", "total",
                static_cast<unsigned long long>(total.items),
                static_cast<unsigned long long>(total.identical),
                static_cast<unsigned long long>(total.differs),
                static_cast<unsigned long long>(total.not_replayable));
    std::printf("%llu model calls recorded%s\n", static_cast<unsigned long long>(calls),
                options.step ? (", " + std::to_string(skipped_steps)
                                + " items of other steps skipped")
                                 .c_str()
                             : "");
    for (const auto& [reason, n] : unreplayable_reasons) {
      std::printf("not replayable: %llu × %s\n", static_cast<unsigned long long>(n),
                  reason.c_str());
    }
    if (unreadable > 0) {
      std::printf("%llu lines could not be read (see stderr)\n",
                  static_cast<unsigned long long>(unreadable));
    }
  }
  if (dropped > 0) {
    // A gap record is written once the log takes records again: a disk that stayed full to
    // the end could not take the last one, so this is a lower bound.
    std::cerr << "arbiter replay: the log is incomplete: at least " << dropped
              << " records never reached it (the writer was replay.max_backlog behind, or the "
                 "disk refused them; see its gap records, and the server's "
                 "arbiter_replay_records_total{result=\"failed\"})\n";
  }
  const bool nothing = total.items == 0 && calls == 0;
  if (nothing) {
    // The wrong file, or a step that is not in it: nothing was checked, which is no success.
    std::cerr << "arbiter replay: no item or call records"
              << (options.step ? " of step '" + *options.step + "'" : std::string{})
              << " in these files\n";
  }
  return total.differs > 0 || unreadable > 0 || dropped > 0 || nothing ? 1 : 0;
}

} // namespace arbiter::exe
