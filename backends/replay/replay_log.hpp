#pragma once

// The replay log's records (docs/replay.md): one JSON line per reward item and per model call
// that ended, written by actors/replay_writer and read back by `arbiter replay`. Pure
// functions, no files: encoding a record and decoding it give back the same item and result,
// numbers included (doubles are written with enough digits to read back bit for bit).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/score_types.hpp"

namespace arbiter::backends::replay {

/// What a line of the log holds.
enum class record_type : uint8_t {
  /// A reward item and how it ended, with what its score was computed from.
  item,
  /// A model call (a reward graph's, or a pass-through route's): the request and the raw
  /// response.
  call,
  /// Written when the log is opened: the server's version and time. Carries nothing to replay.
  start,
  /// Records that never reached the log (the writer was `max_backlog` behind, or the disk
  /// refused them), written before the next ones: `dropped` says how many.
  gap,
};

/// One record.
struct record {
  record_type type = record_type::item;
  /// UTC, ISO 8601 with milliseconds.
  std::string time;
  /// A reward graph's model calls and nested rewards (em_info_gain's info_gain item).
  bool internal = false;
  score_item item;
  item_result result;
  /// A `gap` record's count of the records missing before it.
  uint64_t dropped = 0;
};

/// The line (no newline) for `item`, ended with `result`, at `time`: a `call` record when the
/// item carries a model call, else an `item` record.
std::string encode(const score_item& item, const item_result& result, bool internal,
                   std::string_view time);

/// The `start` line for a log opened at `time` by `version`.
std::string encode_start(std::string_view version, std::string_view time);

/// The `gap` line: `dropped` records are missing before it.
std::string encode_gap(uint64_t dropped, std::string_view time);

/// Parses one line. Throws std::invalid_argument naming what is wrong.
record decode(std::string_view line);

/// The hex SHA-256 of what decides a reward item's score (reward, kind, texts, extra_info,
/// options): an item answered from the cache has the key of the one that computed it.
std::string item_key(const score_item& item);

/// The hex SHA-256 of what a model call sends as its input (prompt, messages, hypothesis):
/// the `prompt_hash` of call records and of a graph's evidence.
std::string prompt_hash(const model_call& call);

/// What a reward graph's model calls were and answered, step by step: the `evidence` of a
/// graph item (`item_outcome::evidence`). The graph actor feeds it; `arbiter replay` reads it.
class graph_trace {
public:
  struct call_ref {
    std::string capability;
    /// `prompt_hash` of the call; empty for a nested reward (em_info_gain's info_gain item).
    std::string prompt_hash;
  };
  struct step {
    std::vector<call_ref> calls;
    std::vector<item_result> answers;
  };

  /// A step's calls, as the graph asked for them.
  void calls(const std::vector<score_item>& items);
  /// The answers to the last step's calls.
  void answers(const std::vector<item_result>& results);

  const std::vector<step>& steps() const noexcept {
    return steps_;
  }

  /// As JSON text: {"steps": [{"calls": [...], "answers": [...]}, ...]}.
  std::string encode() const;
  /// Parses what `encode` wrote. Throws std::invalid_argument naming what is wrong.
  static graph_trace decode(std::string_view evidence);

private:
  std::vector<step> steps_;
};

/// What an embedding item's score was computed from: the embedder's model name and the vectors
/// of its texts (candidate first, then the references its options keep).
struct embedding_evidence {
  std::string model;
  std::vector<std::vector<double>> vectors;
};

std::string encode(const embedding_evidence& evidence);
/// Throws std::invalid_argument naming what is wrong.
embedding_evidence decode_embedding(std::string_view evidence);

} // namespace arbiter::backends::replay
