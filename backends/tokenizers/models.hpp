#pragma once

// The tokenizer models (`model` in tokenizer.json): each turns one pre-token (UTF-8) into ids.
// Internal to backends/tokenizers; tokenizer.cpp fills them from the JSON.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace arbiter::backends::tokenizers {

using vocabulary = std::unordered_map<std::string, std::int64_t>;

/// WordPiece (BERT): greedy longest-match-first; pieces after the first carry
/// `continuing_subword_prefix`; a word longer than `max_input_chars_per_word` code points, or
/// one that cannot be covered, becomes the single `unk_id`.
struct wordpiece_model {
  vocabulary vocab;
  std::int64_t unk_id = 0;
  std::string continuing_subword_prefix = "##";
  std::size_t max_input_chars_per_word = 100;

  void tokenize(std::string_view word, std::vector<std::int64_t>& out) const;
};

/// BPE: the word's characters (with the optional continuing-subword prefix and end-of-word
/// suffix) merged pairwise, lowest merge rank first and leftmost first among equal ranks,
/// exactly as `tokenizers`' `Word::merge_all`.
struct bpe_model {
  struct merge {
    std::int64_t rank = 0;
    std::int64_t new_id = 0;
  };

  vocabulary vocab;
  /// Keyed by `pair_key(left_id, right_id)`.
  std::unordered_map<std::uint64_t, merge> merges;
  std::optional<std::int64_t> unk_id;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;

  static std::uint64_t pair_key(std::int64_t left, std::int64_t right) {
    return (static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint32_t>(right);
  }

  void tokenize(std::string_view word, std::vector<std::int64_t>& out) const;
};

} // namespace arbiter::backends::tokenizers
