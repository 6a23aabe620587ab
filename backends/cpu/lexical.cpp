// Lexical similarity: a port of `difflib.SequenceMatcher(None, a, b).ratio()` from CPython 3.11
// (Lib/difflib.py: __chain_b, find_longest_match, get_matching_blocks, ratio), plus a small
// UTF-8 decoder that replaces ill-formed sequences the way Python's `errors="replace"` does.

#include "backends/cpu/lexical.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace arbiter::backends::cpu {
namespace {

/// One matching block: `a[i:i+size] == b[j:j+size]`.
struct match {
  std::size_t i = 0;
  std::size_t j = 0;
  std::size_t size = 0;
};

/// A [begin, end) range of positions in a flat array.
struct index_range {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
};

/// A match length and the row that wrote it.
struct cell {
  std::uint32_t stamp = 0;
  std::uint32_t length = 0;
};

/// Scratch buffers, kept per thread so that scoring short texts allocates nothing once warm.
struct workspace {
  std::vector<std::uint32_t> b_ids;
  std::vector<std::uint32_t> counts;
  std::vector<index_range> lists;
  std::unordered_map<char32_t, std::uint32_t> other_ids;
  std::vector<std::uint32_t> b2j_indices;
  std::vector<index_range> a_lists;
  /// Match lengths of two consecutive rows (see find_longest_match), and the row stamp.
  std::array<std::vector<cell>, 2> rows;
  std::uint32_t stamp = 2;
  std::vector<match> blocks;
  std::vector<match> merged;
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>> queue;
};

workspace& thread_workspace() {
  thread_local workspace ws;
  return ws;
}

/// State of a `SequenceMatcher(None, a, b, autojunk=True)`.
///
/// With `isjunk=None` the junk set `bjunk` is empty, so only the autojunk heuristic
/// ("popular" elements of `b`) removes anything from `b2j`. Popular elements can still
/// become part of a match through the extension step of `find_longest_match`, exactly as
/// in Python.
class sequence_matcher {
public:
  sequence_matcher(std::u32string_view a, std::u32string_view b, workspace& ws)
    : a_(a), b_(b), ws_(ws), b2j_indices_(ws.b2j_indices), a_lists_(ws.a_lists),
      rows_(ws.rows), stamp_(ws.stamp) {
    chain_b();
    // Indexed by j + 1 so that `j - 1` never underflows. Fresh stamps every time the
    // counter nears its end (after billions of rows).
    if (stamp_ > std::numeric_limits<std::uint32_t>::max() - (a_.size() + 4) * 2) {
      stamp_ = 2;
      rows_[0].clear();
      rows_[1].clear();
    }
    rows_[0].resize(std::max(rows_[0].size(), b_.size() + 1));
    rows_[1].resize(std::max(rows_[1].size(), b_.size() + 1));
  }

  /// Sum of the sizes of all matching blocks (`sum(m.size for m in get_matching_blocks())`).
  std::size_t matched_total() {
    std::size_t total = 0;
    for (const match& m : matching_blocks()) {
      total += m.size;
    }
    return total;
  }

private:
  /// Builds b2j (element -> increasing indices in b), drops popular elements, and resolves
  /// `b2j.get(a[i], [])` once per element of `a`. Elements get dense ids; the index lists are
  /// stored back to back in `b2j_indices_` and `a_lists_[i]` is the range of a[i]'s list
  /// (empty when a[i] is absent from b2j).
  void chain_b() {
    constexpr std::uint32_t no_id = std::numeric_limits<std::uint32_t>::max();
    std::array<std::uint32_t, 128> ascii_ids{};
    ascii_ids.fill(no_id);
    auto& other_ids = ws_.other_ids;
    other_ids.clear();
    const auto find_id = [&](char32_t elt) -> std::uint32_t {
      if (elt < ascii_ids.size()) {
        return ascii_ids[elt];
      }
      const auto it = other_ids.find(elt);
      return it == other_ids.end() ? no_id : it->second;
    };

    const std::size_t n = b_.size();
    auto& b_ids = ws_.b_ids;
    b_ids.resize(n);
    auto& counts = ws_.counts;
    counts.clear();
    for (std::size_t j = 0; j < n; ++j) {
      const char32_t elt = b_[j];
      std::uint32_t id = find_id(elt);
      if (id == no_id) {
        id = static_cast<std::uint32_t>(counts.size());
        counts.push_back(0);
        if (elt < ascii_ids.size()) {
          ascii_ids[elt] = id;
        } else {
          other_ids.emplace(elt, id);
        }
      }
      ++counts[id];
      b_ids[j] = id;
    }

    // Autojunk: popular elements leave b2j (their list becomes empty).
    if (n >= 200) {
      const std::size_t ntest = n / 100 + 1;
      for (std::uint32_t& count : counts) {
        if (count > ntest) {
          count = 0;
        }
      }
    }

    auto& lists = ws_.lists;
    lists.resize(counts.size());
    std::uint32_t offset = 0;
    for (std::size_t id = 0; id < counts.size(); ++id) {
      lists[id] = index_range{offset, offset};
      offset += counts[id];
    }
    b2j_indices_.resize(offset);
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint32_t id = b_ids[j];
      if (counts[id] != 0) {
        b2j_indices_[lists[id].end++] = static_cast<std::uint32_t>(j);
      }
    }

    a_lists_.clear();
    a_lists_.reserve(a_.size());
    for (const char32_t elt : a_) {
      const std::uint32_t id = find_id(elt);
      a_lists_.push_back(id == no_id ? index_range{} : lists[id]);
    }
  }

  /// Longest matching block in `a[alo:ahi]` and `b[blo:bhi]`, with CPython's tie-breaking:
  /// the earliest start in `a`, then the earliest start in `b`, before extension.
  match find_longest_match(std::size_t alo, std::size_t ahi, std::size_t blo, std::size_t bhi) {
    std::size_t besti = alo;
    std::size_t bestj = blo;
    std::size_t bestsize = 0;

    // Python keeps j2len (match lengths ending at the previous row) in a dict and builds a new
    // one per row. Here two arrays indexed by j + 1 alternate between rows, and each entry
    // carries the row stamp that wrote it, so stale entries read as 0 and nothing is cleared.
    // The first row's predecessor stamp is one that no row ever used.
    stamp_ += 2;
    for (std::size_t i = alo; i < ahi; ++i) {
      const std::uint32_t row = stamp_++;
      cell* const cur = rows_[row & 1u].data();
      const cell* const prev = rows_[(row - 1u) & 1u].data();
      const index_range list = a_lists_[i];
      const std::uint32_t* it = b2j_indices_.data() + list.begin;
      const std::uint32_t* const last = b2j_indices_.data() + list.end;
      // Python skips j < blo one by one; long lists are sorted, so search them instead.
      if (last - it > 16) {
        it = std::lower_bound(it, last, blo);
      }
      for (; it != last; ++it) {
        const std::size_t j = *it;
        if (j < blo) {
          continue;
        }
        if (j >= bhi) {
          break;
        }
        const std::uint32_t k = (prev[j].stamp == row - 1u ? prev[j].length : 0u) + 1u;
        cur[j + 1] = cell{row, k};
        if (k > bestsize) {
          besti = i + 1 - k;
          bestj = j + 1 - k;
          bestsize = k;
        }
      }
    }

    // Extend with equal elements on both sides. `bjunk` is empty (isjunk=None), so the
    // "non-junk" extension takes every equal element, popular ones included, and the
    // "junk" extension that follows it in Python never applies.
    while (besti > alo && bestj > blo && a_[besti - 1] == b_[bestj - 1]) {
      --besti;
      --bestj;
      ++bestsize;
    }
    while (besti + bestsize < ahi && bestj + bestsize < bhi &&
           a_[besti + bestsize] == b_[bestj + bestsize]) {
      ++bestsize;
    }
    return match{besti, bestj, bestsize};
  }

  /// Python's get_matching_blocks: recursive splitting (with an explicit stack), sorting,
  /// merging of adjacent blocks. The trailing (la, lb, 0) sentinel is omitted.
  const std::vector<match>& matching_blocks() {
    auto& blocks = ws_.blocks;
    blocks.clear();
    auto& queue = ws_.queue;
    queue.clear();
    queue.emplace_back(0, a_.size(), 0, b_.size());
    while (!queue.empty()) {
      const auto [alo, ahi, blo, bhi] = queue.back();
      queue.pop_back();
      const match m = find_longest_match(alo, ahi, blo, bhi);
      if (m.size != 0) {
        blocks.push_back(m);
        if (alo < m.i && blo < m.j) {
          queue.emplace_back(alo, m.i, blo, m.j);
        }
        if (m.i + m.size < ahi && m.j + m.size < bhi) {
          queue.emplace_back(m.i + m.size, ahi, m.j + m.size, bhi);
        }
      }
    }
    std::sort(blocks.begin(), blocks.end(), [](const match& x, const match& y) {
      return std::tie(x.i, x.j, x.size) < std::tie(y.i, y.j, y.size);
    });

    auto& merged = ws_.merged;
    merged.clear();
    match current{};
    for (const match& m : blocks) {
      if (current.i + current.size == m.i && current.j + current.size == m.j) {
        current.size += m.size;
      } else {
        if (current.size != 0) {
          merged.push_back(current);
        }
        current = m;
      }
    }
    if (current.size != 0) {
      merged.push_back(current);
    }
    return merged;
  }

  std::u32string_view a_;
  std::u32string_view b_;
  workspace& ws_;
  std::vector<std::uint32_t>& b2j_indices_;
  std::vector<index_range>& a_lists_;
  std::array<std::vector<cell>, 2>& rows_;
  std::uint32_t& stamp_;
};

constexpr char32_t replacement_char = 0xFFFD;

/// Whether `byte` is a continuation byte within [lo, hi].
bool in_range(unsigned char byte, unsigned char lo, unsigned char hi) {
  return byte >= lo && byte <= hi;
}

} // namespace

double sequence_matcher_ratio(std::u32string_view a, std::u32string_view b) {
  const std::size_t length = a.size() + b.size();
  if (length == 0) {
    return 1.0;
  }
  sequence_matcher matcher(a, b, thread_workspace());
  const std::size_t matches = matcher.matched_total();
  return 2.0 * static_cast<double>(matches) / static_cast<double>(length);
}

std::u32string decode_utf8(std::string_view text) {
  // Well-formed sequences per Unicode Table 3-7. An ill-formed sequence is replaced by one
  // U+FFFD per maximal subpart, which is what CPython's UTF-8 decoder does with "replace".
  std::u32string out;
  out.reserve(text.size());
  const std::size_t n = text.size();
  std::size_t pos = 0;
  while (pos < n) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    if (lead < 0x80) {
      out.push_back(lead);
      ++pos;
      continue;
    }
    std::size_t needed = 0;            // continuation bytes after the lead byte
    unsigned char lo = 0x80;           // allowed range of the first continuation byte
    unsigned char hi = 0xBF;
    char32_t cp = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      needed = 1;
      cp = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      needed = 2;
      cp = lead & 0x0Fu;
      if (lead == 0xE0) {
        lo = 0xA0;
      } else if (lead == 0xED) {
        hi = 0x9F;
      }
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      needed = 3;
      cp = lead & 0x07u;
      if (lead == 0xF0) {
        lo = 0x90;
      } else if (lead == 0xF4) {
        hi = 0x8F;
      }
    } else {
      out.push_back(replacement_char);
      ++pos;
      continue;
    }
    std::size_t next = pos + 1;
    std::size_t got = 0;
    while (got < needed && next < n) {
      const auto byte = static_cast<unsigned char>(text[next]);
      const bool ok = got == 0 ? in_range(byte, lo, hi) : in_range(byte, 0x80, 0xBF);
      if (!ok) {
        break;
      }
      cp = (cp << 6) | (byte & 0x3Fu);
      ++got;
      ++next;
    }
    out.push_back(got == needed ? cp : replacement_char);
    pos = next;
  }
  return out;
}

} // namespace arbiter::backends::cpu
