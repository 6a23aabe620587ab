#include "backends/tokenizers/models.hpp"

#include <cstdio>
#include <queue>

namespace arbiter::backends::tokenizers {

namespace {

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

/// The byte length of the UTF-8 character starting at `i`.
std::size_t char_length(std::string_view s, std::size_t i) {
  std::size_t n = 1;
  while (i + n < s.size() && is_utf8_continuation(s[i + n])) ++n;
  return n;
}

std::size_t count_chars(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += is_utf8_continuation(c) ? 0 : 1;
  return n;
}

std::optional<std::int64_t> find(const vocabulary& vocab, const std::string& key) {
  const auto it = vocab.find(key);
  if (it == vocab.end()) return std::nullopt;
  return it->second;
}

} // namespace

void wordpiece_model::tokenize(std::string_view word, std::vector<std::int64_t>& out) const {
  if (count_chars(word) > max_input_chars_per_word) {
    out.push_back(unk_id);
    return;
  }
  const std::size_t mark = out.size();
  std::size_t start = 0;
  while (start < word.size()) {
    std::size_t end = word.size();
    std::optional<std::int64_t> found;
    while (start < end) {
      std::string key = start > 0 ? continuing_subword_prefix : std::string{};
      key.append(word.substr(start, end - start));
      if ((found = find(vocab, key))) break;
      do --end;
      while (end > start && is_utf8_continuation(word[end]));
    }
    if (!found) {
      out.resize(mark);
      out.push_back(unk_id);
      return;
    }
    out.push_back(*found);
    start = end;
  }
}

void bpe_model::tokenize(std::string_view word, std::vector<std::int64_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto id = find(vocab, std::string{word})) {
      out.push_back(*id);
      return;
    }
  }

  // The initial symbols, one per character (Word in tokenizers' bpe/word.rs).
  struct symbol {
    std::int64_t id = 0;
    std::ptrdiff_t prev = -1;
    std::ptrdiff_t next = -1;
    bool removed = false;
  };
  std::vector<std::int64_t> initial;
  std::optional<std::int64_t> pending_unk;
  auto flush_unk = [&] {
    if (pending_unk) initial.push_back(*pending_unk);
    pending_unk.reset();
  };
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t len = char_length(word, i);
    std::string key = i > 0 ? continuing_subword_prefix : std::string{};
    key.append(word.substr(i, len));
    if (i + len == word.size()) key += end_of_word_suffix;
    i += len;
    if (auto id = find(vocab, key)) {
      flush_unk();
      initial.push_back(*id);
      continue;
    }
    if (byte_fallback) {
      std::vector<std::int64_t> bytes;
      for (unsigned char b : key) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (auto id = find(vocab, name)) bytes.push_back(*id);
        else break;
      }
      if (bytes.size() == key.size()) {
        initial.insert(initial.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (unk_id) {
      if (!(pending_unk && fuse_unk)) flush_unk();
      pending_unk = unk_id;
    }
    // With no unk token, tokenizers drops the character.
  }
  flush_unk();

  std::vector<symbol> symbols(initial.size());
  for (std::size_t i = 0; i < initial.size(); ++i) {
    symbols[i].id = initial[i];
    symbols[i].prev = static_cast<std::ptrdiff_t>(i) - 1;
    symbols[i].next = i + 1 < initial.size() ? static_cast<std::ptrdiff_t>(i) + 1 : -1;
  }

  struct candidate {
    std::int64_t rank;
    std::size_t pos;
    std::int64_t new_id;
  };
  // Lowest rank first, then leftmost.
  auto later = [](const candidate& a, const candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<candidate, std::vector<candidate>, decltype(later)> queue{later};
  auto push_pair = [&](std::size_t left, std::size_t right) {
    const auto it = merges.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) push_pair(i, i + 1);

  while (!queue.empty()) {
    const candidate top = queue.top();
    queue.pop();
    symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    const auto right_pos = static_cast<std::size_t>(left.next);
    const symbol right = symbols[right_pos];
    // Skip entries made stale by an earlier merge.
    const auto current = merges.find(pair_key(left.id, right.id));
    if (current == merges.end() || current->second.new_id != top.new_id) continue;

    left.id = top.new_id;
    left.next = right.next;
    symbols[right_pos].removed = true;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev =
      static_cast<std::ptrdiff_t>(top.pos);
    if (left.prev >= 0) push_pair(static_cast<std::size_t>(left.prev), top.pos);
    if (left.next >= 0) push_pair(top.pos, static_cast<std::size_t>(left.next));
  }
  for (const symbol& s : symbols)
    if (!s.removed) out.push_back(s.id);
}

} // namespace arbiter::backends::tokenizers
