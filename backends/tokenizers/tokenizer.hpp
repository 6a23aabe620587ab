#pragma once

// Tokenizers read from a Hugging Face `tokenizer.json`, giving the same ids as the `tokenizers`
// library (PyPI) for the pipelines Arbiter's models use:
//
//   added tokens -> normalizer -> pre-tokenizer -> model -> truncation -> post-processor
//
// - normalizer: BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Sequence.
// - pre_tokenizer: BertPreTokenizer, ByteLevel (with or without GPT-2's regex), Split with the
//   Qwen2, Llama 3 or GPT-2 regex (Isolated), Sequence.
// - model: WordPiece, BPE (merges in either serialisation, byte_fallback, unk, ignore_merges).
// - post_processor: TemplateProcessing, BertProcessing, ByteLevel (no effect on ids), Sequence.
// - added_tokens: split out of the raw text before normalization (those with normalized=false)
//   or out of the normalized text (normalized=true), leftmost-longest, with single_word,
//   lstrip and rstrip, exactly as `tokenizers`' AddedVocabulary.
//
// Anything else (Unigram, WordLevel, Metaspace, Precompiled, other Split regexes, ...) is
// refused when loading, with the JSON path of what is not supported.
//
// SentencePiece models (DeBERTa-v2/v3's `spm.model`) load with `from_sentencepiece`: Debian's
// libsentencepiece does the normalization and the Unigram/BPE model, and the added tokens and
// post-processor come from the folder's tokenizer.json when there is one. The ids equal
// `tokenizers` reading the tokenizer.json that transformers' DebertaV2Converter writes.
//
// The `truncation` and `padding` sections of tokenizer.json are not applied: the caller passes
// max_length, and batching pads. Encoding is const and may run on many threads at once.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace arbiter::backends::tokenizers {

/// One encoded input (no padding): ids, their segment (type) ids and a mask of ones.
struct encoding {
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> type_ids;
  std::vector<std::int64_t> attention_mask;
};

class tokenizer {
 public:
  /// Loads `path`. Throws std::runtime_error naming the file and, for content it cannot
  /// serve, the JSON path and what is unsupported, e.g.
  /// `.../tokenizer.json: model.type "Unigram" is not supported`.
  static tokenizer from_file(const std::string& path);
  /// Loads a SentencePiece model (`spm.model`). `tokenizer_json`, when not empty, names the
  /// folder's tokenizer.json, read only for its added tokens and post-processor; without it
  /// the model's control pieces ([PAD], [CLS], [SEP]) and [UNK] are special, "[MASK]" takes
  /// the id after the last piece, and pairs become `[CLS] A [SEP] B [SEP]` (DeBERTa). Throws
  /// std::runtime_error naming the file.
  static tokenizer from_sentencepiece(const std::string& model_path,
                                      const std::string& tokenizer_json = {});
  /// As from_file, for JSON text already in memory; `source` names it in errors.
  static tokenizer from_json(std::string_view json_text, const std::string& source);

  /// Encodes `text` with the special tokens of the post-processor. With max_length > 0 the
  /// model's tokens are cut (from the right) so that the result, special tokens included, has
  /// at most max_length ids. Throws std::invalid_argument when max_length is smaller than the
  /// number of special tokens the post-processor adds.
  encoding encode(std::string_view text, std::size_t max_length = 0) const;

  /// The model's ids for `text` without the post-processor's special tokens (a generation
  /// prompt, which must not end in an EOS a template appends).
  std::vector<std::int64_t> encode_plain(std::string_view text) const;

  /// Encodes a text pair (`[CLS] A [SEP] B [SEP]` for BERT). Truncation is longest-first, as
  /// `tokenizers`' default TruncationStrategy::LongestFirst.
  encoding encode_pair(std::string_view first, std::string_view second,
                       std::size_t max_length = 0) const;

  /// The text of `ids`: byte-level tokens turned back into their bytes, WordPiece pieces
  /// joined (`##` pieces glued to the previous one), added tokens as written; special added
  /// tokens left out when `skip_special`. Unknown ids are skipped. The text is valid UTF-8:
  /// bytes that do not form a character (a cut multi-byte character) become U+FFFD, as
  /// `tokenizers` decodes them.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special = true) const;

  /// The id of `token` (an added token or a model vocabulary entry), if it has one.
  std::optional<std::int64_t> token_id(std::string_view token) const;

  /// How many special tokens the post-processor adds to a single text or a pair.
  std::size_t added_special_tokens(bool pair) const;

  struct impl;

 private:
  explicit tokenizer(std::shared_ptr<const impl> impl) : impl_{std::move(impl)} {}
  std::shared_ptr<const impl> impl_;
};

} // namespace arbiter::backends::tokenizers
