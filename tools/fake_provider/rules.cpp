#include "tools/fake_provider/rules.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

namespace arbiter::fake_provider {

namespace {

std::set<std::string> token_set(std::string_view text) {
  auto words = tokenize(text);
  return {words.begin(), words.end()};
}

std::string lower(std::string_view text) {
  std::string out{text};
  for (auto& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string trim(std::string_view text) {
  auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) {
    return {};
  }
  auto end = text.find_last_not_of(" \t\r\n");
  return std::string{text.substr(begin, end - begin + 1)};
}

bool has_negation(std::string_view text) {
  static const std::set<std::string> negations{"not",    "no",      "never", "none", "nobody",
                                               "nothing", "cannot", "nor",   "without"};
  for (const auto& word : tokenize(text)) {
    if (negations.count(word) != 0) {
      return true;
    }
  }
  // "isn't", "don't": tokenize splits them into "isn" "t".
  return lower(text).find("n't") != std::string::npos;
}

constexpr std::array<const char*, 32> vocabulary{
  "the",    "model",  "answer", "is",     "a",      "of",     "reward", "value",
  "signal", "and",    "with",   "token",  "score",  "to",     "in",     "result",
  "judge",  "good",   "this",   "that",   "more",   "less",   "step",   "final",
  "proof",  "it",     "holds",  "true",   "for",    "each",   "case",   "here"};

}  // namespace

std::uint64_t fnv1a(std::string_view text, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::vector<std::string> tokenize(std::string_view text) {
  std::vector<std::string> words;
  std::string current;
  for (unsigned char c : text) {
    if (std::isalnum(c) != 0) {
      current.push_back(static_cast<char>(std::tolower(c)));
    } else if (!current.empty()) {
      words.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) {
    words.push_back(std::move(current));
  }
  return words;
}

std::size_t count_words(std::string_view text) {
  std::size_t count = 0;
  bool in_word = false;
  for (unsigned char c : text) {
    bool space = std::isspace(c) != 0;
    if (!space && !in_word) {
      ++count;
    }
    in_word = !space;
  }
  return count;
}

std::string_view first_words(std::string_view text, std::size_t n) {
  if (n == 0) {
    return text.substr(0, 0);
  }
  std::size_t count = 0;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    bool space = std::isspace(static_cast<unsigned char>(text[i])) != 0;
    if (space && in_word && count == n) {
      return text.substr(0, i);
    }
    if (!space && !in_word) {
      ++count;
    }
    in_word = !space;
  }
  return text;
}

double jaccard(std::string_view a, std::string_view b) {
  auto sa = token_set(a);
  auto sb = token_set(b);
  if (sa.empty() && sb.empty()) {
    return 1.0;
  }
  std::size_t common = 0;
  for (const auto& word : sa) {
    common += sb.count(word);
  }
  return static_cast<double>(common) / static_cast<double>(sa.size() + sb.size() - common);
}

double containment(std::string_view part, std::string_view whole) {
  auto sp = token_set(part);
  if (sp.empty()) {
    return 1.0;
  }
  auto sw = token_set(whole);
  std::size_t found = 0;
  for (const auto& word : sp) {
    found += sw.count(word);
  }
  return static_cast<double>(found) / static_cast<double>(sp.size());
}

std::vector<float> embed(std::string_view text, std::size_t dim) {
  std::vector<double> acc(std::max<std::size_t>(dim, 1), 0.0);
  std::string padded = " ";
  bool last_space = true;
  for (unsigned char c : text) {
    if (std::isspace(c) != 0) {
      if (!last_space) {
        padded.push_back(' ');
      }
      last_space = true;
    } else {
      padded.push_back(static_cast<char>(std::tolower(c)));
      last_space = false;
    }
  }
  if (!last_space) {
    padded.push_back(' ');
  }
  for (std::size_t i = 0; i + 3 <= padded.size(); ++i) {
    auto h = fnv1a(std::string_view{padded}.substr(i, 3));
    double sign = ((h >> 63) != 0) ? -1.0 : 1.0;
    acc[h % acc.size()] += sign;
  }
  double norm = 0;
  for (double v : acc) {
    norm += v * v;
  }
  std::vector<float> out(acc.size(), 0.0f);
  if (norm == 0) {
    out[0] = 1.0f;
    return out;
  }
  norm = std::sqrt(norm);
  for (std::size_t i = 0; i < acc.size(); ++i) {
    out[i] = static_cast<float>(acc[i] / norm);
  }
  return out;
}

judge_sections find_sections(std::string_view text) {
  judge_sections out;
  auto low = lower(text);
  auto ref = low.rfind("reference:");
  auto cand = low.rfind("candidate:");
  auto section = [&](std::size_t start, std::size_t label_len, std::size_t other) {
    auto begin = start + label_len;
    auto end = (other != std::string::npos && other > start) ? other : text.size();
    return trim(text.substr(begin, end - begin));
  };
  if (ref != std::string::npos) {
    out.has_reference = true;
    out.reference = section(ref, 10, cand);
  }
  if (cand != std::string::npos) {
    out.has_candidate = true;
    out.candidate = section(cand, 10, ref);
  }
  return out;
}

std::string format_reward(double reward) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "REWARD: %.3f", reward);
  return buf.data();
}

std::vector<std::string> completion_words(std::string_view prompt, std::size_t count) {
  std::vector<std::string> words;
  words.reserve(count);
  auto h = fnv1a(prompt);
  for (std::size_t i = 0; i < count; ++i) {
    h = fnv1a(std::to_string(i), h);
    words.emplace_back(vocabulary[h % vocabulary.size()]);
  }
  return words;
}

std::vector<std::string> sample_words(std::string_view prompt, std::optional<std::uint64_t> seed,
                                      std::size_t choice, std::size_t count) {
  if (!seed && choice == 0) {
    return completion_words(prompt, count);
  }
  auto source = [&](std::size_t j) {
    std::string out{prompt};
    out += '\x1f';
    if (seed) {
      out += "seed=" + std::to_string(*seed) + ";";
    }
    out += "choice=" + std::to_string(j);
    return out;
  };
  auto words = completion_words(source(choice), count);
  if (choice > 0 && !words.empty()) {
    auto first = seed ? completion_words(source(0), 1) : completion_words(prompt, 1);
    auto at = std::find(vocabulary.begin(), vocabulary.end(), first.front()) - vocabulary.begin();
    words.front() = vocabulary[(static_cast<std::size_t>(at) + choice) % vocabulary.size()];
  }
  return words;
}

double token_logprob(std::string_view context, std::string_view token, std::size_t position) {
  auto h = fnv1a(token, fnv1a(std::to_string(position), fnv1a(context)));
  return -static_cast<double>(h % 1000) / 2000.0;
}

std::vector<std::string> split_tokens(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  for (char c : text) {
    if (c == ' ' && !current.empty() && current.back() != ' ') {
      out.push_back(std::move(current));
      current.clear();
    }
    current.push_back(c);
  }
  if (!current.empty()) {
    out.push_back(std::move(current));
  }
  return out;
}

nli_scores nli(std::string_view premise, std::string_view hypothesis) {
  double c = containment(hypothesis, premise);
  bool mismatch = has_negation(premise) != has_negation(hypothesis);
  double le = mismatch ? -3.0 : 6.0 * c - 3.0;
  double ln = 0.0;
  double lc = mismatch ? 6.0 * c - 1.0 : -2.0;
  double top = std::max({le, ln, lc});
  double ee = std::exp(le - top);
  double en = std::exp(ln - top);
  double ec = std::exp(lc - top);
  double sum = ee + en + ec;
  return {ee / sum, en / sum, ec / sum};
}

info_gain compute_info_gain(std::string_view question, std::string_view context,
                            const std::vector<std::string>& answers) {
  info_gain out;
  if (answers.empty()) {
    return out;
  }
  std::string both = std::string{question} + " " + std::string{context};
  for (const auto& answer : answers) {
    out.with_context += containment(answer, both);
    out.without_context += containment(answer, question);
  }
  out.with_context /= static_cast<double>(answers.size());
  out.without_context /= static_cast<double>(answers.size());
  out.score = std::max(0.0, out.with_context - out.without_context);
  return out;
}

std::string go_duration(std::chrono::milliseconds duration) {
  auto ms = std::max<long long>(duration.count(), 0);
  if (ms == 0) {
    return "0s";
  }
  if (ms < 1000) {
    return std::to_string(ms) + "ms";
  }
  std::string out;
  auto hours = ms / 3'600'000;
  auto minutes = (ms / 60'000) % 60;
  auto millis = ms % 60'000;
  if (hours > 0) {
    out += std::to_string(hours) + "h";
  }
  if (hours > 0 || minutes > 0) {
    out += std::to_string(minutes) + "m";
  }
  out += std::to_string(millis / 1000);
  if (auto frac = millis % 1000; frac != 0) {
    std::array<char, 8> buf{};
    std::snprintf(buf.data(), buf.size(), "%03lld", frac);
    std::string digits = buf.data();
    while (!digits.empty() && digits.back() == '0') {
      digits.pop_back();
    }
    out += "." + digits;
  }
  out += "s";
  return out;
}

}  // namespace arbiter::fake_provider
