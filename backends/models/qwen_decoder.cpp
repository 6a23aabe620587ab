#include "backends/models/qwen_decoder.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#ifdef ARBITER_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "backends/models/loading.hpp"
#include "backends/models/safetensors.hpp"

namespace arbiter::backends::models {

namespace {

using json = nlohmann::json;

/// One layer's weights, the projections that read the same input stacked into one matrix so
/// that each is one matrix multiply: `qkv` is [q; k; v] (and `qkv_bias` likewise), `gate_up`
/// is [gate; up]. `qk_norm` [heads + kv heads, head dim] is Qwen3's q_norm on each query head
/// and k_norm on each key head, so one normalization serves both.
struct layer_weights {
  torch::Tensor ln1, ln2, qkv, qkv_bias, qk_norm, wo, gate_up, down;
};

/// Keys and values of the positions seen so far, per layer: [batch, kv heads, capacity, head
/// dim], allocated once for the whole generation and filled `length` positions deep, so a
/// decoding step writes its one position instead of copying the cache.
struct kv_cache {
  int64_t capacity = 0;
  int64_t length = 0;
  /// Allocated as zeros: a fixed-shape step attends to positions not yet written, masked out
  /// but multiplied all the same, so they must be finite (0 × NaN is NaN).
  bool zeroed = false;
  std::vector<torch::Tensor> keys;
  std::vector<torch::Tensor> values;
};

} // namespace

struct qwen_decoder::impl {
  model_info info;
  placement where;
  bool qwen3 = false;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  double eps = 1e-6;
  double theta = 10000.0;
  torch::Tensor embed_tokens, norm, lm_head, inv_freq;
  std::vector<layer_weights> layers;
  /// model_options::decode_graphs.
  int decode_graphs = -1;
  /// Set when a capture failed: decoding goes on eagerly, here and in later calls.
  mutable std::atomic<bool> graphs_failed{false};
  mutable std::atomic<uint64_t> replayed{0};

  torch::Tensor take(const checkpoint& ckpt, const std::string& name, std::vector<int64_t> shape) {
    return load_tensor(ckpt, ckpt.find(name), name, shape, where, info.weight_bytes);
  }

  /// HF's Qwen RMSNorm: normalize in f32, cast back, scale by the weight (which broadcasts
  /// against the rows: [hidden], or [heads, head dim] for the q/k norm). at::rms_norm without a
  /// weight is that normalization in one kernel where libtorch has a fused one.
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w) const {
    return at::rms_norm(x, {x.size(-1)}, std::nullopt, eps) * w;
  }

  /// x [.., head dim] rotated by RoPE: x * cos + rotate_half(x) * sin, where rotate_half(x) =
  /// [-x2, x1] is written as roll(x) = [x2, x1] times `sin_signed` = [-sin, sin].
  static torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin_signed) {
    return torch::addcmul(x * cos, x.roll(x.size(-1) / 2, -1), sin_signed);
  }

  /// h + x W^T: one matrix multiply that adds into the residual on a GPU; the CPU keeps
  /// `project`'s faster path for a few rows.
  static torch::Tensor add_projected(const torch::Tensor& h, const torch::Tensor& x,
                                     const torch::Tensor& w) {
    if (h.is_cpu()) {
      return h + project(x, w);
    }
    return torch::addmm(h.reshape({-1, h.size(-1)}), x.reshape({-1, x.size(-1)}), w.t())
      .view(h.sizes());
  }

  /// An additive mask [B, 1, T, past + T] for `len` queries after `past` keys: causal, and
  /// the padding keys of `mask` [B, past + T] out. The lowest finite value rather than -inf
  /// keeps a padding query row (all keys masked) finite.
  torch::Tensor causal_bias(const torch::Tensor& mask, int64_t batch, int64_t len,
                            int64_t past) const {
    const int64_t total = past + len;
    auto opts = torch::TensorOptions().dtype(torch::kInt64).device(where.device);
    auto key_pos = torch::arange(total, opts).view({1, total});
    auto query_pos = (torch::arange(len, opts) + past).view({len, 1});
    auto allowed = (key_pos <= query_pos).unsqueeze(0) & mask.to(torch::kBool).unsqueeze(1);
    return torch::zeros({batch, len, total},
                        torch::TensorOptions().dtype(where.dtype).device(where.device))
      .masked_fill(allowed.logical_not(), masked_out())
      .unsqueeze(1);
  }

  /// The additive bias of a masked key.
  double masked_out() const {
    return where.dtype == torch::kFloat32
             ? static_cast<double>(std::numeric_limits<float>::lowest())
             : -1e4;
  }

  /// Runs `ids` [B, T] at `positions` [B, T]; `mask` [B, past + T] marks real tokens, and
  /// `padded` says whether any is 0. Appends the new keys and values to `cache` (when given)
  /// and returns the final-norm hidden states.
  ///
  /// With `slot` (a one-element device tensor) it is instead a fixed-shape decoding step, as a
  /// CUDA graph must be: T is 1, the keys and values go to the cache position `slot` holds,
  /// and attention reads the whole cache under `step_bias` [B, 1, 1, capacity].
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& positions,
                        const torch::Tensor& mask, bool padded, kv_cache* cache,
                        const torch::Tensor& step_bias = {},
                        const torch::Tensor& slot = {}) const {
    const bool fixed = slot.defined();
    const int64_t batch = ids.size(0);
    const int64_t len = ids.size(1);
    const int64_t past = cache != nullptr ? cache->length : 0;
    if (cache != nullptr && past + len > cache->capacity) {
      throw std::logic_error{"qwen_decoder: the key/value cache is full"};
    }
    const int64_t total = past + len;
    auto h = torch::embedding(embed_tokens, ids);
    // RoPE tables for these positions: [B, T, 1, d], broadcast over the heads.
    auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;
    auto half_sin = freqs.sin();
    auto cos = torch::cat({freqs, freqs}, -1).cos().to(where.dtype).unsqueeze(2);
    auto sin_signed = torch::cat({-half_sin, half_sin}, -1).to(where.dtype).unsqueeze(2);
    // Without padding, a whole prompt (causal) or one decoding step (every key) needs no mask,
    // and SDPA can take its fused kernels (flash attention on a GPU): a decoding step is then
    // one kernel per layer, not the masked path's several and its copies of the keys.
    const bool unmasked = !fixed && !padded && (past == 0 || len == 1);
    const auto bias = fixed      ? step_bias
                      : unmasked ? torch::Tensor{}
                                 : causal_bias(mask, batch, len, past);
    // A decoding step is a few hundred small kernels, so each layer keeps its count low: one
    // multiply for q, k and v, one normalization and one rotation for q and k together.
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& w = layers[l];
      auto qkv = project(rms_norm(h, w.ln1), w.qkv, w.qkv_bias)
                   .view({batch, len, heads + 2 * kv_heads, head_dim});
      auto qk = qkv.narrow(2, 0, heads + kv_heads);
      if (qwen3) {
        qk = rms_norm(qk, w.qk_norm);
      }
      qk = rotate(qk, cos, sin_signed);
      auto q = qk.narrow(2, 0, heads).transpose(1, 2);
      auto k = qk.narrow(2, heads, kv_heads).transpose(1, 2);
      auto v = qkv.narrow(2, heads + kv_heads, kv_heads).transpose(1, 2);
      if (cache != nullptr) {
        if (cache->keys.size() <= l) {
          const std::vector<int64_t> shape{batch, kv_heads, cache->capacity, head_dim};
          auto make = [&](const torch::Tensor& like) {
            return cache->zeroed ? torch::zeros(shape, like.options())
                                 : torch::empty(shape, like.options());
          };
          cache->keys.push_back(make(k));
          cache->values.push_back(make(v));
        }
        if (fixed) {
          cache->keys[l].index_copy_(2, slot, k);
          cache->values[l].index_copy_(2, slot, v);
          k = cache->keys[l];
          v = cache->values[l];
        } else {
          cache->keys[l].narrow(2, past, len).copy_(k);
          cache->values[l].narrow(2, past, len).copy_(v);
          k = cache->keys[l].narrow(2, 0, total);
          v = cache->values[l].narrow(2, 0, total);
        }
      }
      // Grouped-query attention in SDPA itself: the key/value heads are not copied per group.
      auto a = (unmasked ? at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0,
                                                            /*is_causal=*/len > 1, std::nullopt,
                                                            /*enable_gqa=*/kv_heads != heads)
                         : at::scaled_dot_product_attention(q, k, v, bias, 0.0, false,
                                                            std::nullopt,
                                                            /*enable_gqa=*/kv_heads != heads))
                 .transpose(1, 2)
                 .reshape({batch, len, heads * head_dim});
      h = add_projected(h, a, w.wo);
      auto gate_up = project(rms_norm(h, w.ln2), w.gate_up);
      const int64_t inter = gate_up.size(-1) / 2;
      auto act = torch::silu(gate_up.narrow(-1, 0, inter)) * gate_up.narrow(-1, inter, inter);
      h = add_projected(h, act, w.down);
    }
    if (cache != nullptr) {
      cache->length = total;
    }
    return rms_norm(h, norm);
  }

  /// The decoding steps of one `generate` call in fixed shapes (forward's `slot` mode), so that
  /// on a GPU a step is captured once as a CUDA graph and then replayed: one launch where an
  /// eager step is a few hundred kernels, each launched by the CPU, which bounded decoding one
  /// call at a time (bench/README.md). The first step runs eagerly on the call's stream (it
  /// warms up cuBLAS's workspace there, as a capture needs), the second is captured and
  /// replayed, the rest replayed. Without CUDA, or once a capture failed, every step runs
  /// eagerly: the same arithmetic.
  class fixed_step {
  public:
    /// `mask` [B, prompt]: the real prompt tokens of each row, already in `cache`.
    fixed_step(const impl& model, kv_cache& cache, const torch::Tensor& mask, bool capture)
      : model_(model), cache_(cache), capture_(capture) {
      const int64_t batch = mask.size(0);
      auto longs = torch::TensorOptions().dtype(torch::kInt64).device(model.where.device);
      ids_ = torch::zeros({batch, 1}, longs);
      positions_ = torch::zeros({batch, 1}, longs);
      slot_ = torch::zeros({1}, longs);
      // Every key out but the prompt's real tokens; each step lets in the one it writes.
      bias_ = torch::full({batch, 1, 1, cache.capacity}, model.masked_out(),
                          torch::TensorOptions().dtype(model.where.dtype)
                            .device(model.where.device));
      bias_.narrow(3, 0, mask.size(1))
        .masked_fill_(mask.to(torch::kBool).view({batch, 1, 1, mask.size(1)}), 0.0);
    }

    /// The final-norm hidden states [B, 1, hidden] after `next` [B, 1] at `next_pos` [B, 1].
    /// The tensor returned is overwritten by the next step.
    torch::Tensor run(const torch::Tensor& next, const torch::Tensor& next_pos) {
      const int64_t at = cache_.length;
      ids_.copy_(next);
      positions_.copy_(next_pos);
      slot_.fill_(at);
      bias_.select(3, at).fill_(0.0);
#ifdef ARBITER_TORCH_CUDA
      if (capture_ && eager_steps_ > 0 && !model_.graphs_failed.load()) {
        if (!graph_) {
          capture(at);
        }
        if (graph_) {
          graph_->replay();
          cache_.length = at + 1;
          model_.replayed.fetch_add(1, std::memory_order_relaxed);
          return out_;
        }
      }
#endif
      ++eager_steps_;
      out_ = model_.forward(ids_, positions_, {}, true, &cache_, bias_, slot_);
      return out_;
    }

  private:
#ifdef ARBITER_TORCH_CUDA
    /// Records the step at `at` into graph_ (nothing runs yet); on failure leaves graph_ empty
    /// and turns graphs off for the model.
    void capture(int64_t at) {
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      try {
        // Thread-local: another model working on this GPU from its own thread meanwhile
        // neither breaks the capture nor is refused.
        graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        try {
          out_ = model_.forward(ids_, positions_, {}, true, &cache_, bias_, slot_);
        } catch (...) {
          graph->capture_end();
          throw;
        }
        graph->capture_end();
        graph_ = std::move(graph);
      } catch (const std::exception&) {
        model_.graphs_failed.store(true);
        cache_.length = at;
      }
    }

    std::unique_ptr<at::cuda::CUDAGraph> graph_;
#endif
    const impl& model_;
    kv_cache& cache_;
    bool capture_;
    int eager_steps_ = 0;
    torch::Tensor ids_, positions_, slot_, bias_, out_;
  };

  /// Left-pads `seqs` into ids, mask and positions (padding at position 0, tokens from 0);
  /// true when any is shorter than the longest.
  bool pad(const std::vector<std::vector<int64_t>>& seqs, torch::Tensor& ids,
           torch::Tensor& mask, torch::Tensor& positions) const {
    int64_t len = 0;
    bool padded = false;
    for (const auto& s : seqs) {
      padded = padded || (len != 0 && static_cast<int64_t>(s.size()) != len);
      len = std::max<int64_t>(len, static_cast<int64_t>(s.size()));
    }
    const auto batch = static_cast<int64_t>(seqs.size());
    auto ids_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto mask_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto pos_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto ia = ids_cpu.accessor<int64_t, 2>();
    auto ma = mask_cpu.accessor<int64_t, 2>();
    auto pa = pos_cpu.accessor<int64_t, 2>();
    for (int64_t b = 0; b < batch; ++b) {
      const auto& s = seqs[static_cast<size_t>(b)];
      const int64_t offset = len - static_cast<int64_t>(s.size());
      for (size_t t = 0; t < s.size(); ++t) {
        ia[b][offset + static_cast<int64_t>(t)] = s[t];
        ma[b][offset + static_cast<int64_t>(t)] = 1;
        pa[b][offset + static_cast<int64_t>(t)] = static_cast<int64_t>(t);
      }
    }
    ids = ids_cpu.to(where.device);
    mask = mask_cpu.to(where.device);
    positions = pos_cpu.to(where.device);
    return padded;
  }

  void check(const std::vector<std::vector<int64_t>>& seqs) const {
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].empty()) {
        throw std::invalid_argument{"input " + std::to_string(i) + " is empty"};
      }
      for (auto id : seqs[i]) {
        if (id < 0 || id >= vocab) {
          throw std::invalid_argument{"input " + std::to_string(i) + " holds token id "
                                      + std::to_string(id) + " outside the vocabulary"};
        }
      }
    }
  }

  void need_lm_head() const {
    if (!lm_head.defined()) {
      throw std::invalid_argument{info.folder
                                  + ": no lm_head (an embedding checkpoint); cannot generate"};
    }
  }
};

qwen_decoder::qwen_decoder(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

qwen_decoder::~qwen_decoder() = default;

const model_info& qwen_decoder::info() const noexcept {
  return impl_->info;
}

int64_t qwen_decoder::vocab_size() const noexcept {
  return impl_->vocab;
}

uint64_t qwen_decoder::replayed_steps() const noexcept {
  return impl_->replayed.load(std::memory_order_relaxed);
}

std::unique_ptr<qwen_decoder> qwen_decoder::load(const std::string& folder,
                                                 const model_options& options) {
  auto p = std::make_unique<impl>();
  const std::string path = folder + "/config.json";
  auto cfg = read_model_config(path, "Qwen decoder", "qwen2", "qwen3");
  const auto model_type = cfg.at("model_type").get<std::string>();
  p->qwen3 = model_type == "qwen3";
  if (auto act = cfg.value("hidden_act", std::string{"silu"}); act != "silu") {
    throw std::runtime_error{path + ": hidden_act \"" + act + "\" is not supported"};
  }
  const int64_t hidden = config_positive(cfg, path, "hidden_size");
  const int64_t n_layers = config_positive(cfg, path, "num_hidden_layers");
  p->heads = config_positive(cfg, path, "num_attention_heads");
  p->kv_heads = config_positive(cfg, path, "num_key_value_heads", p->heads);
  p->head_dim = config_positive(cfg, path, "head_dim", hidden / p->heads);
  const int64_t inter = config_positive(cfg, path, "intermediate_size");
  p->vocab = config_positive(cfg, path, "vocab_size");
  if (p->heads % p->kv_heads != 0) {
    throw std::runtime_error{path + ": num_attention_heads is not a multiple of "
                                    "num_key_value_heads"};
  }
  if (auto eps = cfg.find("rms_norm_eps"); eps != cfg.end() && eps->is_number()) {
    p->eps = eps->get<double>();
  }
  if (auto theta = cfg.find("rope_theta"); theta != cfg.end() && theta->is_number()) {
    p->theta = theta->get<double>();
  } else if (auto params = cfg.find("rope_parameters");
             params != cfg.end() && params->is_object() && params->contains("rope_theta")) {
    p->theta = (*params)["rope_theta"].get<double>();
    if (auto type = params->value("rope_type", std::string{"default"}); type != "default") {
      throw std::runtime_error{path + ": rope_parameters.rope_type \"" + type
                               + "\" is not supported"};
    }
  }
  if (auto scaling = cfg.find("rope_scaling"); scaling != cfg.end() && !scaling->is_null()) {
    throw std::runtime_error{path + ": rope_scaling is not supported"};
  }
  const bool qkv_bias = p->qwen3 ? cfg.value("attention_bias", false) : true;
  const bool tied = cfg.value("tie_word_embeddings", false);

  p->where = place(options);
  p->decode_graphs = options.decode_graphs;
  describe(p->info, folder, model_type, p->where, hidden, n_layers);
  p->info.pooling = "last";
  p->info.max_tokens =
    static_cast<uint32_t>(config_positive(cfg, path, "max_position_embeddings", 32768));

  torch::NoGradGuard no_grad;
  auto ckpt = checkpoint::open(folder);
  // Causal LMs are saved with "model." before the decoder's names; Qwen3-Embedding without.
  const std::string prefix = ckpt.find("model.embed_tokens.weight") != nullptr ? "model." : "";
  const int64_t q_out = p->heads * p->head_dim;
  const int64_t kv_out = p->kv_heads * p->head_dim;
  p->embed_tokens = p->take(ckpt, prefix + "embed_tokens.weight", {p->vocab, hidden});
  p->norm = p->take(ckpt, prefix + "norm.weight", {hidden});
  if (ckpt.find("lm_head.weight") != nullptr) {
    p->lm_head = p->take(ckpt, "lm_head.weight", {p->vocab, hidden});
  } else if (tied || !prefix.empty()) {
    p->lm_head = p->embed_tokens;
  }
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = prefix + "layers." + std::to_string(i) + ".";
    layer_weights w;
    w.ln1 = p->take(ckpt, l + "input_layernorm.weight", {hidden});
    w.ln2 = p->take(ckpt, l + "post_attention_layernorm.weight", {hidden});
    w.qkv = torch::cat({p->take(ckpt, l + "self_attn.q_proj.weight", {q_out, hidden}),
                        p->take(ckpt, l + "self_attn.k_proj.weight", {kv_out, hidden}),
                        p->take(ckpt, l + "self_attn.v_proj.weight", {kv_out, hidden})});
    w.wo = p->take(ckpt, l + "self_attn.o_proj.weight", {hidden, q_out});
    if (qkv_bias) {
      w.qkv_bias = torch::cat({p->take(ckpt, l + "self_attn.q_proj.bias", {q_out}),
                               p->take(ckpt, l + "self_attn.k_proj.bias", {kv_out}),
                               p->take(ckpt, l + "self_attn.v_proj.bias", {kv_out})});
    }
    if (p->qwen3) {
      auto q_norm = p->take(ckpt, l + "self_attn.q_norm.weight", {p->head_dim});
      auto k_norm = p->take(ckpt, l + "self_attn.k_norm.weight", {p->head_dim});
      w.qk_norm = torch::cat({q_norm.expand({p->heads, p->head_dim}),
                              k_norm.expand({p->kv_heads, p->head_dim})});
    }
    w.gate_up = torch::cat({p->take(ckpt, l + "mlp.gate_proj.weight", {inter, hidden}),
                            p->take(ckpt, l + "mlp.up_proj.weight", {inter, hidden})});
    w.down = p->take(ckpt, l + "mlp.down_proj.weight", {hidden, inter});
    p->layers.push_back(std::move(w));
  }
  auto steps = torch::arange(0, p->head_dim, 2, torch::TensorOptions().dtype(torch::kFloat64));
  p->inv_freq = (1.0 / torch::pow(p->theta, steps / static_cast<double>(p->head_dim)))
                  .to(torch::kFloat32)
                  .to(p->where.device);
  return std::unique_ptr<qwen_decoder>{new qwen_decoder{std::move(p)}};
}

std::vector<std::vector<float>> qwen_decoder::logits(const std::vector<int64_t>& ids) const {
  impl_->check({ids});
  impl_->need_lm_head();
  c10::InferenceMode inference;
  torch::Tensor t;
  torch::Tensor mask;
  torch::Tensor positions;
  const bool padded = impl_->pad({ids}, t, mask, positions);
  auto hidden = impl_->forward(t, positions, mask, padded, nullptr);
  return rows_of(project(hidden, impl_->lm_head)[0]);
}

std::vector<std::vector<float>> qwen_decoder::embed(
  const std::vector<std::vector<int64_t>>& ids) const {
  if (ids.empty()) {
    return {};
  }
  impl_->check(ids);
  c10::InferenceMode inference;
  torch::Tensor t;
  torch::Tensor mask;
  torch::Tensor positions;
  const bool padded = impl_->pad(ids, t, mask, positions);
  auto last = impl_->forward(t, positions, mask, padded, nullptr).select(1, -1).to(torch::kFloat32);
  return rows_of(torch::nn::functional::normalize(
      last, torch::nn::functional::NormalizeFuncOptions().p(2).dim(1).eps(1e-12)));
}

std::vector<generation> qwen_decoder::generate(const std::vector<std::vector<int64_t>>& prompts,
                                               const sampling_options& options,
                                               uint32_t n) const {
  std::vector<generation_request> requests;
  for (const auto& prompt : prompts) {
    requests.push_back({prompt, options, n});
  }
  std::vector<generation> out;
  for (auto& gens : generate(requests)) {
    for (auto& g : gens) {
      out.push_back(std::move(g));
    }
  }
  return out;
}

namespace {

/// Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS).
constexpr double greedy_below_temperature = 1e-5;

/// Fewer new tokens than this decode eagerly: a capture and its warm-up step cost about what
/// the steps it would save do.
constexpr uint32_t graph_from_new_tokens = 4;

/// Eager decoding drops the rows that have ended once they are this fraction of the batch
/// (1 / drop_rows_at_fraction): dropping copies the key/value cache of the rows kept, which a
/// quarter of the rows' steps pays back.
constexpr int64_t drop_rows_at_fraction = 4;

/// The next token of each of a request's rows, picked as its options say.
torch::Tensor pick_tokens(const torch::Tensor& logits, const sampling_options& options,
                          at::Generator& gen) {
  if (options.temperature < greedy_below_temperature) {
    // Dividing by a temperature this small overflows the logits (NaN after softmax).
    return logits.argmax(-1);
  }
  auto scaled = logits / options.temperature;
  if (options.top_k > 0 && options.top_k < logits.size(-1)) {
    auto kth = std::get<0>(scaled.topk(options.top_k, -1)).select(1, -1).unsqueeze(1);
    scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
  }
  if (options.top_p < 1.0) {
    auto sorted = scaled.sort(-1, /*descending=*/true);
    auto probs = torch::softmax(std::get<0>(sorted), -1);
    // Keep the smallest prefix whose mass reaches top_p (the first token always).
    auto before = probs.cumsum(-1) - probs;
    auto drop_sorted = before >= options.top_p;
    drop_sorted.select(1, 0).fill_(false);  // top_p = 0 keeps it too
    auto drop = torch::zeros_like(drop_sorted).scatter(1, std::get<1>(sorted), drop_sorted);
    scaled = scaled.masked_fill(drop, -std::numeric_limits<float>::infinity());
  }
  return torch::multinomial(torch::softmax(scaled, -1), 1, false, gen).squeeze(1);
}

} // namespace

std::vector<std::vector<generation>> qwen_decoder::generate(
  const std::vector<generation_request>& requests) const {
  std::vector<std::vector<generation>> out(requests.size());
  // Rows [first[r], first[r] + n) belong to request r.
  std::vector<std::vector<int64_t>> seqs;
  std::vector<int64_t> first;
  std::vector<size_t> owner;
  uint32_t longest = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    first.push_back(static_cast<int64_t>(seqs.size()));
    out[r].resize(requests[r].n);
    for (uint32_t k = 0; k < requests[r].n; ++k) {
      seqs.push_back(requests[r].prompt);
      owner.push_back(r);
    }
    if (requests[r].n > 0) {
      longest = std::max(longest, requests[r].options.max_new_tokens);
    }
  }
  if (seqs.empty()) {
    return out;
  }
  if (longest == 0) {
    for (auto& gens_of : out) {
      for (auto& g : gens_of) {
        g.finish_reason = "length";
      }
    }
    return out;
  }
  impl_->check(seqs);
  impl_->need_lm_head();
  const bool gpu = impl_->where.device.is_cuda();
  const bool fixed_steps =
    longest >= graph_from_new_tokens
    && (impl_->decode_graphs == 1
        || (impl_->decode_graphs == -1 && gpu && !impl_->graphs_failed.load()));
#ifdef ARBITER_TORCH_CUDA
  // A capture needs a stream other than the default one: the whole call runs on one of the
  // pool's, so that its steps stay in order with the prefill.
  std::optional<c10::cuda::CUDAStreamGuard> own_stream;
  if (fixed_steps && gpu) {
    own_stream.emplace(c10::cuda::getStreamFromPool(false, impl_->where.device.index()));
  }
#endif
  c10::InferenceMode inference;
  const auto batch = static_cast<int64_t>(seqs.size());
  // Each prompt is read once, however many samples its request asks for: the prefill runs one
  // row per request, and its keys, values and last hidden state are then copied to the
  // request's n rows (ΔIG asks N samples of each prompt).
  std::vector<std::vector<int64_t>> prompts;
  std::vector<int64_t> row_prompt;
  for (const auto& req : requests) {
    if (req.n > 0) {
      prompts.push_back(req.prompt);
      row_prompt.insert(row_prompt.end(), req.n, static_cast<int64_t>(prompts.size() - 1));
    }
  }
  torch::Tensor ids;
  torch::Tensor mask;
  torch::Tensor positions;
  const bool padded = impl_->pad(prompts, ids, mask, positions);
  kv_cache cache;
  cache.capacity = ids.size(1) + longest;
  cache.zeroed = fixed_steps;
  std::vector<bool> done(seqs.size(), false);
  std::vector<at::Generator> gens;
  for (const auto& req : requests) {
    gens.push_back(at::detail::createCPUGenerator(req.options.seed));
  }
  auto hidden = impl_->forward(ids, positions, mask, padded, &cache);
  if (static_cast<int64_t>(prompts.size()) != batch) {
    auto rows = torch::tensor(row_prompt, torch::kLong).to(impl_->where.device);
    for (auto* layer : {&cache.keys, &cache.values}) {
      for (auto& t : *layer) {
        t = t.index_select(0, rows);
      }
    }
    hidden = hidden.index_select(0, rows);
    mask = mask.index_select(0, rows);
    positions = positions.index_select(0, rows);
  }
  auto next_pos = positions.select(1, -1).unsqueeze(1) + 1;
  std::optional<impl::fixed_step> stepper;
  if (fixed_steps) {
    stepper.emplace(*impl_, cache, mask, gpu);
  }
  // All greedy (judges, ΔIG's reference answers): pick and score on the model's device and
  // bring back two numbers a row, not the vocabulary-wide logits.
  const bool greedy = std::all_of(requests.begin(), requests.end(), [](const auto& req) {
    return req.n == 0 || req.options.temperature <= 0.0;
  });
  // The rows still in the batch, as indices into seqs: all of them, until eager decoding drops
  // the rows that have ended (a fixed-shape step keeps every row).
  std::vector<int64_t> rows_now(seqs.size());
  std::iota(rows_now.begin(), rows_now.end(), int64_t{0});
  for (uint32_t step = 0; step < longest; ++step) {
    const auto cur = static_cast<int64_t>(rows_now.size());
    auto logits = project(hidden.select(1, -1), impl_->lm_head).to(torch::kFloat32);
    torch::Tensor chosen;
    torch::Tensor lp;
    if (greedy) {
      auto picked = logits.argmax(-1);
      auto scored = torch::log_softmax(logits, -1).gather(1, picked.unsqueeze(1)).squeeze(1);
      // Token ids are exact in a double.
      auto both = torch::stack({picked.to(torch::kFloat64), scored.to(torch::kFloat64)})
                    .to(torch::kCPU);
      chosen = both[0].to(torch::kLong);
      lp = both[1].to(torch::kFloat32);
    } else {
      logits = logits.to(torch::kCPU);
      // Each request picks for all its rows, ended or dropped or not, so that its draws depend
      // on it alone (torch's sampler draws one number per logit, whatever the logit): a
      // dropped row's place holds zeros, an ended one's its logits; both picks are ignored.
      auto all_rows = logits;
      torch::Tensor now;
      if (cur != batch) {
        now = torch::tensor(rows_now, torch::kLong);
        all_rows = torch::zeros({batch, logits.size(1)}, logits.options());
        all_rows.index_copy_(0, now, logits);
      }
      chosen = torch::zeros({batch}, torch::kLong);
      for (size_t r = 0; r < requests.size(); ++r) {
        const auto n = static_cast<int64_t>(requests[r].n);
        if (n == 0 || step >= requests[r].options.max_new_tokens) {
          continue;
        }
        chosen.narrow(0, first[r], n)
          .copy_(pick_tokens(all_rows.narrow(0, first[r], n), requests[r].options, gens[r]));
      }
      if (cur != batch) {
        chosen = chosen.index_select(0, now);
      }
      lp = torch::log_softmax(logits, -1).gather(1, chosen.unsqueeze(1)).squeeze(1);
    }
    auto chosen_a = chosen.accessor<int64_t, 1>();
    auto lp_a = lp.accessor<float, 1>();
    bool all_done = true;
    int64_t ended = 0;
    for (int64_t i = 0; i < cur; ++i) {
      const auto b = rows_now[static_cast<size_t>(i)];
      const auto row = static_cast<size_t>(b);
      if (done[row]) {
        ++ended;
        continue;
      }
      const auto r = owner[row];
      const auto& options = requests[r].options;
      auto& g = out[r][static_cast<size_t>(b - first[r])];
      g.tokens.push_back(chosen_a[i]);
      g.logprobs.push_back(lp_a[i]);
      if (std::find(options.stop_ids.begin(), options.stop_ids.end(), chosen_a[i])
            != options.stop_ids.end()
          || (options.stop_when && options.stop_when(g.tokens))) {
        g.finish_reason = "stop";
        done[row] = true;
        ++ended;
      } else if (step + 1 >= options.max_new_tokens) {
        g.finish_reason = "length";
        done[row] = true;
        ++ended;
      } else {
        all_done = false;
      }
    }
    if (all_done || step + 1 == longest) {
      break;
    }
    auto next = chosen.view({cur, 1}).to(impl_->where.device);
    if (stepper) {
      hidden = stepper->run(next, next_pos);
    } else {
      if (ended * drop_rows_at_fraction >= cur) {
        // Enough rows have ended to pay for copying the cache without them: each later step
        // then costs what the rows still decoding do (ΔIG's samples end at different points,
        // most at their stop string well before max_new_tokens).
        std::vector<int64_t> keep;
        std::vector<int64_t> kept_rows;
        for (int64_t i = 0; i < cur; ++i) {
          if (!done[static_cast<size_t>(rows_now[static_cast<size_t>(i)])]) {
            keep.push_back(i);
            kept_rows.push_back(rows_now[static_cast<size_t>(i)]);
          }
        }
        auto kept = torch::tensor(keep, torch::kLong).to(impl_->where.device);
        for (auto* layer : {&cache.keys, &cache.values}) {
          for (auto& t : *layer) {
            t = t.index_select(0, kept);
          }
        }
        mask = mask.index_select(0, kept);
        next_pos = next_pos.index_select(0, kept);
        next = next.index_select(0, kept);
        rows_now = std::move(kept_rows);
      }
      mask = torch::cat({mask, torch::ones({mask.size(0), 1}, mask.options())}, 1);
      hidden = impl_->forward(next, next_pos, mask, padded, &cache);
    }
    next_pos = next_pos + 1;
  }
  for (auto& gens_of : out) {
    for (auto& g : gens_of) {
      if (g.finish_reason.empty()) {
        g.finish_reason = "length";
      }
    }
  }
  return out;
}

} // namespace arbiter::backends::models
