// Exact match: a port of `normalize_answer` and `exact_match_score` from the SQuAD v1.1
// official evaluation script, with Python 3 `str` semantics (str.lower, `re` word boundaries,
// str.split) reproduced on code points through utf8proc's character database.

#include "backends/cpu/exact_match.hpp"

#include <cstddef>
#include <string>
#include <string_view>

#include <utf8proc.h>

#include "backends/cpu/lexical.hpp"
#include "backends/cpu/python_str.hpp"

namespace arbiter::backends::cpu {
namespace {

/// Python's `string.punctuation`.
constexpr std::string_view ascii_punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

constexpr char32_t capital_sigma = 0x03A3;
constexpr char32_t small_sigma = 0x03C3;
constexpr char32_t small_final_sigma = 0x03C2;
constexpr char32_t capital_i_with_dot = 0x0130;
constexpr char32_t combining_dot_above = 0x0307;

utf8proc_category_t category_of(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

/// Unicode's Case_Ignorable property: general categories Mn, Me, Cf, Lm, Sk, plus the
/// characters whose Word_Break is MidLetter, MidNumLet or Single_Quote.
bool is_case_ignorable(char32_t c) {
  switch (category_of(c)) {
  case UTF8PROC_CATEGORY_MN:
  case UTF8PROC_CATEGORY_ME:
  case UTF8PROC_CATEGORY_CF:
  case UTF8PROC_CATEGORY_LM:
  case UTF8PROC_CATEGORY_SK:
    return true;
  default:
    break;
  }
  switch (c) {
  case 0x0027: // apostrophe
  case 0x002E: // full stop
  case 0x003A: // colon
  case 0x00B7: // middle dot
  case 0x0387: // Greek ano teleia
  case 0x055F: // Armenian abbreviation mark
  case 0x05F4: // Hebrew punctuation gershayim
  case 0x2018: // left single quotation mark
  case 0x2019: // right single quotation mark
  case 0x2024: // one dot leader
  case 0x2027: // hyphenation point
  case 0xFE13: // presentation form for vertical colon
  case 0xFE52: // small full stop
  case 0xFE55: // small colon
  case 0xFF07: // fullwidth apostrophe
  case 0xFF0E: // fullwidth full stop
  case 0xFF1A: // fullwidth colon
    return true;
  default:
    return false;
  }
}

/// Unicode's Cased property (Lowercase or Uppercase or Lt), approximated by the letter case
/// categories plus utf8proc's case predicates, which cover most Other_Lowercase/Uppercase.
bool is_cased(char32_t c) {
  switch (category_of(c)) {
  case UTF8PROC_CATEGORY_LU:
  case UTF8PROC_CATEGORY_LL:
  case UTF8PROC_CATEGORY_LT:
    return true;
  default:
    break;
  }
  const auto cp = static_cast<utf8proc_int32_t>(c);
  return utf8proc_islower(cp) != 0 || utf8proc_isupper(cp) != 0;
}

/// Python's final-sigma rule for U+03A3 at `text[i]`: final when preceded by a cased letter
/// and not followed by one (case-ignorable characters are skipped in both directions).
bool is_final_sigma(const std::u32string& text, std::size_t i) {
  std::size_t j = i;
  bool cased_before = false;
  while (j > 0) {
    --j;
    if (!is_case_ignorable(text[j])) {
      cased_before = is_cased(text[j]);
      break;
    }
  }
  if (!cased_before) {
    return false;
  }
  for (std::size_t k = i + 1; k < text.size(); ++k) {
    if (!is_case_ignorable(text[k])) {
      return !is_cased(text[k]);
    }
  }
  return true;
}

/// Python's `str.lower()`. utf8proc_tolower is the simple (one-to-one) mapping; Python uses
/// the full mapping of SpecialCasing.txt. The only unconditional multi-code-point lowercase
/// mapping there is U+0130 -> "i\u0307", and the only context-dependent one Python applies is
/// Final_Sigma; both are handled here explicitly.
std::u32string python_lower(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == capital_i_with_dot) {
      out.push_back(U'i');
      out.push_back(combining_dot_above);
    } else if (c == capital_sigma) {
      out.push_back(is_final_sigma(text, i) ? small_final_sigma : small_sigma);
    } else {
      out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

bool is_ascii_punctuation(char32_t c) {
  return c < 0x80 && ascii_punctuation.find(static_cast<char>(c)) != std::string_view::npos;
}

/// A word character for Python 3's `re` on `str`: `str.isalnum()` or '_'. isalnum is
/// isalpha (L*) or a numeric character (Nd, Nl, No).
bool is_word_char(char32_t c) {
  if (c == U'_') {
    return true;
  }
  switch (category_of(c)) {
  case UTF8PROC_CATEGORY_LU:
  case UTF8PROC_CATEGORY_LL:
  case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM:
  case UTF8PROC_CATEGORY_LO:
  case UTF8PROC_CATEGORY_ND:
  case UTF8PROC_CATEGORY_NL:
  case UTF8PROC_CATEGORY_NO:
    return true;
  default:
    return false;
  }
}

/// `re.sub(r'\b(a|an|the)\b', ' ', text)`. The text is already lower-cased; the alternatives
/// are tried in order at each position, as the regex engine does.
std::u32string remove_articles(const std::u32string& text) {
  static constexpr std::u32string_view articles[] = {U"a", U"an", U"the"};
  std::u32string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    // Every article starts with a word character, so the leading \b needs a non-word
    // character (or the start of the text) before it.
    const bool boundary_before = i == 0 || !is_word_char(text[i - 1]);
    std::size_t matched = 0;
    if (boundary_before) {
      for (const std::u32string_view article : articles) {
        const std::size_t end = i + article.size();
        if (end <= text.size() && std::u32string_view(text).substr(i, article.size()) == article &&
            (end == text.size() || !is_word_char(text[end]))) {
          matched = article.size();
          break;
        }
      }
    }
    if (matched != 0) {
      out.push_back(U' ');
      i += matched;
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

} // namespace

std::string normalize_answer(std::string_view text) {
  const std::u32string lowered = python_lower(decode_utf8(text));

  std::u32string without_punctuation;
  without_punctuation.reserve(lowered.size());
  for (const char32_t c : lowered) {
    if (!is_ascii_punctuation(c)) {
      without_punctuation.push_back(c);
    }
  }

  const std::u32string without_articles = remove_articles(without_punctuation);

  // " ".join(text.split())
  std::string out;
  out.reserve(text.size());
  bool in_word = false;
  for (const char32_t c : without_articles) {
    if (py::is_space(c)) {
      in_word = false;
      continue;
    }
    if (!in_word && !out.empty()) {
      out.push_back(' ');
    }
    in_word = true;
    append_utf8(out, c);
  }
  return out;
}

double exact_match(std::string_view prediction, std::string_view reference) {
  return normalize_answer(prediction) == normalize_answer(reference) ? 1.0 : 0.0;
}

} // namespace arbiter::backends::cpu
