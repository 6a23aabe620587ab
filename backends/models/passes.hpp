#pragma once

// How a batch of tokenized inputs is cut into forward passes. No torch here: the plan is pure
// arithmetic over the inputs' lengths, shared by the embedder and the classifier.

#include <cstddef>
#include <vector>

namespace arbiter::backends::models {

/// One forward pass: the inputs it runs (indices into the batch, shortest first) and the
/// length they are padded to.
struct forward_pass {
  std::vector<size_t> inputs;
  size_t padded_length = 0;
};

/// Cuts inputs of `lengths` tokens into forward passes whose padded size (inputs × the
/// longest) stays within `max_batch_tokens` (a single input longer than that runs alone),
/// so that the tokens computed — real ones, padding, and `pass_overhead_tokens` for the fixed
/// cost of each pass — are the fewest: the inputs sorted by length, then the best cut points
/// by dynamic programming. sentence-transformers sorts a whole call by length for the same
/// reason; a request of mixed lengths in one pass pads every input to its longest.
/// The per-pass cost plan_passes weighs padding against: `configured` when it is set (>= 0);
/// else on a GPU, where each pass or attention call is a train of kernel launches whose cost
/// (tens of microseconds each on the machines measured) outweighs the compute of many
/// tokens: in f32 2048 tokens, and in bf16 or f16 (tensor cores, several times cheaper per
/// token) no cut at all, one padded pass (bench/README.md, GPU section, measured both ways);
/// else `cpu_default`.
std::size_t pass_overhead_tokens(long long configured, bool gpu, bool half_precision,
                                 std::size_t cpu_default);

/// A pass overhead that no padding outweighs: one pass, cut only by the token budget.
inline constexpr std::size_t no_cut_overhead = 1u << 30;

std::vector<forward_pass> plan_passes(const std::vector<size_t>& lengths,
                                      size_t max_batch_tokens, size_t pass_overhead_tokens = 32);

} // namespace arbiter::backends::models
