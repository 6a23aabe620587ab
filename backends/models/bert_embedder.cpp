#include "backends/models/bert_embedder.hpp"

#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "backends/models/devices.hpp"
#include "backends/models/loading.hpp"
#include "backends/models/safetensors.hpp"
#include "backends/models/torch_compat.hpp"

namespace arbiter::backends::models {

namespace {

using json = nlohmann::json;

/// One BERT layer's weights.
struct layer_weights {
  torch::Tensor wq, bq, wk, bk, wv, bv, wo, bo, ln1_w, ln1_b, wi, bi, w2, b2, ln2_w, ln2_b;
};

} // namespace

struct bert_embedder::impl {
  embedder_info info;
  placement where;
  int64_t heads = 0;
  double eps = 1e-12;
  bool tanh_gelu = false;
  bool cls_pooling = false;
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

  torch::Tensor forward(const std::vector<std::vector<int64_t>>& ids) const {
    const auto batch = static_cast<int64_t>(ids.size());
    int64_t len = 0;
    for (const auto& seq : ids) {
      len = std::max<int64_t>(len, static_cast<int64_t>(seq.size()));
    }
    auto ids_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto mask_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto ids_a = ids_cpu.accessor<int64_t, 2>();
    auto mask_a = mask_cpu.accessor<int64_t, 2>();
    for (int64_t b = 0; b < batch; ++b) {
      for (size_t t = 0; t < ids[b].size(); ++t) {
        ids_a[b][static_cast<int64_t>(t)] = ids[b][t];
        mask_a[b][static_cast<int64_t>(t)] = 1;
      }
    }
    auto input = ids_cpu.to(where.device);
    auto mask = mask_cpu.to(where.device);
    auto positions =
      torch::arange(len, torch::TensorOptions().dtype(torch::kInt64).device(where.device));
    auto x = torch::embedding(word, input) + torch::embedding(position, positions).unsqueeze(0)
             + token_type[0];
    x = layer_norm(x, emb_ln_w, emb_ln_b);
    // Additive mask: 0 where a key is a token, the dtype's lowest value where it is padding.
    auto bias = (1 - mask.to(where.dtype)).unsqueeze(1).unsqueeze(1)
                * static_cast<double>(std::numeric_limits<float>::lowest());
    if (where.dtype != torch::kFloat32) {
      bias = bias.clamp_min(-1e4);
    }
    const int64_t hidden = x.size(-1);
    const int64_t d = hidden / heads;
    auto split = [&](const torch::Tensor& t) {
      return t.view({batch, len, heads, d}).transpose(1, 2);
    };
    for (const auto& l : layers) {
      auto q = split(torch::linear(x, l.wq, l.bq));
      auto k = split(torch::linear(x, l.wk, l.bk));
      auto v = split(torch::linear(x, l.wv, l.bv));
      auto ctx = attention(q, k, v, bias).transpose(1, 2).reshape({batch, len, hidden});
      x = layer_norm(x + torch::linear(ctx, l.wo, l.bo), l.ln1_w, l.ln1_b);
      auto inter = torch::linear(x, l.wi, l.bi);
      inter = tanh_gelu ? torch::gelu(inter, "tanh") : torch::gelu(inter);
      x = layer_norm(x + torch::linear(inter, l.w2, l.b2), l.ln2_w, l.ln2_b);
    }
    auto xf = x.to(torch::kFloat32);
    torch::Tensor pooled;
    if (cls_pooling) {
      pooled = xf.select(1, 0);
    } else {
      auto m = mask.to(torch::kFloat32).unsqueeze(-1);
      pooled = (xf * m).sum(1) / m.sum(1).clamp_min(1e-9);
    }
    return torch::nn::functional::normalize(
             pooled, torch::nn::functional::NormalizeFuncOptions().p(2).dim(1).eps(1e-12))
      .to(torch::kCPU)
      .contiguous();
  }
};

bert_embedder::bert_embedder(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

bert_embedder::~bert_embedder() = default;

const embedder_info& bert_embedder::info() const noexcept {
  return impl_->info;
}

std::unique_ptr<bert_embedder> bert_embedder::load(const std::string& folder,
                                                   const model_options& options) {
  auto p = std::make_unique<impl>();
  const std::string config_path = folder + "/config.json";
  auto cfg = read_json_file(config_path);
  auto model_type = cfg.value("model_type", std::string{});
  if (model_type != "bert") {
    throw std::runtime_error{config_path + ": model_type \"" + model_type
                             + "\" is not supported by the BERT embedder (expected \"bert\")"};
  }
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
  p->info.folder = folder;
  p->info.architecture = "bert";
  p->info.device = p->where.device.str();
  p->info.dtype = p->where.dtype_name;
  p->info.hidden = static_cast<uint32_t>(hidden);
  p->info.layers = static_cast<uint32_t>(n_layers);

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
    w.wq = p->take(ckpt, prefix, l + "attention.self.query.weight", {hidden, hidden});
    w.bq = p->take(ckpt, prefix, l + "attention.self.query.bias", {hidden});
    w.wk = p->take(ckpt, prefix, l + "attention.self.key.weight", {hidden, hidden});
    w.bk = p->take(ckpt, prefix, l + "attention.self.key.bias", {hidden});
    w.wv = p->take(ckpt, prefix, l + "attention.self.value.weight", {hidden, hidden});
    w.bv = p->take(ckpt, prefix, l + "attention.self.value.bias", {hidden});
    w.wo = p->take(ckpt, prefix, l + "attention.output.dense.weight", {hidden, hidden});
    w.bo = p->take(ckpt, prefix, l + "attention.output.dense.bias", {hidden});
    w.ln1_w = p->take(ckpt, prefix, l + "attention.output.LayerNorm.weight", {hidden});
    w.ln1_b = p->take(ckpt, prefix, l + "attention.output.LayerNorm.bias", {hidden});
    w.wi = p->take(ckpt, prefix, l + "intermediate.dense.weight", {inter, hidden});
    w.bi = p->take(ckpt, prefix, l + "intermediate.dense.bias", {inter});
    w.w2 = p->take(ckpt, prefix, l + "output.dense.weight", {hidden, inter});
    w.b2 = p->take(ckpt, prefix, l + "output.dense.bias", {hidden});
    w.ln2_w = p->take(ckpt, prefix, l + "output.LayerNorm.weight", {hidden});
    w.ln2_b = p->take(ckpt, prefix, l + "output.LayerNorm.bias", {hidden});
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
  torch::NoGradGuard no_grad;
  auto pooled = impl_->forward(ids);
  const auto rows = pooled.size(0);
  const auto dims = pooled.size(1);
  std::vector<std::vector<float>> out(static_cast<size_t>(rows));
  const float* data = pooled.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    out[static_cast<size_t>(r)].assign(data + r * dims, data + (r + 1) * dims);
  }
  return out;
}

int cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

} // namespace arbiter::backends::models
