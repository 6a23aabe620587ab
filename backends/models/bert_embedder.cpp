#include "backends/models/bert_embedder.hpp"

#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/models/devices.hpp"
#include "backends/models/loading.hpp"
#include "backends/models/passes.hpp"
#include "backends/models/safetensors.hpp"

namespace arbiter::backends::models {

namespace {

using json = nlohmann::json;

/// One BERT layer's weights; the query, key and value projections as one [3H, H] matrix, so
/// that one GEMM computes all three.
struct layer_weights {
  torch::Tensor wqkv, bqkv, wo, bo, ln1_w, ln1_b, wi, bi, w2, b2, ln2_w, ln2_b;
};

} // namespace

struct bert_embedder::impl {
  model_info info;
  placement where;
  int64_t heads = 0;
  double eps = 1e-12;
  bool tanh_gelu = false;
  bool cls_pooling = false;
  /// plan_passes' cost of one more attention call (model_options::pass_overhead_tokens).
  size_t overhead = 0;
  torch::Tensor word, position, token_type, emb_ln_w, emb_ln_b;
  std::vector<layer_weights> layers;

  /// The tensor `name` under the checkpoint's prefix (old checkpoints name LayerNorm weights
  /// gamma and beta), checked against `shape` and placed.
  torch::Tensor take(const checkpoint& ckpt, const std::string& prefix, const std::string& name,
                     std::vector<int64_t> shape) {
    std::string full = prefix + name;
    const tensor_view* view = ckpt.find(full);
    auto ends_with = [&name](const std::string& tail) {
      return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (view == nullptr && name.find("LayerNorm") != std::string::npos) {
      if (ends_with("weight")) {
        view = ckpt.find(prefix + name.substr(0, name.size() - 6) + "gamma");
      } else if (ends_with("bias")) {
        view = ckpt.find(prefix + name.substr(0, name.size() - 4) + "beta");
      }
    }
    return load_tensor(ckpt, view, full, shape, where, info.weight_bytes);
  }

  torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& w,
                           const torch::Tensor& b) const {
    return torch::layer_norm(x, {x.size(-1)}, w, b, eps);
  }

  /// Consecutive inputs (shortest first) whose attention runs as one call, padded to the
  /// longest of them with the padding masked. When all have one length (always on the CPU,
  /// where padding costs more than a call) there is neither padding nor mask.
  struct attention_group {
    int64_t first_row = 0; ///< in the packed [tokens, hidden] layout
    int64_t rows = 0;      ///< real tokens
    int64_t inputs = 0;
    int64_t length = 0;    ///< the longest input's
    torch::Tensor slots;   ///< [rows]: each token's row in the padded [inputs * length] block
    torch::Tensor mask;    ///< [inputs, 1, 1, length], true on real keys
  };

  /// Cuts the inputs of `lengths` (shortest first) into attention groups.
  std::vector<attention_group> group_inputs(const std::vector<size_t>& lengths) const {
    std::vector<forward_pass> passes;
    if (overhead == 0) {
      // Runs of equal length: no padding at all.
      for (size_t i = 0; i < lengths.size(); ++i) {
        if (passes.empty() || passes.back().padded_length != lengths[i]) {
          passes.push_back({{}, lengths[i]});
        }
        passes.back().inputs.push_back(i);
      }
    } else {
      passes = plan_passes(lengths, std::numeric_limits<uint32_t>::max(), overhead);
    }
    std::vector<attention_group> groups;
    int64_t row = 0;
    for (const auto& pass : passes) {
      attention_group g;
      g.first_row = row;
      g.inputs = static_cast<int64_t>(pass.inputs.size());
      g.length = static_cast<int64_t>(pass.padded_length);
      for (auto i : pass.inputs) {
        g.rows += static_cast<int64_t>(lengths[i]);
      }
      row += g.rows;
      if (g.rows != g.inputs * g.length) {
        auto slots = torch::empty({g.rows}, torch::kInt64);
        auto mask = torch::zeros({g.inputs, 1, 1, g.length}, torch::kBool);
        auto* slot = slots.data_ptr<int64_t>();
        auto* real = mask.data_ptr<bool>();
        int64_t at = 0;
        for (int64_t k = 0; k < g.inputs; ++k) {
          const auto length = static_cast<int64_t>(lengths[pass.inputs[static_cast<size_t>(k)]]);
          for (int64_t t = 0; t < length; ++t) {
            slot[at++] = k * g.length + t;
            real[k * g.length + t] = true;
          }
        }
        g.slots = slots.to(where.device);
        g.mask = mask.to(where.device);
      }
      groups.push_back(std::move(g));
    }
    return groups;
  }

  /// Self-attention of one group's rows of `qkv` [tokens, 3H] into the same rows of `ctx`.
  void attend(const attention_group& g, const torch::Tensor& qkv, torch::Tensor& ctx) const {
    const int64_t hidden = ctx.size(-1);
    const int64_t d = hidden / heads;
    auto part = qkv.narrow(0, g.first_row, g.rows);
    if (!g.slots.defined()) {
      auto block = part.view({g.inputs, g.length, 3, heads, d}).permute({2, 0, 3, 1, 4});
      auto a = at::scaled_dot_product_attention(block[0], block[1], block[2]);
      ctx.narrow(0, g.first_row, g.rows).copy_(a.transpose(1, 2).reshape({g.rows, hidden}));
      return;
    }
    auto padded = torch::zeros({g.inputs * g.length, 3 * hidden}, qkv.options());
    padded.index_copy_(0, g.slots, part);
    auto block = padded.view({g.inputs, g.length, 3, heads, d}).permute({2, 0, 3, 1, 4});
    auto a = at::scaled_dot_product_attention(block[0], block[1], block[2], g.mask);
    ctx.narrow(0, g.first_row, g.rows)
      .copy_(a.transpose(1, 2).reshape({g.inputs * g.length, hidden}).index_select(0, g.slots));
  }

  /// The vectors of `ids`: the inputs are laid out shortest first as one packed
  /// [tokens, hidden] matrix, which every linear layer takes at once, unpadded; attention runs
  /// per group of inputs (group_inputs), and pooling over each input's own rows.
  torch::Tensor forward(const std::vector<std::vector<int64_t>>& ids) const {
    std::vector<size_t> order(ids.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
    std::vector<size_t> lengths;
    lengths.reserve(ids.size());
    int64_t total = 0;
    for (auto i : order) {
      lengths.push_back(ids[i].size());
      total += static_cast<int64_t>(ids[i].size());
    }
    const auto n = static_cast<int64_t>(ids.size());
    auto tokens_cpu = torch::empty({total}, torch::kInt64);
    auto positions_cpu = torch::empty({total}, torch::kInt64);
    // Each packed row's input (in sorted order), for pooling; each input's first row, for CLS.
    auto owner_cpu = torch::empty({total}, torch::kInt64);
    auto first_cpu = torch::empty({n}, torch::kInt64);
    auto counts_cpu = torch::empty({n, 1}, torch::kFloat32);
    auto* tok = tokens_cpu.data_ptr<int64_t>();
    auto* pos = positions_cpu.data_ptr<int64_t>();
    auto* own = owner_cpu.data_ptr<int64_t>();
    int64_t at = 0;
    for (int64_t k = 0; k < n; ++k) {
      const auto& input = ids[order[static_cast<size_t>(k)]];
      first_cpu.data_ptr<int64_t>()[k] = at;
      counts_cpu.data_ptr<float>()[k] = static_cast<float>(input.size());
      for (size_t t = 0; t < input.size(); ++t, ++at) {
        tok[at] = input[t];
        pos[at] = static_cast<int64_t>(t);
        own[at] = k;
      }
    }
    const auto groups = group_inputs(lengths);
    auto x = torch::embedding(word, tokens_cpu.to(where.device))
             + torch::embedding(position, positions_cpu.to(where.device)) + token_type[0];
    x = layer_norm(x, emb_ln_w, emb_ln_b);
    const int64_t hidden = x.size(-1);
    for (const auto& l : layers) {
      auto qkv = torch::linear(x, l.wqkv, l.bqkv); // [T, 3H]
      auto ctx = torch::empty({total, hidden}, x.options());
      for (const auto& g : groups) {
        attend(g, qkv, ctx);
      }
      x = layer_norm(x + torch::linear(ctx, l.wo, l.bo), l.ln1_w, l.ln1_b);
      auto inter = torch::linear(x, l.wi, l.bi);
      inter = tanh_gelu ? torch::gelu(inter, "tanh") : torch::gelu(inter);
      x = layer_norm(x + torch::linear(inter, l.w2, l.b2), l.ln2_w, l.ln2_b);
    }
    auto xf = x.to(torch::kFloat32);
    torch::Tensor pooled;
    if (cls_pooling) {
      pooled = xf.index_select(0, first_cpu.to(where.device));
    } else {
      pooled = torch::zeros({n, hidden}, xf.options())
                 .index_add_(0, owner_cpu.to(where.device), xf)
                 .div_(counts_cpu.to(where.device));
    }
    // Back from shortest-first to the inputs' order.
    std::vector<int64_t> sorted_row(ids.size());
    for (size_t k = 0; k < order.size(); ++k) {
      sorted_row[order[k]] = static_cast<int64_t>(k);
    }
    pooled = pooled.index_select(0, torch::tensor(sorted_row, torch::kInt64).to(where.device));
    return torch::nn::functional::normalize(
             pooled, torch::nn::functional::NormalizeFuncOptions().p(2).dim(1).eps(1e-12))
      .to(torch::kCPU)
      .contiguous();
  }
};

bert_embedder::bert_embedder(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

bert_embedder::~bert_embedder() = default;

const model_info& bert_embedder::info() const noexcept {
  return impl_->info;
}

std::unique_ptr<bert_embedder> bert_embedder::load(const std::string& folder,
                                                   const model_options& options) {
  auto p = std::make_unique<impl>();
  const std::string config_path = folder + "/config.json";
  auto cfg = read_model_config(config_path, "BERT embedder", "bert");
  auto act = cfg.value("hidden_act", std::string{"gelu"});
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    p->tanh_gelu = true;
  } else if (act != "gelu") {
    throw std::runtime_error{config_path + ": hidden_act \"" + act + "\" is not supported"};
  }
  const int64_t hidden = config_positive(cfg, config_path, "hidden_size");
  const int64_t n_layers = config_positive(cfg, config_path, "num_hidden_layers");
  p->heads = config_positive(cfg, config_path, "num_attention_heads");
  const int64_t inter = config_positive(cfg, config_path, "intermediate_size");
  const int64_t vocab = config_positive(cfg, config_path, "vocab_size");
  const int64_t max_pos = config_positive(cfg, config_path, "max_position_embeddings", 512);
  const int64_t types = config_positive(cfg, config_path, "type_vocab_size", 2);
  if (hidden % p->heads != 0) {
    throw std::runtime_error{config_path + ": hidden_size is not a multiple of num_attention_heads"};
  }
  if (auto eps = cfg.find("layer_norm_eps"); eps != cfg.end() && eps->is_number()) {
    p->eps = eps->get<double>();
  }
  const std::string pooling_path = folder + "/1_Pooling/config.json";
  auto pooling = read_json_file(pooling_path, false);
  if (pooling.value("pooling_mode_cls_token", false)) {
    p->cls_pooling = true;
    p->info.pooling = "cls";
  } else if (pooling.empty() || pooling.value("pooling_mode_mean_tokens", false)) {
    p->info.pooling = "mean";
  } else {
    throw std::runtime_error{pooling_path + ": only mean or CLS pooling is supported"};
  }
  auto st = read_json_file(folder + "/sentence_bert_config.json", false);
  p->info.max_tokens = static_cast<uint32_t>(
    std::min<int64_t>(max_pos, st.value("max_seq_length", max_pos)));

  p->where = place(options);
  p->overhead = pass_overhead_tokens(options.pass_overhead_tokens, p->where.device.is_cuda(),
                                     p->where.dtype != torch::kFloat32, 0);
  describe(p->info, folder, "bert", p->where, hidden, n_layers);

  torch::NoGradGuard no_grad;
  auto ckpt = checkpoint::open(folder);
  // sentence-transformers saves BertModel without a prefix; classifier checkpoints use "bert.".
  const std::string prefix = ckpt.find("embeddings.word_embeddings.weight") != nullptr ? ""
                             : ckpt.find("bert.embeddings.word_embeddings.weight") != nullptr
                               ? "bert."
                               : "";
  p->word = p->take(ckpt, prefix, "embeddings.word_embeddings.weight", {vocab, hidden});
  p->position = p->take(ckpt, prefix, "embeddings.position_embeddings.weight", {max_pos, hidden});
  p->token_type = p->take(ckpt, prefix, "embeddings.token_type_embeddings.weight", {types, hidden});
  p->emb_ln_w = p->take(ckpt, prefix, "embeddings.LayerNorm.weight", {hidden});
  p->emb_ln_b = p->take(ckpt, prefix, "embeddings.LayerNorm.bias", {hidden});
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = "encoder.layer." + std::to_string(i) + ".";
    layer_weights w;
    auto projection = [&](const char* what) {
      return std::pair{
        p->take(ckpt, prefix, l + "attention.self." + what + ".weight", {hidden, hidden}),
        p->take(ckpt, prefix, l + "attention.self." + what + ".bias", {hidden})};
    };
    auto [wq, bq] = projection("query");
    auto [wk, bk] = projection("key");
    auto [wv, bv] = projection("value");
    w.wqkv = torch::cat({wq, wk, wv}, 0);
    w.bqkv = torch::cat({bq, bk, bv}, 0);
    take_bert_block(w, l, hidden, inter, [&](const std::string& name, std::vector<int64_t> shape) {
      return p->take(ckpt, prefix, name, std::move(shape));
    });
    p->layers.push_back(std::move(w));
  }
  return std::unique_ptr<bert_embedder>{new bert_embedder{std::move(p)}};
}

std::vector<std::vector<float>> bert_embedder::embed(
  const std::vector<std::vector<int64_t>>& ids) const {
  if (ids.empty()) {
    return {};
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty() || ids[i].size() > impl_->info.max_tokens) {
      throw std::invalid_argument{"input " + std::to_string(i) + " has " + std::to_string(ids[i].size())
                                  + " tokens; expected 1 to "
                                  + std::to_string(impl_->info.max_tokens)};
    }
    for (auto id : ids[i]) {
      if (id < 0 || id >= impl_->word.size(0)) {
        throw std::invalid_argument{"input " + std::to_string(i) + " holds token id "
                                    + std::to_string(id) + " outside the vocabulary"};
      }
    }
  }
  c10::InferenceMode inference;
  return rows_of(impl_->forward(ids));
}

int cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

std::string without_backtrace(const char* what) {
  std::string_view text{what};
  return std::string{text.substr(0, text.find("\nException raised from"))};
}

} // namespace arbiter::backends::models
