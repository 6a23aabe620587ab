#include "backends/models/deberta_classifier.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "backends/models/loading.hpp"
#include "backends/models/safetensors.hpp"

// Follows transformers' modeling_deberta_v2.py (DebertaV2ForSequenceClassification, eval mode).

namespace arbiter::backends::models {

namespace {

using json = nlohmann::json;

bool config_bool(const json& cfg, const std::string& file, const char* key, bool fallback) {
  auto found = cfg.find(key);
  if (found == cfg.end() || found->is_null()) {
    return fallback;
  }
  if (!found->is_boolean()) {
    throw std::runtime_error{file + ": " + key + " is not true or false"};
  }
  return found->get<bool>();
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

/// "a|b" or ["a", "b"] as lower-case trimmed items (HF's pos_att_type and norm_rel_ebd).
std::vector<std::string> config_list(const json& cfg, const std::string& file, const char* key,
                                     const std::string& fallback) {
  std::vector<std::string> items;
  auto add = [&](std::string s) {
    auto b = s.find_first_not_of(" \t");
    auto e = s.find_last_not_of(" \t");
    if (b != std::string::npos) {
      items.push_back(lower(s.substr(b, e - b + 1)));
    }
  };
  auto split = [&](const std::string& s) {
    size_t start = 0;
    for (size_t bar = s.find('|'); bar != std::string::npos; bar = s.find('|', start)) {
      add(s.substr(start, bar - start));
      start = bar + 1;
    }
    add(s.substr(start));
  };
  auto found = cfg.find(key);
  if (found == cfg.end() || found->is_null()) {
    split(fallback);
  } else if (found->is_string()) {
    split(found->get<std::string>());
  } else if (found->is_array()) {
    for (const auto& item : *found) {
      if (!item.is_string()) {
        throw std::runtime_error{file + ": " + key + " holds a non-string"};
      }
      add(item.get<std::string>());
    }
  } else {
    throw std::runtime_error{file + ": " + key + " is not a string or a list"};
  }
  return items;
}

bool contains(const std::vector<std::string>& items, const char* item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

/// HF's ACT2FN entries a DeBERTa config may name.
enum class activation { gelu, gelu_tanh, tanh, relu };

activation parse_activation(const json& cfg, const std::string& file, const char* key,
                            const char* fallback) {
  auto name = cfg.value(key, std::string{fallback});
  if (name == "gelu") {
    return activation::gelu;
  }
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") {
    return activation::gelu_tanh;
  }
  if (name == "tanh") {
    return activation::tanh;
  }
  if (name == "relu") {
    return activation::relu;
  }
  throw std::runtime_error{file + ": " + key + " \"" + name + "\" is not supported"};
}

torch::Tensor apply(activation a, const torch::Tensor& x) {
  switch (a) {
    case activation::gelu:
      return torch::gelu(x);
    case activation::gelu_tanh:
      return torch::gelu(x, "tanh");
    case activation::tanh:
      return torch::tanh(x);
    case activation::relu:
      return torch::relu(x);
  }
  return x;
}

/// One DeBERTa layer's weights. pos_k/pos_q are the relative-position projections: key_proj
/// and query_proj themselves when share_att_key, else pos_key_proj / pos_query_proj.
struct layer_weights {
  torch::Tensor wq, bq, wk, bk, wv, bv, pos_wk, pos_bk, pos_wq, pos_bq;
  torch::Tensor wo, bo, ln1_w, ln1_b, wi, bi, w2, b2, ln2_w, ln2_b;
};

} // namespace

struct deberta_classifier::impl {
  model_info info;
  std::vector<std::string> labels;
  placement where;
  int64_t heads = 0;
  int64_t head_size = 0;
  double eps = 1e-7;
  activation hidden_act = activation::gelu;
  activation conv_act = activation::tanh;
  activation pooler_act = activation::gelu;
  // Relative attention: off when relative_attention is false.
  bool relative = false;
  bool c2p = false;
  bool p2c = false;
  /// 1 + [c2p] + [p2c]; HF counts pos_att_type even when relative_attention is off.
  int64_t scale_factor = 1;
  int64_t buckets = -1;
  int64_t max_relative = 0;
  /// pos_ebd_size: position_buckets if > 0, else max_relative_positions.
  int64_t span = 0;
  int64_t conv_groups = 1;
  int64_t type_vocab = 0;
  torch::Tensor word, position, token_type, embed_proj, emb_ln_w, emb_ln_b;
  /// rel_embeddings[0 : 2·span], layer-normed when norm_rel_ebd says so (done once at load).
  torch::Tensor rel;
  torch::Tensor conv_w, conv_b, conv_ln_w, conv_ln_b;
  torch::Tensor pool_w, pool_b, cls_w, cls_b;
  std::vector<layer_weights> layers;

  /// The tensor `name`, checked against `shape` and placed.
  torch::Tensor take(const checkpoint& ckpt, const std::string& prefix, const std::string& name,
                     const std::vector<int64_t>& shape) {
    return load_tensor(ckpt, ckpt.find(prefix + name), prefix + name, shape, where,
                       info.weight_bytes);
  }

  torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& w,
                           const torch::Tensor& b) const {
    return torch::layer_norm(x, {x.size(-1)}, w, b, eps);
  }

  /// [len, len] indices into `rel` for query i, key j: clamp(b(i − j) + span, 0, 2·span − 1),
  /// b = HF's make_log_bucket_position (float32 logs, as HF computes them) or the identity.
  torch::Tensor relative_index(int64_t len) const {
    auto pos = torch::arange(len, torch::kInt64);
    auto rel_pos = pos.unsqueeze(1) - pos.unsqueeze(0);
    if (buckets > 0) {
      const int64_t mid = buckets / 2;
      auto sign = torch::sign(rel_pos);
      auto abs_pos = torch::where((rel_pos < mid) & (rel_pos > -mid),
                                  torch::full_like(rel_pos, mid - 1), torch::abs(rel_pos));
      auto ratio = torch::tensor(
        static_cast<float>(static_cast<double>(max_relative - 1) / static_cast<double>(mid)));
      auto log_pos = torch::ceil(torch::log(abs_pos.to(torch::kFloat32) / static_cast<double>(mid))
                                 / torch::log(ratio) * static_cast<double>(mid - 1))
                     + static_cast<double>(mid);
      rel_pos = torch::where(abs_pos <= mid, rel_pos.to(torch::kFloat32),
                             log_pos * sign.to(torch::kFloat32))
                  .to(torch::kInt64);
    }
    return torch::clamp(rel_pos + span, 0, 2 * span - 1);
  }

  torch::Tensor forward(const std::vector<std::vector<int64_t>>& ids,
                        const std::vector<std::vector<int64_t>>& type_ids) const {
    const auto batch = static_cast<int64_t>(ids.size());
    int64_t len = 0;
    for (const auto& seq : ids) {
      len = std::max<int64_t>(len, static_cast<int64_t>(seq.size()));
    }
    auto ids_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto types_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto mask_cpu = torch::zeros({batch, len}, torch::kInt64);
    auto ids_a = ids_cpu.accessor<int64_t, 2>();
    auto types_a = types_cpu.accessor<int64_t, 2>();
    auto mask_a = mask_cpu.accessor<int64_t, 2>();
    for (int64_t b = 0; b < batch; ++b) {
      for (size_t t = 0; t < ids[b].size(); ++t) {
        ids_a[b][static_cast<int64_t>(t)] = ids[b][t];
        types_a[b][static_cast<int64_t>(t)] = type_ids.empty() ? 0 : type_ids[b][t];
        mask_a[b][static_cast<int64_t>(t)] = 1;
      }
    }
    auto input = ids_cpu.to(where.device);
    auto mask = mask_cpu.to(where.device);
    auto keep = mask.to(where.dtype).unsqueeze(-1); // [batch, len, 1]: 1 for tokens, 0 for padding

    // Embeddings: word (+ absolute position) (+ token type) (→ embed_proj), LN, padding zeroed.
    auto x = torch::embedding(word, input);
    if (position.defined()) {
      auto positions =
        torch::arange(len, torch::TensorOptions().dtype(torch::kInt64).device(where.device));
      x = x + torch::embedding(position, positions).unsqueeze(0);
    }
    if (token_type.defined()) {
      x = x + torch::embedding(token_type, types_cpu.to(where.device));
    }
    if (embed_proj.defined()) {
      x = torch::linear(x, embed_proj);
    }
    x = layer_norm(x, emb_ln_w, emb_ln_b) * keep;
    const auto embedded = x;

    // Additive key mask: 0 for tokens, the dtype's lowest value for padding. Padded query rows
    // come out as garbage that no real row ever reads.
    auto bias = (1 - mask.to(where.dtype)).unsqueeze(1).unsqueeze(1)
                * static_cast<double>(std::numeric_limits<float>::lowest());
    if (where.dtype != torch::kFloat32) {
      bias = bias.clamp_min(-1e4);
    }
    const int64_t hidden = x.size(-1);
    auto split = [&](const torch::Tensor& t) { // [batch, len, H·d] → [batch, H, len, d]
      return t.view({batch, len, heads, head_size}).transpose(1, 2);
    };
    auto split_rel = [&](const torch::Tensor& t) { // [2·span, H·d] → [H, 2·span, d]
      return t.view({2 * span, heads, head_size}).transpose(0, 1);
    };
    const double scale = std::sqrt(static_cast<double>(head_size * scale_factor));
    torch::Tensor c2p_index, p2c_index;
    if (relative) {
      auto index = relative_index(len).to(where.device);
      c2p_index = index.expand({batch, heads, len, len});
      // HF gathers p2c row by key j with clamp(−b(j − i) + span), then transposes.
      p2c_index = index.t().expand({batch, heads, len, len});
    }

    for (size_t n = 0; n < layers.size(); ++n) {
      const auto& l = layers[n];
      auto q = split(torch::linear(x, l.wq, l.bq));
      auto k = split(torch::linear(x, l.wk, l.bk));
      auto v = split(torch::linear(x, l.wv, l.bv));
      auto scores_bias = bias;
      if (relative && (c2p || p2c)) {
        torch::Tensor rel_scores;
        if (c2p) {
          auto pos_k = split_rel(torch::linear(rel, l.pos_wk, l.pos_bk));
          rel_scores = torch::gather(torch::matmul(q, pos_k.transpose(-1, -2)), -1, c2p_index);
        }
        if (p2c) {
          auto pos_q = split_rel(torch::linear(rel, l.pos_wq, l.pos_bq));
          auto p = torch::gather(torch::matmul(k, pos_q.transpose(-1, -2)), -1, p2c_index)
                     .transpose(-1, -2);
          rel_scores = rel_scores.defined() ? rel_scores + p : p;
        }
        scores_bias = bias + rel_scores / scale;
      }
      // SDPA divides q·k by sqrt(d); HF divides by sqrt(d · scale_factor).
      auto ctx = at::scaled_dot_product_attention(q / std::sqrt(static_cast<double>(scale_factor)), k, v, scores_bias)
                   .transpose(1, 2)
                   .reshape({batch, len, hidden});
      x = layer_norm(x + torch::linear(ctx, l.wo, l.bo), l.ln1_w, l.ln1_b);
      auto inter = apply(hidden_act, torch::linear(x, l.wi, l.bi));
      x = layer_norm(x + torch::linear(inter, l.w2, l.b2), l.ln2_w, l.ln2_b);
      if (n == 0 && conv_w.defined()) {
        // ConvLayer: a conv over the embedding output, padding rows zeroed, added to layer 0's
        // output.
        auto c = torch::conv1d(embedded.transpose(1, 2), conv_w, conv_b, /*stride=*/1,
                               /*padding=*/(conv_w.size(2) - 1) / 2, /*dilation=*/1, conv_groups)
                   .transpose(1, 2)
                 * keep;
        x = layer_norm(x + apply(conv_act, c), conv_ln_w, conv_ln_b) * keep;
      }
    }
    auto pooled = apply(pooler_act, torch::linear(x.select(1, 0), pool_w, pool_b));
    return torch::linear(pooled, cls_w, cls_b).to(torch::kCPU, torch::kFloat32).contiguous();
  }
};

deberta_classifier::deberta_classifier(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

deberta_classifier::~deberta_classifier() = default;

const model_info& deberta_classifier::info() const noexcept {
  return impl_->info;
}

const std::vector<std::string>& deberta_classifier::labels() const noexcept {
  return impl_->labels;
}

std::optional<size_t> deberta_classifier::label_index(std::string_view name) const {
  const auto wanted = lower(name);
  for (size_t i = 0; i < impl_->labels.size(); ++i) {
    if (lower(impl_->labels[i]) == wanted) {
      return i;
    }
  }
  return std::nullopt;
}

std::optional<nli_label_indices> deberta_classifier::nli_labels() const {
  auto e = label_index("entailment");
  auto n = label_index("neutral");
  auto c = label_index("contradiction");
  if (!e || !n || !c) {
    return std::nullopt;
  }
  return nli_label_indices{*e, *n, *c};
}

std::unique_ptr<deberta_classifier> deberta_classifier::load(const std::string& folder,
                                                             const model_options& options) {
  auto p = std::make_unique<impl>();
  const std::string config_path = folder + "/config.json";
  auto cfg = read_model_config(config_path, "DeBERTa classifier", "deberta-v2");
  const auto& file = config_path;
  p->hidden_act = parse_activation(cfg, file, "hidden_act", "gelu");
  p->conv_act = parse_activation(cfg, file, "conv_act", "tanh");
  p->pooler_act = parse_activation(cfg, file, "pooler_hidden_act", "gelu");
  const int64_t hidden = config_positive(cfg, file, "hidden_size");
  const int64_t n_layers = config_positive(cfg, file, "num_hidden_layers");
  p->heads = config_positive(cfg, file, "num_attention_heads");
  if (hidden % p->heads != 0) {
    throw std::runtime_error{file + ": hidden_size is not a multiple of num_attention_heads"};
  }
  p->head_size = config_positive(cfg, file, "attention_head_size", hidden / p->heads);
  if (p->head_size * p->heads != hidden) {
    throw std::runtime_error{file
                             + ": attention_head_size × num_attention_heads must equal "
                               "hidden_size"};
  }
  const int64_t inter = config_positive(cfg, file, "intermediate_size");
  const int64_t vocab = config_positive(cfg, file, "vocab_size");
  const int64_t max_pos = config_positive(cfg, file, "max_position_embeddings", 512);
  const int64_t embedding = config_positive(cfg, file, "embedding_size", hidden);
  p->type_vocab = config_int(cfg, file, "type_vocab_size", 0);
  const bool position_biased = config_bool(cfg, file, "position_biased_input", true);
  if (config_positive(cfg, file, "pooler_hidden_size", hidden) != hidden) {
    throw std::runtime_error{file + ": pooler_hidden_size must equal hidden_size"};
  }
  if (auto eps = cfg.find("layer_norm_eps"); eps != cfg.end() && eps->is_number()) {
    p->eps = eps->get<double>();
  }
  auto pos_att = config_list(cfg, file, "pos_att_type", "");
  for (const auto& t : pos_att) {
    if (t != "c2p" && t != "p2c") {
      throw std::runtime_error{file + ": pos_att_type \"" + t + "\" is not supported (c2p, p2c)"};
    }
  }
  p->c2p = contains(pos_att, "c2p");
  p->p2c = contains(pos_att, "p2c");
  p->scale_factor = 1 + (p->c2p ? 1 : 0) + (p->p2c ? 1 : 0);
  p->relative = config_bool(cfg, file, "relative_attention", false);
  const bool share_att_key = config_bool(cfg, file, "share_att_key", false);
  const auto norm_rel = config_list(cfg, file, "norm_rel_ebd", "none");
  p->max_relative = config_int(cfg, file, "max_relative_positions", -1);
  if (p->max_relative < 1) {
    p->max_relative = max_pos;
  }
  p->buckets = config_int(cfg, file, "position_buckets", -1);
  p->span = p->buckets > 0 ? p->buckets : p->max_relative;
  if (p->buckets > 0 && p->buckets < 4) {
    throw std::runtime_error{file + ": position_buckets must be at least 4"};
  }
  const int64_t conv_kernel = config_int(cfg, file, "conv_kernel_size", 0);
  if (conv_kernel > 0 && conv_kernel % 2 == 0) {
    throw std::runtime_error{file + ": conv_kernel_size must be odd"};
  }
  p->conv_groups = config_positive(cfg, file, "conv_groups", 1);
  if (hidden % p->conv_groups != 0) {
    throw std::runtime_error{file + ": conv_groups does not divide hidden_size"};
  }

  // Labels: id2label {"0": name, ...}, else num_labels (HF's default 2) as LABEL_i.
  int64_t n_labels = 0;
  if (auto id2label = cfg.find("id2label"); id2label != cfg.end() && id2label->is_object()
                                            && !id2label->empty()) {
    n_labels = static_cast<int64_t>(id2label->size());
    p->labels.resize(static_cast<size_t>(n_labels));
    for (const auto& [key, value] : id2label->items()) {
      size_t index = 0;
      try {
        index = std::stoul(key);
      } catch (const std::exception&) {
        throw std::runtime_error{file + ": id2label key \"" + key + "\" is not an index"};
      }
      if (index >= p->labels.size() || !value.is_string()) {
        throw std::runtime_error{file + ": id2label is not 0..n-1 → name"};
      }
      p->labels[index] = value.get<std::string>();
    }
  } else {
    n_labels = config_positive(cfg, file, "num_labels", 2);
    for (int64_t i = 0; i < n_labels; ++i) {
      p->labels.push_back("LABEL_" + std::to_string(i));
    }
  }

  p->where = place(options);
  describe(p->info, folder, "deberta-v2", p->where, hidden, n_layers);
  p->info.max_tokens = static_cast<uint32_t>(max_pos);

  torch::NoGradGuard no_grad;
  auto ckpt = checkpoint::open(folder);
  // Classifier checkpoints use "deberta."; a bare DebertaV2Model has none (and no head).
  const std::string prefix = "deberta.";
  const std::string e = "embeddings.";
  p->word = p->take(ckpt, prefix, e + "word_embeddings.weight", {vocab, embedding});
  if (position_biased) {
    p->position = p->take(ckpt, prefix, e + "position_embeddings.weight", {max_pos, embedding});
  }
  if (p->type_vocab > 0) {
    p->token_type =
      p->take(ckpt, prefix, e + "token_type_embeddings.weight", {p->type_vocab, embedding});
  }
  if (embedding != hidden) {
    p->embed_proj = p->take(ckpt, prefix, e + "embed_proj.weight", {hidden, embedding});
  }
  p->emb_ln_w = p->take(ckpt, prefix, e + "LayerNorm.weight", {hidden});
  p->emb_ln_b = p->take(ckpt, prefix, e + "LayerNorm.bias", {hidden});
  if (p->relative) {
    auto rel = p->take(ckpt, prefix, "encoder.rel_embeddings.weight", {2 * p->span, hidden});
    if (contains(norm_rel, "layer_norm")) {
      auto w = p->take(ckpt, prefix, "encoder.LayerNorm.weight", {hidden});
      auto b = p->take(ckpt, prefix, "encoder.LayerNorm.bias", {hidden});
      rel = p->layer_norm(rel, w, b);
    }
    p->rel = rel;
  }
  if (conv_kernel > 0) {
    const std::string c = "encoder.conv.";
    p->conv_w =
      p->take(ckpt, prefix, c + "conv.weight", {hidden, hidden / p->conv_groups, conv_kernel});
    p->conv_b = p->take(ckpt, prefix, c + "conv.bias", {hidden});
    p->conv_ln_w = p->take(ckpt, prefix, c + "LayerNorm.weight", {hidden});
    p->conv_ln_b = p->take(ckpt, prefix, c + "LayerNorm.bias", {hidden});
  }
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = "encoder.layer." + std::to_string(i) + ".";
    const std::string a = l + "attention.self.";
    layer_weights w;
    w.wq = p->take(ckpt, prefix, a + "query_proj.weight", {hidden, hidden});
    w.bq = p->take(ckpt, prefix, a + "query_proj.bias", {hidden});
    w.wk = p->take(ckpt, prefix, a + "key_proj.weight", {hidden, hidden});
    w.bk = p->take(ckpt, prefix, a + "key_proj.bias", {hidden});
    w.wv = p->take(ckpt, prefix, a + "value_proj.weight", {hidden, hidden});
    w.bv = p->take(ckpt, prefix, a + "value_proj.bias", {hidden});
    if (p->relative && share_att_key) {
      w.pos_wk = w.wk;
      w.pos_bk = w.bk;
      w.pos_wq = w.wq;
      w.pos_bq = w.bq;
    } else if (p->relative) {
      if (p->c2p) {
        w.pos_wk = p->take(ckpt, prefix, a + "pos_key_proj.weight", {hidden, hidden});
        w.pos_bk = p->take(ckpt, prefix, a + "pos_key_proj.bias", {hidden});
      }
      if (p->p2c) {
        w.pos_wq = p->take(ckpt, prefix, a + "pos_query_proj.weight", {hidden, hidden});
        w.pos_bq = p->take(ckpt, prefix, a + "pos_query_proj.bias", {hidden});
      }
    }
    take_bert_block(w, l, hidden, inter, [&](const std::string& name, std::vector<int64_t> shape) {
      return p->take(ckpt, prefix, name, std::move(shape));
    });
    p->layers.push_back(std::move(w));
  }
  p->pool_w = p->take(ckpt, "", "pooler.dense.weight", {hidden, hidden});
  p->pool_b = p->take(ckpt, "", "pooler.dense.bias", {hidden});
  p->cls_w = p->take(ckpt, "", "classifier.weight", {n_labels, hidden});
  p->cls_b = p->take(ckpt, "", "classifier.bias", {n_labels});
  return std::unique_ptr<deberta_classifier>{new deberta_classifier{std::move(p)}};
}

std::vector<std::vector<float>> deberta_classifier::logits(
  const std::vector<std::vector<int64_t>>& ids,
  const std::vector<std::vector<int64_t>>& type_ids) const {
  if (ids.empty()) {
    return {};
  }
  if (!type_ids.empty() && type_ids.size() != ids.size()) {
    throw std::invalid_argument{"type_ids holds " + std::to_string(type_ids.size())
                                + " sequences for " + std::to_string(ids.size()) + " inputs"};
  }
  const int64_t types = impl_->type_vocab;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty() || ids[i].size() > impl_->info.max_tokens) {
      throw std::invalid_argument{"input " + std::to_string(i) + " has "
                                  + std::to_string(ids[i].size()) + " tokens; expected 1 to "
                                  + std::to_string(impl_->info.max_tokens)};
    }
    for (auto id : ids[i]) {
      if (id < 0 || id >= impl_->word.size(0)) {
        throw std::invalid_argument{"input " + std::to_string(i) + " holds token id "
                                    + std::to_string(id) + " outside the vocabulary"};
      }
    }
    if (!type_ids.empty()) {
      if (type_ids[i].size() != ids[i].size()) {
        throw std::invalid_argument{"input " + std::to_string(i) + " has "
                                    + std::to_string(type_ids[i].size()) + " type ids for "
                                    + std::to_string(ids[i].size()) + " tokens"};
      }
      for (auto t : type_ids[i]) {
        if (types > 0 && (t < 0 || t >= types)) {
          throw std::invalid_argument{"input " + std::to_string(i) + " holds type id "
                                      + std::to_string(t) + "; the model has "
                                      + std::to_string(types)};
        }
      }
    }
  }
  torch::NoGradGuard no_grad;
  return rows_of(
      impl_->forward(ids, types > 0 ? type_ids : std::vector<std::vector<int64_t>>{}));
}

std::vector<std::vector<float>> deberta_classifier::probabilities(
  const std::vector<std::vector<int64_t>>& ids,
  const std::vector<std::vector<int64_t>>& type_ids) const {
  auto rows = logits(ids, type_ids);
  for (auto& row : rows) {
    const float top = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (auto& v : row) {
      v = std::exp(v - top);
      sum += v;
    }
    for (auto& v : row) {
      v = static_cast<float>(v / sum);
    }
  }
  return rows;
}

} // namespace arbiter::backends::models
