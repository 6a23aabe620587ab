#pragma once

// What every native model takes when it is loaded (`model_options`) and what it says about
// itself once loaded (`model_info`, for /info and metrics). No torch type here.

#include <cstdint>
#include <string>

namespace arbiter::backends::models {

/// Where and how to run a model.
struct model_options {
  /// "cpu" or "cuda:N".
  std::string device = "cpu";
  /// "auto" (f32 on CPU, bf16 on GPU), "f32", "f16" or "bf16".
  std::string dtype = "auto";
  /// What one more forward pass (or attention call) over a batch of mixed lengths is worth,
  /// in tokens computed, when the batch is cut: fewer, padded calls or more, tighter ones.
  /// -1: by device (pass_overhead_tokens() in passes.hpp).
  int64_t pass_overhead_tokens = -1;
  /// Generators: replay each decoding step from a CUDA graph, one launch where a step is a few
  /// hundred kernels. -1: on a GPU; 0: never; 1: also on the CPU, where the graph's fixed-shape
  /// step (the whole cache attended under a mask) runs eagerly: the arithmetic a graph replays,
  /// for tests.
  int decode_graphs = -1;
};

/// What a loaded model is.
struct model_info {
  std::string folder;
  std::string architecture;
  std::string device;
  std::string dtype;
  /// Embedders: "mean", "cls" or "last"; empty for the others.
  std::string pooling;
  uint32_t hidden = 0;
  uint32_t layers = 0;
  /// Longest input in tokens (sentence-transformers' max_seq_length, else the position table).
  uint32_t max_tokens = 0;
  /// Bytes the weights take on the device.
  uint64_t weight_bytes = 0;
};

/// Whether PyTorch's attention may take cuDNN's kernels (process-wide; PyTorch's default is
/// yes). Placing a model on a GPU turns it off: use_no_cudnn_attention in loading.hpp says why.
bool cudnn_attention_allowed();
void allow_cudnn_attention(bool allowed);

} // namespace arbiter::backends::models
