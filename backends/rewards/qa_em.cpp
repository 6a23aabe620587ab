#include "backends/rewards/qa_em.hpp"

#include <algorithm>

#include "backends/rewards/text_similarity.hpp"

namespace arbiter::backends::rewards {

namespace {

constexpr std::string_view user_open = "<|im_start|>user";
constexpr std::string_view turn_close = "<|im_end|>";
constexpr std::string_view question_label = "question:";

char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

/// The first position at or after `from` where `needle` (lower-case ASCII) occurs in `text`,
/// ignoring ASCII case; npos when it does not.
size_t find_ignoring_case(std::string_view text, std::string_view needle, size_t from = 0) {
  if (needle.size() > text.size()) {
    return std::string_view::npos;
  }
  for (size_t i = from; i + needle.size() <= text.size(); ++i) {
    size_t k = 0;
    while (k < needle.size() && ascii_lower(text[i + k]) == needle[k]) {
      ++k;
    }
    if (k == needle.size()) {
      return i;
    }
  }
  return std::string_view::npos;
}

/// `re.search(r"Question:\s*(.*?)(?:\n|END)", text, re.I | re.S)`'s group, stripped, where
/// END is the end of `text` or, when `stop_at_turn_close`, also "<|im_end|>" (any case).
std::optional<std::string> question_after_label(std::string_view text, bool stop_at_turn_close) {
  size_t label = find_ignoring_case(text, question_label);
  if (label == std::string_view::npos) {
    return std::nullopt;
  }
  size_t begin = label + question_label.size();
  while (size_t space = python_space_at(text, begin)) {
    begin += space;
  }
  size_t end = text.find('\n', begin);
  if (stop_at_turn_close) {
    end = std::min(end, find_ignoring_case(text, turn_close, begin));
  }
  if (end == std::string_view::npos) {
    end = text.size();
  }
  return std::string{python_strip(text.substr(begin, end - begin))};
}

std::optional<std::string> find_question(std::string_view rollout) {
  size_t open = find_ignoring_case(rollout, user_open);
  if (open != std::string_view::npos) {
    size_t body = open + user_open.size();
    size_t close = find_ignoring_case(rollout, turn_close, body);
    if (close != std::string_view::npos) {
      return question_after_label(rollout.substr(body, close - body), false);
    }
  }
  return question_after_label(rollout, true);
}

/// The stripped texts of `re.findall(open + "(.*?)" + close, text, re.S)`.
std::vector<std::string_view> tagged_blocks(std::string_view text, std::string_view open,
                                            std::string_view close) {
  std::vector<std::string_view> blocks;
  size_t pos = 0;
  while (true) {
    size_t start = text.find(open, pos);
    if (start == std::string_view::npos) {
      break;
    }
    start += open.size();
    size_t end = text.find(close, start);
    if (end == std::string_view::npos) {
      break;
    }
    blocks.push_back(python_strip(text.substr(start, end - start)));
    pos = end + close.size();
  }
  return blocks;
}

bool reads_and(std::string_view block) {
  return block.size() == 3 && ascii_lower(block[0]) == 'a' && ascii_lower(block[1]) == 'n'
         && ascii_lower(block[2]) == 'd';
}

} // namespace

search_rollout parse_search_rollout(std::string_view solution_str) {
  search_rollout out;
  out.question = find_question(solution_str);
  for (auto block : tagged_blocks(solution_str, "<information>", "</information>")) {
    if (!block.empty() && !reads_and(block)) {
      out.information.emplace_back(block);
    }
  }
  auto answers = tagged_blocks(solution_str, "<answer>", "</answer>");
  if (!answers.empty()) {
    out.answer = std::string{answers.back()};
  }
  return out;
}

std::string join_information(const std::vector<std::string>& blocks) {
  std::string out;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i > 0) {
      out += '\n';
    }
    out += blocks[i];
  }
  return out;
}

} // namespace arbiter::backends::rewards
