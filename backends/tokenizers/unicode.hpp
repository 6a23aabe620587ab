#pragma once

// Code points and the character classes the Hugging Face `tokenizers` pipeline tests, looked up
// in utf8proc's character database. Internal to backends/tokenizers.

#include <string>
#include <string_view>

namespace arbiter::backends::tokenizers::unicode {

/// Decodes UTF-8. Each byte of an invalid sequence becomes U+FFFD (a Python `str`, which the
/// reference tokenizes, cannot hold invalid UTF-8, so no reference behaviour is lost).
std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view text);
/// `utf8` with each maximal invalid subsequence replaced by one U+FFFD, as Rust's
/// `String::from_utf8_lossy` (what `tokenizers`' byte-level decoder returns) and Python's
/// `bytes.decode("utf-8", "replace")` do. Valid UTF-8 comes back unchanged.
std::string to_valid_utf8(std::string_view utf8);
void append_utf8(std::string& out, char32_t c);

/// Rust's `char::is_whitespace` and Oniguruma's `\s`: the Unicode White_Space property.
bool is_whitespace(char32_t c);
/// `\p{L}`: Lu, Ll, Lt, Lm, Lo.
bool is_letter(char32_t c);
/// `\p{N}`: Nd, Nl, No.
bool is_number(char32_t c);
/// Mn (what BertNormalizer's strip_accents removes).
bool is_mark_nonspacing(char32_t c);
/// Mn, Mc or Me (what the StripAccents normalizer removes).
bool is_mark(char32_t c);
/// BertPreTokenizer's punctuation: ASCII punctuation (symbols such as `$` and `+` included)
/// or any P* category.
bool is_bert_punctuation(char32_t c);
/// BertNormalizer's control characters: Cc, Cf or Co (the `unicode_categories` crate's
/// `is_other`), except tab, newline and carriage return.
bool is_bert_control(char32_t c);
/// BertNormalizer's "Chinese character": the CJK Unified Ideographs blocks.
bool is_cjk_ideograph(char32_t c);
/// `\w` of Rust's regex crate (letters, marks, decimal digits, connector punctuation), which
/// decides `single_word` added tokens.
bool is_word_char(char32_t c);

enum class normal_form { nfc, nfd, nfkc, nfkd };
std::u32string normalize(std::u32string_view text, normal_form form);
/// Rust's per-character `char::to_lowercase` (no final-sigma context).
std::u32string to_lower(std::u32string_view text);

} // namespace arbiter::backends::tokenizers::unicode
