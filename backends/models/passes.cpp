#include "backends/models/passes.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace arbiter::backends::models {

std::size_t pass_overhead_tokens(long long configured, bool gpu, bool half_precision,
                                 std::size_t cpu_default) {
  if (configured >= 0) {
    return static_cast<std::size_t>(configured);
  }
  if (!gpu) {
    return cpu_default;
  }
  return half_precision ? no_cut_overhead : 2048;
}

std::vector<forward_pass> plan_passes(const std::vector<size_t>& lengths,
                                      size_t max_batch_tokens, size_t pass_overhead_tokens) {
  const size_t n = lengths.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  // best[j]: the least cost of running the j shortest inputs; cut[j]: where their last pass
  // starts. A pass [i, j) pads to the length of input j - 1 (the longest of it).
  constexpr size_t none = std::numeric_limits<size_t>::max();
  std::vector<size_t> best(n + 1, none);
  std::vector<size_t> cut(n + 1, 0);
  best[0] = 0;
  for (size_t j = 1; j <= n; ++j) {
    const size_t longest = std::max<size_t>(lengths[order[j - 1]], 1);
    const size_t fits = std::max<size_t>(max_batch_tokens / longest, 1);
    for (size_t i = j; i-- > 0 && j - i <= fits;) {
      if (best[i] == none) {
        continue;
      }
      size_t cost = best[i] + (j - i) * longest + pass_overhead_tokens;
      if (cost < best[j]) {
        best[j] = cost;
        cut[j] = i;
      }
    }
  }
  std::vector<forward_pass> passes;
  for (size_t j = n; j > 0; j = cut[j]) {
    forward_pass pass;
    pass.padded_length = lengths[order[j - 1]];
    pass.inputs.assign(order.begin() + static_cast<std::ptrdiff_t>(cut[j]),
                       order.begin() + static_cast<std::ptrdiff_t>(j));
    passes.push_back(std::move(pass));
  }
  std::reverse(passes.begin(), passes.end());
  return passes;
}

} // namespace arbiter::backends::models
