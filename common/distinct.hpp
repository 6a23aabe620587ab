#pragma once

// The distinct strings of a list, each found once: an embedding batch holds a GRPO group's
// reference once per rollout, and each distinct text need be embedded (or sent) only once.

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace arbiter {

struct distinct_strings {
  /// The index in the list of each distinct string's first place, in list order.
  std::vector<size_t> first;
  /// For each place in the list, the index in `first` of its string.
  std::vector<size_t> same_as;
};

inline distinct_strings find_distinct(const std::vector<std::string>& list) {
  distinct_strings out;
  out.same_as.reserve(list.size());
  std::unordered_map<std::string_view, size_t> seen;
  seen.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    auto [found, fresh] = seen.try_emplace(list[i], out.first.size());
    out.same_as.push_back(found->second);
    if (fresh) {
      out.first.push_back(i);
    }
  }
  return out;
}

} // namespace arbiter
