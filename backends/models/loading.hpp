#pragma once

// What every native model's loader does the same way: read config.json fields with clear
// errors, place the model (device, dtype) from `model_options`, and take a checkpoint tensor
// checked against the shape config.json implies. Includes torch: only for the model .cpp
// files.

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "backends/models/model_options.hpp"
#include "backends/models/safetensors.hpp"

namespace arbiter::backends::models {

/// The JSON object in `path`; an empty object when the file is absent and not `required`.
inline nlohmann::json read_json_file(const std::string& path, bool required = true) {
  std::ifstream in{path};
  if (!in) {
    if (required) {
      throw std::runtime_error{path + ": cannot open"};
    }
    return nlohmann::json::object();
  }
  auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    throw std::runtime_error{path + ": not a JSON object"};
  }
  return doc;
}

/// The rows of a 2-D tensor as vectors of floats (moved to the CPU as f32 first).
inline std::vector<std::vector<float>> rows_of(const torch::Tensor& tensor) {
  auto t = tensor.to(torch::kFloat32).to(torch::kCPU).contiguous();
  const auto rows = t.size(0);
  const auto cols = t.size(1);
  std::vector<std::vector<float>> out(static_cast<size_t>(rows));
  const float* data = t.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    out[static_cast<size_t>(r)].assign(data + r * cols, data + (r + 1) * cols);
  }
  return out;
}

/// The config.json at `path` of a model whose `model_type` is `type` (or `other_type`); else
/// throws "PATH: model_type "X" is not supported by the WHO (expected "TYPE")".
inline nlohmann::json read_model_config(const std::string& path, const char* who,
                                        const std::string& type,
                                        const std::string& other_type = {}) {
  auto cfg = read_json_file(path);
  auto model_type = cfg.value("model_type", std::string{});
  if (model_type != type && (other_type.empty() || model_type != other_type)) {
    throw std::runtime_error{path + ": model_type \"" + model_type + "\" is not supported by the "
                             + who + " (expected \"" + type + "\""
                             + (other_type.empty() ? "" : " or \"" + other_type + "\"") + ")"};
  }
  return cfg;
}

/// The integer `key` of `cfg` (read from `file`); `fallback` when absent or null.
inline int64_t config_int(const nlohmann::json& cfg, const std::string& file, const char* key,
                          std::optional<int64_t> fallback = std::nullopt) {
  auto found = cfg.find(key);
  if (found == cfg.end() || found->is_null()) {
    if (fallback) {
      return *fallback;
    }
    throw std::runtime_error{file + ": " + key + " is missing"};
  }
  if (!found->is_number_integer()) {
    throw std::runtime_error{file + ": " + key + " is not an integer"};
  }
  return found->get<int64_t>();
}

/// As config_int, and it must be positive.
inline int64_t config_positive(const nlohmann::json& cfg, const std::string& file,
                               const char* key, std::optional<int64_t> fallback = std::nullopt) {
  auto v = config_int(cfg, file, key, fallback);
  if (v <= 0) {
    throw std::runtime_error{file + ": " + key + " is not a positive integer"};
  }
  return v;
}

/// Where a model runs and in which dtype ("auto": f32 on CPU, bf16 on GPU).
struct placement {
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat32;
  /// "f32", "f16" or "bf16".
  std::string dtype_name;
};

/// Recent PyTorch (2.11 on the H100 we measured) tries cuDNN's attention first on Hopper and
/// Blackwell GPUs, and cuDNN builds an execution graph for each new shape. On an H100 our
/// decoder took 65 to 90 ms per step whenever the shapes were new and 8 ms when the same call
/// was repeated; with cuDNN attention off, 7 to 11 ms either way (bench/gpu/probe_generate.py).
/// A decoder's key length is new at every step of every call, and an encoder's batch shape
/// changes with its traffic. Flash and
/// memory-efficient attention, which SDPA tries next, take no such per-shape cost, and math
/// attention stays the last resort. The setting is process-wide, like TF32 below;
/// ARBITER_CUDNN_ATTENTION=1 keeps PyTorch's choice, to measure one against the other.
inline void use_no_cudnn_attention() {
  const char* keep = std::getenv("ARBITER_CUDNN_ATTENTION");
  if (keep == nullptr || std::string{keep} != "1") {
    allow_cudnn_attention(false);
  }
}

inline placement place(const model_options& options) {
  placement p;
  p.device = torch::Device{options.device};
  p.dtype_name = options.dtype == "auto" ? (p.device.is_cuda() ? "bf16" : "f32") : options.dtype;
  if (p.device.is_cuda()) {
    use_no_cudnn_attention();
  }
  if (p.device.is_cuda() && p.dtype_name == "f32") {
    // f32 on a GPU means f32: cuDNN's convolutions (DeBERTa-v2's conv layer) would otherwise
    // round through TF32, PyTorch's default, and miss the golden tests by 3e-4. (cuBLAS
    // matmuls already keep f32 by default.) The setting is process-wide, like the model.
    at::globalContext().setAllowTF32CuDNN(false);
  }
  if (p.dtype_name == "f32") {
    p.dtype = torch::kFloat32;
  } else if (p.dtype_name == "f16") {
    p.dtype = torch::kFloat16;
  } else if (p.dtype_name == "bf16") {
    p.dtype = torch::kBFloat16;
  } else {
    throw std::runtime_error{"dtype \"" + options.dtype + "\" is not one of auto, f32, f16, bf16"};
  }
  return p;
}

/// Fills what every model says about itself: where it came from, what it is and where it runs.
inline void describe(model_info& info, const std::string& folder, std::string architecture,
                     const placement& where, int64_t hidden, int64_t layers) {
  info.folder = folder;
  info.architecture = std::move(architecture);
  info.device = where.device.str();
  info.dtype = where.dtype_name;
  info.hidden = static_cast<uint32_t>(hidden);
  info.layers = static_cast<uint32_t>(layers);
}

/// "[a, b]".
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

/// The tensor `view` (named `name`; nullptr: missing from `ckpt`), checked to be F32, F16 or
/// BF16 of `shape`, copied to `where`; its bytes there are added to `bytes`. Errors name the
/// file and the tensor.
inline torch::Tensor load_tensor(const checkpoint& ckpt, const tensor_view* view,
                                 const std::string& name, const std::vector<int64_t>& shape,
                                 const placement& where, uint64_t& bytes) {
  if (view == nullptr) {
    throw std::runtime_error{ckpt.files().front() + ": tensor " + name + " is missing"};
  }
  torch::Dtype stored = torch::kFloat32;
  if (view->dtype == tensor_dtype::f16) {
    stored = torch::kFloat16;
  } else if (view->dtype == tensor_dtype::bf16) {
    stored = torch::kBFloat16;
  } else if (view->dtype != tensor_dtype::f32) {
    throw std::runtime_error{view->file + ": tensor " + name + " has dtype " + view->dtype_name
                             + "; expected F32, F16 or BF16"};
  }
  if (view->shape != shape) {
    throw std::runtime_error{view->file + ": tensor " + name + " has shape "
                             + shape_text(view->shape) + ", config.json implies "
                             + shape_text(shape)};
  }
  auto raw = torch::from_blob(const_cast<std::byte*>(view->data), view->shape,
                              torch::TensorOptions().dtype(stored));
  auto t = raw.to(where.device, where.dtype, /*non_blocking=*/false, /*copy=*/true);
  bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
  return t;
}

/// x·wᵀ + b over x's last dimension, as torch::linear, for the few-row products of decoding.
/// On the CPU, MKL's sgemm repacks the whole weight matrix on every call, which for a handful
/// of rows costs more than the product itself: four rows through a 151936×1024 LM head took
/// 4× as long as one. w·xᵀ streams the weights once instead (1.2–4× faster from 2 to 128
/// rows on the 2-core machine, f32); one row and large batches keep torch::linear.
inline torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& b = {}) {
  const int64_t width = x.size(-1);
  const int64_t rows = width == 0 ? 0 : x.numel() / width;
  if (!x.is_cpu() || rows < 2 || rows > 128) {
    return torch::linear(x, w, b);
  }
  auto out = torch::matmul(w, x.reshape({rows, width}).t()).t();
  if (b.defined()) {
    out = out + b;
  }
  auto shape = x.sizes().vec();
  shape.back() = w.size(0);
  return out.contiguous().view(shape);
}

/// The half of a BERT-family encoder layer after self-attention, as Hugging Face names it under
/// `l` ("encoder.layer.N."): the attention output projection and its LayerNorm, the
/// intermediate and output dense layers, and the last LayerNorm. BERT and DeBERTa share it.
/// `take(name, shape)` loads one tensor, checked against `shape`.
template <class Layer, class Take>
void take_bert_block(Layer& w, const std::string& l, int64_t hidden, int64_t inter, Take&& take) {
  w.wo = take(l + "attention.output.dense.weight", {hidden, hidden});
  w.bo = take(l + "attention.output.dense.bias", {hidden});
  w.ln1_w = take(l + "attention.output.LayerNorm.weight", {hidden});
  w.ln1_b = take(l + "attention.output.LayerNorm.bias", {hidden});
  w.wi = take(l + "intermediate.dense.weight", {inter, hidden});
  w.bi = take(l + "intermediate.dense.bias", {inter});
  w.w2 = take(l + "output.dense.weight", {hidden, inter});
  w.b2 = take(l + "output.dense.bias", {hidden});
  w.ln2_w = take(l + "output.LayerNorm.weight", {hidden});
  w.ln2_b = take(l + "output.LayerNorm.bias", {hidden});
}

} // namespace arbiter::backends::models
