#pragma once

// The pre-tokenizers of Hugging Face `tokenizers` that Arbiter's models use, on code points.
// Internal to backends/tokenizers.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace arbiter::backends::tokenizers {

/// The split regexes recognised in `Split` and `ByteLevel(use_regex=true)`, each matched by
/// hand with the semantics of the Oniguruma regex `tokenizers` compiles (alternatives tried in
/// order at each position, greedy with backtracking). Every input character is covered by
/// some alternative, so the matches partition the text.
enum class split_regex {
  /// Qwen2/Qwen3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
  ///              | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,
  /// Llama 3: as qwen2 with \p{N}{1,3}.
  llama3,
  /// GPT-2 (ByteLevel's own): 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
  ///                          |\s+(?!\S)|\s+
  gpt2,
};

/// Which split_regex a `Split` pattern's regex source is, or false when it is none of them.
bool recognise_split_regex(std::string_view source, split_regex& out);

/// The matches of `which` in `text`, in order (Split's `Isolated` behaviour).
std::vector<std::u32string> split_isolated(std::u32string_view text, split_regex which);

/// BertPreTokenizer: split on whitespace (dropped), then isolate each punctuation character.
std::vector<std::u32string> split_bert(std::u32string_view text);

/// ByteLevel's byte-to-unicode mapping: each UTF-8 byte of `text` becomes one printable code
/// point (GPT-2's `bytes_to_unicode`).
std::u32string byte_level_map(std::u32string_view text);

/// The byte a code point of GPT-2's byte-level alphabet stands for, or nullopt.
std::optional<unsigned char> byte_level_unmap(char32_t c);

} // namespace arbiter::backends::tokenizers
