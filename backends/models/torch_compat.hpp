#pragma once

// The one place where libtorch versions differ for us: Debian's libtorch 1.13 (CPU, CI) has no
// public scaled_dot_product_attention; PyTorch 2.x (the GPU machines) does, with fused kernels.
// Include only from .cpp files that already include torch.

#include <cmath>

#include <torch/torch.h>

namespace arbiter::backends::models {

/// softmax(q kᵀ / sqrt(d) + bias) v for [batch, heads, len, d] tensors; `bias` is additive and
/// broadcastable to [batch, heads, len, len] (large negative where masked).
inline torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& bias) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, bias);
#else
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  return torch::matmul(torch::softmax(scores + bias, -1), v);
#endif
}

} // namespace arbiter::backends::models
