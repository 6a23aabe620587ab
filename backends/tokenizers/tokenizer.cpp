#include "backends/tokenizers/tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "backends/tokenizers/models.hpp"
#include "backends/tokenizers/pre_tokenizers.hpp"
#include "backends/tokenizers/sentencepiece_api.hpp"
#include "backends/tokenizers/unicode.hpp"

namespace arbiter::backends::tokenizers {

namespace {

using json = nlohmann::json;

/// A SentencePiece model, through libsentencepiece (see sentencepiece_api.hpp).
class spm_model {
 public:
  explicit spm_model(const std::string& path) : api_{load_sentencepiece_api()} {
    std::string error;
    model_ = api_.load(path, &error);
    if (model_ == nullptr)
      throw std::runtime_error(path + ": cannot load the SentencePiece model: " + error);
  }
  ~spm_model() { api_.destroy(model_); }
  spm_model(const spm_model&) = delete;
  spm_model& operator=(const spm_model&) = delete;

  void encode(const std::string& text, std::vector<std::int64_t>& ids) const {
    std::vector<int> pieces;
    std::string error;
    if (!api_.encode(model_, text, &pieces, &error))
      throw std::runtime_error("sentencepiece: " + error);
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }
  std::string decode(const std::vector<int>& ids) const {
    std::string text;
    return api_.decode(model_, ids, &text) ? text : std::string{};
  }
  int size() const { return api_.piece_size(model_); }
  int id(const std::string& piece) const { return api_.piece_to_id(model_, piece); }
  std::string piece(int id) const {
    std::string out;
    api_.id_to_piece(model_, id, &out);
    return out;
  }
  bool control(int id) const { return api_.is_control(model_, id); }
  bool unknown(int id) const { return api_.is_unknown(model_, id); }

 private:
  const sentencepiece_api& api_;
  void* model_ = nullptr;
};

struct normalizer_step {
  enum class kind { bert, unicode_form, lowercase, strip_accents };
  kind what = kind::bert;
  unicode::normal_form form = unicode::normal_form::nfc;
  // BertNormalizer's options.
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
};

struct pre_tokenizer_step {
  enum class kind { bert, split, byte_level };
  kind what = kind::bert;
  split_regex regex = split_regex::gpt2;  // split, and byte_level with use_regex
  bool add_prefix_space = false;          // byte_level
  bool use_regex = false;                 // byte_level
};

struct added_token {
  std::u32string content;  // normalized when matched after normalization
  std::int64_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
};

/// A special token or one of the sequences in a post-processor template.
struct template_piece {
  bool is_sequence = false;
  std::size_t sequence = 0;         // 0 for $A, 1 for $B
  std::vector<std::int64_t> ids;    // the special token's ids
  std::int64_t type_id = 0;
};

/// Added tokens matched at one stage (before or after normalization), indexed by their first
/// character.
struct added_tokens_set {
  std::vector<added_token> tokens;
  std::unordered_map<char32_t, std::vector<std::size_t>> by_first_char;

  void add(added_token token) {
    if (token.content.empty()) return;  // tokenizers ignores empty added tokens
    by_first_char[token.content.front()].push_back(tokens.size());
    tokens.push_back(std::move(token));
  }
};

/// A stretch of text, or an added token found in it.
struct segment {
  std::u32string_view text;
  std::optional<std::int64_t> id;
};

/// Splits `text` around the added tokens of `set` (AddedVocabulary::find_matches):
/// non-overlapping leftmost-longest matches, single_word matches kept only between non-word
/// characters, lstrip/rstrip taking the adjacent whitespace into the token.
std::vector<segment> split_added(std::u32string_view text, const added_tokens_set& set) {
  std::vector<segment> out;
  if (set.tokens.empty()) {
    if (!text.empty()) out.push_back({text, std::nullopt});
    return out;
  }
  std::size_t emitted = 0;  // end of what is in `out`
  std::size_t i = 0;
  while (i < text.size()) {
    const added_token* best = nullptr;
    if (const auto bucket = set.by_first_char.find(text[i]); bucket != set.by_first_char.end()) {
      for (std::size_t k : bucket->second) {
        const added_token& t = set.tokens[k];
        if (best && t.content.size() <= best->content.size()) continue;
        if (text.compare(i, t.content.size(), t.content) == 0) best = &t;
      }
    }
    if (!best) {
      ++i;
      continue;
    }
    std::size_t start = i;
    std::size_t stop = i + best->content.size();
    i = stop;  // a discarded single_word match is still skipped, as aho-corasick's find_iter does
    if (best->single_word) {
      const bool word_before = start > 0 && unicode::is_word_char(text[start - 1]);
      const bool word_after = stop < text.size() && unicode::is_word_char(text[stop]);
      if (word_before || word_after) continue;
    }
    if (best->lstrip) {
      while (start > emitted && unicode::is_whitespace(text[start - 1])) --start;
    }
    if (best->rstrip) {
      while (stop < text.size() && unicode::is_whitespace(text[stop])) ++stop;
    }
    if (emitted < start) out.push_back({text.substr(emitted, start - emitted), std::nullopt});
    out.push_back({text.substr(start, stop - start), best->id});
    emitted = i = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), std::nullopt});
  return out;
}

} // namespace

struct tokenizer::impl {
  std::vector<normalizer_step> normalizers;
  std::vector<pre_tokenizer_step> pre_tokenizers;
  std::variant<wordpiece_model, bpe_model> model;
  /// SentencePiece tokenizers (DeBERTa's spm.model): normalization, pre-tokenization and the
  /// Unigram/BPE model all happen inside libsentencepiece; `model` is unused.
  std::shared_ptr<const spm_model> spm;
  added_tokens_set raw_added;         // normalized=false: matched in the input
  added_tokens_set normalized_added;  // normalized=true: matched after normalization
  std::unordered_map<std::string, std::int64_t> added_ids;
  /// Decoding: every id's token text (model vocabulary and added tokens), which added tokens
  /// are special, and whether tokens are byte-level (GPT-2's byte-to-unicode alphabet).
  std::unordered_map<std::int64_t, std::string> id_to_token;
  std::unordered_set<std::int64_t> special_ids;
  bool byte_level = false;
  bool has_template = false;
  std::vector<template_piece> single_template;
  std::vector<template_piece> pair_template;

  std::u32string normalize(std::u32string text) const;
  std::vector<std::u32string> pre_tokenize(std::u32string_view text) const;
  std::vector<std::int64_t> tokenize(std::string_view text) const;
  encoding post_process(std::vector<std::int64_t> a, const std::vector<std::int64_t>* b) const;
  std::size_t added_special_tokens(bool pair) const;
};

// --- encoding ---------------------------------------------------------------------------------

std::u32string tokenizer::impl::normalize(std::u32string text) const {
  for (const normalizer_step& step : normalizers) {
    switch (step.what) {
      case normalizer_step::kind::unicode_form: text = unicode::normalize(text, step.form); break;
      case normalizer_step::kind::lowercase: text = unicode::to_lower(text); break;
      case normalizer_step::kind::strip_accents:
        text.erase(std::remove_if(text.begin(), text.end(), unicode::is_mark), text.end());
        break;
      case normalizer_step::kind::bert: {
        std::u32string out;
        out.reserve(text.size());
        for (char32_t c : text) {
          if (step.clean_text) {
            if (c == 0 || c == 0xFFFD || unicode::is_bert_control(c)) continue;
            if (unicode::is_whitespace(c)) c = U' ';
          }
          if (step.handle_chinese_chars && unicode::is_cjk_ideograph(c)) {
            out += U' ';
            out += c;
            out += U' ';
          } else {
            out += c;
          }
        }
        if (step.strip_accents) {
          out = unicode::normalize(out, unicode::normal_form::nfd);
          out.erase(std::remove_if(out.begin(), out.end(), unicode::is_mark_nonspacing),
                    out.end());
        }
        text = step.lowercase ? unicode::to_lower(out) : std::move(out);
        break;
      }
    }
  }
  return text;
}

std::vector<std::u32string> tokenizer::impl::pre_tokenize(std::u32string_view text) const {
  std::vector<std::u32string> pieces;
  if (!text.empty()) pieces.emplace_back(text);
  for (const pre_tokenizer_step& step : pre_tokenizers) {
    std::vector<std::u32string> next;
    for (std::u32string& piece : pieces) {
      switch (step.what) {
        case pre_tokenizer_step::kind::bert:
          for (auto& p : split_bert(piece)) next.push_back(std::move(p));
          break;
        case pre_tokenizer_step::kind::split:
          for (auto& p : split_isolated(piece, step.regex)) next.push_back(std::move(p));
          break;
        case pre_tokenizer_step::kind::byte_level: {
          if (step.add_prefix_space && piece.front() != U' ') piece.insert(piece.begin(), U' ');
          if (!step.use_regex) {
            next.push_back(byte_level_map(piece));
            break;
          }
          for (auto& p : split_isolated(piece, step.regex)) next.push_back(byte_level_map(p));
          break;
        }
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

std::vector<std::int64_t> tokenizer::impl::tokenize(std::string_view text) const {
  std::vector<std::int64_t> ids;
  const std::u32string input = unicode::decode(text);
  for (const segment& raw : split_added(input, raw_added)) {
    if (raw.id) {
      ids.push_back(*raw.id);
      continue;
    }
    if (spm) {
      // Each stretch between added tokens is encoded on its own, as `tokenizers` normalizes
      // and pre-tokenizes each one (Metaspace prepends "▁" to every stretch).
      spm->encode(unicode::encode(raw.text), ids);
      continue;
    }
    const std::u32string normalized = normalize(std::u32string{raw.text});
    for (const segment& part : split_added(normalized, normalized_added)) {
      if (part.id) {
        ids.push_back(*part.id);
        continue;
      }
      for (const std::u32string& piece : pre_tokenize(part.text)) {
        const std::string word = unicode::encode(piece);
        std::visit([&](const auto& m) { m.tokenize(word, ids); }, model);
      }
    }
  }
  return ids;
}

std::size_t tokenizer::impl::added_special_tokens(bool pair) const {
  std::size_t n = 0;
  for (const template_piece& p : pair ? pair_template : single_template) n += p.ids.size();
  return n;
}

encoding tokenizer::impl::post_process(std::vector<std::int64_t> a,
                                       const std::vector<std::int64_t>* b) const {
  encoding out;
  auto append = [&](const std::vector<std::int64_t>& ids, std::int64_t type_id) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.type_ids.insert(out.type_ids.end(), ids.size(), type_id);
  };
  if (!has_template) {
    // No post-processor: the sequences as they are, the second with type id 1.
    append(a, 0);
    if (b) append(*b, 1);
  } else {
    for (const template_piece& p : b ? pair_template : single_template) {
      if (!p.is_sequence) append(p.ids, p.type_id);
      else append(p.sequence == 0 ? a : *b, p.type_id);
    }
  }
  out.attention_mask.assign(out.ids.size(), 1);
  return out;
}

namespace {

/// Cuts the model's tokens to `max_length` in all (tokenizers' truncate_encodings with
/// TruncationStrategy::LongestFirst, stride 0, from the right).
void truncate_longest_first(std::vector<std::int64_t>& a, std::vector<std::int64_t>* b,
                            std::size_t max_length) {
  if (!b) {
    if (a.size() > max_length) a.resize(max_length);
    return;
  }
  if (a.size() + b->size() <= max_length) return;
  std::size_t n1 = a.size();
  std::size_t n2 = b->size();
  const bool swapped = n1 > n2;
  if (swapped) std::swap(n1, n2);
  n2 = n1 > max_length ? n1 : std::max(n1, max_length - n1);
  if (n1 + n2 > max_length) {
    n1 = max_length / 2;
    n2 = n1 + max_length % 2;
  }
  if (swapped) std::swap(n1, n2);
  if (a.size() > n1) a.resize(n1);
  if (b->size() > n2) b->resize(n2);
}

std::size_t model_budget(std::size_t max_length, std::size_t added) {
  if (max_length < added)
    throw std::invalid_argument("max_length " + std::to_string(max_length)
                                + " is smaller than the " + std::to_string(added)
                                + " special tokens the tokenizer adds");
  return max_length - added;
}

} // namespace

encoding tokenizer::encode(std::string_view text, std::size_t max_length) const {
  std::vector<std::int64_t> ids = impl_->tokenize(text);
  if (max_length > 0)
    truncate_longest_first(ids, nullptr, model_budget(max_length, added_special_tokens(false)));
  return impl_->post_process(std::move(ids), nullptr);
}

std::vector<std::int64_t> tokenizer::encode_plain(std::string_view text) const {
  return impl_->tokenize(text);
}

encoding tokenizer::encode_pair(std::string_view first, std::string_view second,
                                std::size_t max_length) const {
  std::vector<std::int64_t> a = impl_->tokenize(first);
  std::vector<std::int64_t> b = impl_->tokenize(second);
  if (max_length > 0)
    truncate_longest_first(a, &b, model_budget(max_length, added_special_tokens(true)));
  return impl_->post_process(std::move(a), &b);
}

std::string tokenizer::decode(const std::vector<std::int64_t>& ids, bool skip_special) const {
  std::string out;
  if (impl_->spm) {
    // Runs of model pieces go through sentencepiece (which turns "▁" back into spaces);
    // added tokens are written as they are.
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      out += impl_->spm->decode(run);
      run.clear();
    };
    for (std::int64_t id : ids) {
      if (auto it = impl_->id_to_token.find(id); it != impl_->id_to_token.end()) {
        flush();
        if (!(skip_special && impl_->special_ids.count(id) > 0)) out += it->second;
      } else if (id >= 0 && id < impl_->spm->size()) {
        run.push_back(static_cast<int>(id));
      }
    }
    flush();
    return unicode::to_valid_utf8(out);
  }
  const auto* wordpiece = std::get_if<wordpiece_model>(&impl_->model);
  for (std::int64_t id : ids) {
    if (skip_special && impl_->special_ids.count(id) > 0) continue;
    auto it = impl_->id_to_token.find(id);
    if (it == impl_->id_to_token.end()) continue;
    const std::string& token = it->second;
    const bool added = impl_->added_ids.count(token) > 0;
    if (impl_->byte_level && !added) {
      // Byte-level tokens spell bytes in GPT-2's printable alphabet.
      for (char32_t c : unicode::decode(token)) {
        if (auto b = byte_level_unmap(c)) out.push_back(static_cast<char>(*b));
      }
    } else if (wordpiece != nullptr && !added) {
      const auto& prefix = wordpiece->continuing_subword_prefix;
      if (!prefix.empty() && token.rfind(prefix, 0) == 0) {
        out += token.substr(prefix.size());
      } else {
        if (!out.empty()) out += ' ';
        out += token;
      }
    } else {
      out += token;
    }
  }
  // Byte-level pieces may end (or start) inside a character: invalid sequences become U+FFFD,
  // as `tokenizers` decodes them, so the text is the one a trainer, the log and replay see.
  return unicode::to_valid_utf8(out);
}

std::optional<std::int64_t> tokenizer::token_id(std::string_view token) const {
  const std::string key{token};
  if (auto it = impl_->added_ids.find(key); it != impl_->added_ids.end()) return it->second;
  if (impl_->spm) {
    const int id = impl_->spm->id(key);
    if (impl_->spm->unknown(id) && impl_->spm->piece(id) != key) return std::nullopt;
    return id;
  }
  return std::visit(
    [&](const auto& m) -> std::optional<std::int64_t> {
      const auto it = m.vocab.find(key);
      if (it == m.vocab.end()) return std::nullopt;
      return it->second;
    },
    impl_->model);
}

std::size_t tokenizer::added_special_tokens(bool pair) const {
  return impl_->added_special_tokens(pair);
}

// --- loading ----------------------------------------------------------------------------------

namespace {

/// Reads tokenizer.json into a tokenizer::impl; every error names the source and JSON path.
class loader {
 public:
  explicit loader(std::string source) : source_{std::move(source)} {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(source_ + ": " + what);
  }
  [[noreturn]] void unsupported(const std::string& path, const std::string& value) const {
    fail(path + " \"" + value + "\" is not supported");
  }

  const json& field(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) fail(path + "." + key + " is missing");
    return obj.at(key);
  }
  std::string string_field(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_string()) fail(path + "." + key + " is not a string");
    return v.get<std::string>();
  }
  /// A boolean that may be absent or null.
  bool flag(const json& obj, const char* key, bool fallback) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
    return obj.at(key).get<bool>();
  }
  std::int64_t integer(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path + " is not an integer");
    return v.get<std::int64_t>();
  }

  void normalizer(const json& j, const std::string& path, std::vector<normalizer_step>& out) const {
    if (j.is_null()) return;
    const std::string type = string_field(j, path, "type");
    normalizer_step step;
    if (type == "Sequence") {
      const json& list = field(j, path, "normalizers");
      for (std::size_t i = 0; i < list.size(); ++i)
        normalizer(list[i], path + ".normalizers[" + std::to_string(i) + "]", out);
      return;
    }
    if (type == "BertNormalizer") {
      step.what = normalizer_step::kind::bert;
      step.clean_text = flag(j, "clean_text", true);
      step.handle_chinese_chars = flag(j, "handle_chinese_chars", true);
      step.lowercase = flag(j, "lowercase", true);
      step.strip_accents = flag(j, "strip_accents", step.lowercase);
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      step.what = normalizer_step::kind::unicode_form;
      step.form = type == "NFC"   ? unicode::normal_form::nfc
                  : type == "NFD" ? unicode::normal_form::nfd
                  : type == "NFKC" ? unicode::normal_form::nfkc
                                   : unicode::normal_form::nfkd;
    } else if (type == "Lowercase") {
      step.what = normalizer_step::kind::lowercase;
    } else if (type == "StripAccents") {
      step.what = normalizer_step::kind::strip_accents;
    } else {
      unsupported(path + ".type", type);
    }
    out.push_back(step);
  }

  void pre_tokenizer(const json& j, const std::string& path,
                     std::vector<pre_tokenizer_step>& out) const {
    if (j.is_null()) return;
    const std::string type = string_field(j, path, "type");
    pre_tokenizer_step step;
    if (type == "Sequence") {
      const json& list = field(j, path, "pretokenizers");
      for (std::size_t i = 0; i < list.size(); ++i)
        pre_tokenizer(list[i], path + ".pretokenizers[" + std::to_string(i) + "]", out);
      return;
    }
    if (type == "BertPreTokenizer") {
      step.what = pre_tokenizer_step::kind::bert;
    } else if (type == "ByteLevel") {
      step.what = pre_tokenizer_step::kind::byte_level;
      step.add_prefix_space = flag(j, "add_prefix_space", true);
      step.use_regex = flag(j, "use_regex", true);
      step.regex = split_regex::gpt2;
    } else if (type == "Split") {
      step.what = pre_tokenizer_step::kind::split;
      const json& pattern = field(j, path, "pattern");
      if (!pattern.contains("Regex")) fail(path + ".pattern: only Regex patterns are supported");
      const std::string source = string_field(pattern, path + ".pattern", "Regex");
      if (!recognise_split_regex(source, step.regex))
        fail(path + ".pattern.Regex \"" + source
             + "\" is not supported (only the Qwen2, Llama 3 and GPT-2 split regexes are)");
      const std::string behavior = string_field(j, path, "behavior");
      if (behavior != "Isolated") unsupported(path + ".behavior", behavior);
      if (flag(j, "invert", false)) fail(path + ".invert true is not supported");
    } else {
      unsupported(path + ".type", type);
    }
    out.push_back(step);
  }

  vocabulary vocab(const json& model) const {
    const json& v = field(model, "model", "vocab");
    if (!v.is_object()) fail("model.vocab is not an object");
    vocabulary out;
    out.reserve(v.size());
    for (const auto& [token, id] : v.items()) out.emplace(token, integer(id, "model.vocab"));
    return out;
  }

  std::variant<wordpiece_model, bpe_model> model(const json& j) const {
    const std::string type = string_field(j, "model", "type");
    if (type == "WordPiece") {
      wordpiece_model m;
      m.vocab = vocab(j);
      const std::string unk = string_field(j, "model", "unk_token");
      const auto it = m.vocab.find(unk);
      if (it == m.vocab.end()) fail("model.unk_token \"" + unk + "\" is not in model.vocab");
      m.unk_id = it->second;
      if (j.contains("continuing_subword_prefix"))
        m.continuing_subword_prefix = string_field(j, "model", "continuing_subword_prefix");
      if (j.contains("max_input_chars_per_word"))
        m.max_input_chars_per_word = static_cast<std::size_t>(
          integer(j.at("max_input_chars_per_word"), "model.max_input_chars_per_word"));
      return m;
    }
    if (type == "BPE") {
      bpe_model m;
      m.vocab = vocab(j);
      if (j.contains("dropout") && !j.at("dropout").is_null() && j.at("dropout").get<double>() > 0)
        fail("model.dropout is not supported (encoding must be deterministic)");
      auto optional_string = [&](const char* key) {
        return j.contains(key) && !j.at(key).is_null() ? string_field(j, "model", key)
                                                       : std::string{};
      };
      if (const std::string unk = optional_string("unk_token"); !unk.empty()) {
        const auto it = m.vocab.find(unk);
        if (it == m.vocab.end()) fail("model.unk_token \"" + unk + "\" is not in model.vocab");
        m.unk_id = it->second;
      }
      m.continuing_subword_prefix = optional_string("continuing_subword_prefix");
      m.end_of_word_suffix = optional_string("end_of_word_suffix");
      m.fuse_unk = flag(j, "fuse_unk", false);
      m.byte_fallback = flag(j, "byte_fallback", false);
      m.ignore_merges = flag(j, "ignore_merges", false);

      const json& merges = field(j, "model", "merges");
      for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string path = "model.merges[" + std::to_string(rank) + "]";
        const json& entry = merges[rank];
        std::string left;
        std::string right;
        if (entry.is_string()) {  // "a b"
          const std::string s = entry.get<std::string>();
          const auto space = s.find(' ');
          if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
            fail(path + " is not two tokens separated by a space");
          left = s.substr(0, space);
          right = s.substr(space + 1);
        } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string()
                   && entry[1].is_string()) {  // ["a", "b"]
          left = entry[0].get<std::string>();
          right = entry[1].get<std::string>();
        } else {
          fail(path + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
        const std::string merged =
          left + right.substr(std::min(right.size(), m.continuing_subword_prefix.size()));
        auto id_of = [&](const std::string& token) {
          const auto it = m.vocab.find(token);
          if (it == m.vocab.end()) fail(path + ": \"" + token + "\" is not in model.vocab");
          return it->second;
        };
        bpe_model::merge merge;
        merge.rank = static_cast<std::int64_t>(rank);
        merge.new_id = id_of(merged);
        m.merges.emplace(bpe_model::pair_key(id_of(left), id_of(right)), merge);
      }
      return m;
    }
    unsupported("model.type", type);
  }

  /// TemplateProcessing's `single` or `pair` template.
  std::vector<template_piece> template_pieces(const json& j, const std::string& path,
                                              const char* key) const {
    const json& specials = field(j, path, "special_tokens");
    const json& list = field(j, path, key);
    std::vector<template_piece> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string item_path = path + "." + key + "[" + std::to_string(i) + "]";
      const json& item = list[i];
      template_piece piece;
      if (item.contains("Sequence")) {
        const json& s = item.at("Sequence");
        const std::string id = string_field(s, item_path + ".Sequence", "id");
        if (id != "A" && id != "B") unsupported(item_path + ".Sequence.id", id);
        piece.is_sequence = true;
        piece.sequence = id == "A" ? 0 : 1;
        piece.type_id = integer(field(s, item_path + ".Sequence", "type_id"), item_path);
      } else if (item.contains("SpecialToken")) {
        const json& s = item.at("SpecialToken");
        const std::string id = string_field(s, item_path + ".SpecialToken", "id");
        if (!specials.contains(id))
          fail(item_path + ": special token \"" + id + "\" is not in " + path + ".special_tokens");
        for (const json& token_id : field(specials.at(id), path + ".special_tokens." + id, "ids"))
          piece.ids.push_back(integer(token_id, path + ".special_tokens." + id + ".ids"));
        piece.type_id = integer(field(s, item_path + ".SpecialToken", "type_id"), item_path);
      } else {
        fail(item_path + " is neither a Sequence nor a SpecialToken");
      }
      out.push_back(std::move(piece));
    }
    return out;
  }

  void post_processor(const json& j, const std::string& path, tokenizer::impl& out) const {
    if (j.is_null()) return;
    const std::string type = string_field(j, path, "type");
    if (type == "Sequence") {
      const json& list = field(j, path, "processors");
      for (std::size_t i = 0; i < list.size(); ++i)
        post_processor(list[i], path + ".processors[" + std::to_string(i) + "]", out);
      return;
    }
    if (type == "ByteLevel") return;  // trims offsets only
    if (out.has_template) fail(path + ": only one TemplateProcessing or BertProcessing is supported");
    out.has_template = true;
    if (type == "TemplateProcessing") {
      out.single_template = template_pieces(j, path, "single");
      out.pair_template = template_pieces(j, path, "pair");
    } else if (type == "BertProcessing") {
      auto special = [&](const char* key) {
        const json& v = field(j, path, key);
        if (!v.is_array() || v.size() != 2)
          fail(path + "." + key + " is not [token, id]");
        template_piece p;
        p.ids = {integer(v[1], path + "." + key + "[1]")};
        return p;
      };
      const template_piece cls = special("cls");
      template_piece sep = special("sep");
      template_piece a;
      a.is_sequence = true;
      template_piece b = a;
      b.sequence = 1;
      b.type_id = 1;
      out.single_template = {cls, a, sep};
      out.pair_template = {cls, a, sep, b, sep};
      out.pair_template.back().type_id = 1;
    } else {
      unsupported(path + ".type", type);
    }
  }

  void added_tokens(const json& list, tokenizer::impl& out) const {
    if (list.is_null()) return;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      const json& j = list[i];
      added_token token;
      const std::string content = string_field(j, path, "content");
      token.id = integer(field(j, path, "id"), path + ".id");
      token.single_word = flag(j, "single_word", false);
      token.lstrip = flag(j, "lstrip", false);
      token.rstrip = flag(j, "rstrip", false);
      out.added_ids.emplace(content, token.id);
      if (flag(j, "special", false)) out.special_ids.insert(token.id);
      if (flag(j, "normalized", !flag(j, "special", false))) {
        token.content = out.normalize(unicode::decode(content));
        out.normalized_added.add(std::move(token));
      } else {
        token.content = unicode::decode(content);
        out.raw_added.add(std::move(token));
      }
    }
  }

  /// A SentencePiece model's added tokens and post-processor: from tokenizer.json when the
  /// folder has one (its normalizer, pre-tokenizer and model describe what sentencepiece
  /// does and are not read), else the model's control and unknown pieces, "[MASK]" after the
  /// last piece (DeBERTa-v3) and DeBERTa's `[CLS] A [SEP] (B [SEP])`.
  std::shared_ptr<const tokenizer::impl> load_sentencepiece(
      std::shared_ptr<const spm_model> spm, const json* root) const {
    auto out = std::make_shared<tokenizer::impl>();
    out->spm = std::move(spm);
    if (root) {
      if (!root->is_object()) fail("not a tokenizer.json object");
      post_processor(root->value("post_processor", json{}), "post_processor", *out);
      added_tokens(root->value("added_tokens", json{}), *out);
    } else {
      auto add_special = [&](const std::string& content, std::int64_t id) {
        added_token token;
        token.content = unicode::decode(content);
        token.id = id;
        out->added_ids.emplace(content, id);
        out->special_ids.insert(id);
        out->raw_added.add(std::move(token));
      };
      const int pieces = out->spm->size();
      for (int id = 0; id < pieces; ++id) {
        if (out->spm->control(id) || out->spm->unknown(id)) add_special(out->spm->piece(id), id);
      }
      if (out->added_ids.count("[MASK]") == 0) add_special("[MASK]", pieces);
      const auto cls = out->added_ids.find("[CLS]");
      const auto sep = out->added_ids.find("[SEP]");
      if (cls != out->added_ids.end() && sep != out->added_ids.end()) {
        out->has_template = true;
        template_piece a;
        a.is_sequence = true;
        template_piece b = a;
        b.sequence = 1;
        b.type_id = 1;
        template_piece c;
        c.ids = {cls->second};
        template_piece s0;
        s0.ids = {sep->second};
        template_piece s1 = s0;
        s1.type_id = 1;
        out->single_template = {c, a, s0};
        out->pair_template = {c, a, s0, b, s1};
      }
    }
    for (const auto& [token, id] : out->added_ids) out->id_to_token[id] = token;
    return out;
  }

  std::shared_ptr<const tokenizer::impl> load(const json& root) const {
    if (!root.is_object()) fail("not a tokenizer.json object");
    auto out = std::make_shared<tokenizer::impl>();
    normalizer(root.value("normalizer", json{}), "normalizer", out->normalizers);
    pre_tokenizer(root.value("pre_tokenizer", json{}), "pre_tokenizer", out->pre_tokenizers);
    if (!root.contains("model")) fail("model is missing");
    out->model = model(root.at("model"));
    post_processor(root.value("post_processor", json{}), "post_processor", *out);
    added_tokens(root.value("added_tokens", json{}), *out);
    std::visit([&](const auto& m) {
      for (const auto& [token, id] : m.vocab) out->id_to_token.emplace(id, token);
    }, out->model);
    for (const auto& [token, id] : out->added_ids) out->id_to_token[id] = token;
    for (const auto& step : out->pre_tokenizers) {
      if (step.what == pre_tokenizer_step::kind::byte_level) out->byte_level = true;
    }
    return out;
  }

 private:
  std::string source_;
};

} // namespace

tokenizer tokenizer::from_json(std::string_view json_text, const std::string& source) {
  const loader l{source};
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    l.fail(std::string{"not valid JSON: "} + e.what());
  }
  try {
    return tokenizer{l.load(root)};
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    l.fail(std::string{"unexpected content: "} + e.what());
  }
}

tokenizer tokenizer::from_sentencepiece(const std::string& model_path,
                                       const std::string& tokenizer_json) {
  auto spm = std::make_shared<const spm_model>(model_path);
  if (tokenizer_json.empty()) return tokenizer{loader{model_path}.load_sentencepiece(spm, nullptr)};
  std::ifstream in{tokenizer_json, std::ios::binary};
  if (!in) throw std::runtime_error(tokenizer_json + ": cannot open the file");
  const loader l{tokenizer_json};
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    l.fail(std::string{"not valid JSON: "} + e.what());
  }
  try {
    return tokenizer{l.load_sentencepiece(spm, &root)};
  } catch (const json::exception& e) {
    l.fail(std::string{"unexpected content: "} + e.what());
  }
}

tokenizer tokenizer::from_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in) throw std::runtime_error(path + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

} // namespace arbiter::backends::tokenizers
