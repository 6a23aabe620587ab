#include "net/trainer_codec.hpp"

#include <array>

#include <nlohmann/json.hpp>

#include "net/json_body.hpp"

namespace arbiter::net {

namespace {

using json = nlohmann::json;

/// End-of-sequence markers a decoded query may end with (Qwen/ChatML, GPT-2 family, Llama 2,
/// Llama 3, DeepSeek).
constexpr std::array<std::string_view, 6> end_markers = {
    "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>"};

bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view trim_right(std::string_view text) noexcept {
  while (!text.empty() && is_space(text.back())) {
    text.remove_suffix(1);
  }
  return text;
}


/// Reads `doc[key]` as a list of strings; an absent key fails when `required`.
bool string_list(const json& doc, const char* key, bool required, std::vector<std::string>& out,
                 codec_error& err) {
  auto found = doc.find(key);
  if (found == doc.end() || found->is_null()) {
    if (required) {
      err = {400, key, std::string{key} + ": required"};
      return false;
    }
    return true;
  }
  if (!found->is_array()) {
    err = {400, key, std::string{key} + ": expected a list of strings"};
    return false;
  }
  for (size_t i = 0; i < found->size(); ++i) {
    const auto& v = (*found)[i];
    if (!v.is_string()) {
      auto field = std::string{key} + "[" + std::to_string(i) + "]";
      err = {400, field, field + ": expected a string"};
      return false;
    }
    out.push_back(v.get<std::string>());
  }
  return true;
}

/// The text of a message's content: a string, or the text parts of a list.
std::string content_text(const json& content) {
  if (content.is_string()) {
    return content.get<std::string>();
  }
  std::string out;
  if (content.is_array()) {
    for (const auto& part : content) {
      auto text = part.is_object() ? part.find("text") : part.end();
      if (part.is_object() && text != part.end() && text->is_string()) {
        if (!out.empty()) {
          out += '\n';
        }
        out += text->get<std::string>();
      }
    }
  }
  return out;
}

std::string extra_info_for(const std::string& prompt, const std::string& question) {
  json extra = json::object();
  extra["prompt"] = prompt;
  extra["question"] = question;
  return extra.dump(-1, ' ', false, json::error_handler_t::replace);
}

double score_or_policy(const item_result& r, const failure_policy& policy) {
  return r.status == item_status::failed ? policy.score.value_or(0.0) : r.score;
}

} // namespace

std::optional<std::string> query_parameter(std::string_view target, std::string_view name) {
  auto q = target.find('?');
  if (q == std::string_view::npos) {
    return std::nullopt;
  }
  auto rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    auto pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    auto eq = pair.find('=');
    if (pair.substr(0, eq) != name) {
      continue;
    }
    auto raw = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    std::string value;
    for (size_t i = 0; i < raw.size(); ++i) {
      auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0
          && hex(raw[i + 2]) >= 0) {
        value += static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
        i += 2;
      } else {
        value += raw[i] == '+' ? ' ' : raw[i];
      }
    }
    return value;
  }
  return std::nullopt;
}

std::string response_of(std::string_view query, std::string_view prompt) {
  std::string_view response = query;
  if (!prompt.empty()) {
    if (query.substr(0, prompt.size()) == prompt) {
      response = query.substr(prompt.size());
    } else if (auto at = query.find(prompt); at != std::string_view::npos) {
      response = query.substr(at + prompt.size());
    }
  }
  for (bool again = true; again;) {
    again = false;
    response = trim_right(response);
    for (auto marker : end_markers) {
      if (response.size() >= marker.size()
          && response.substr(response.size() - marker.size()) == marker) {
        response.remove_suffix(marker.size());
        again = true;
      }
    }
  }
  while (!response.empty() && is_space(response.front())) {
    response.remove_prefix(1);
  }
  return std::string{response};
}

bool decode_openrlhf_request(std::string_view body, const backends::reward_entry& reward,
                             const codec_context& ctx, std::vector<score_item>& out,
                             codec_error& err) {
  json doc;
  if (!parse_json_object(body, doc, err)) {
    return false;
  }
  std::vector<std::string> queries;
  std::vector<std::string> prompts;
  std::vector<std::string> labels;
  if (!string_list(doc, "query", true, queries, err)
      || !string_list(doc, "prompts", false, prompts, err)
      || !string_list(doc, "labels", false, labels, err)) {
    return false;
  }
  if (queries.size() > ctx.max_batch_items) {
    err = {413, "query",
           "query: more than " + std::to_string(ctx.max_batch_items)
             + " items in one request (server.max_batch_items)"};
    return false;
  }
  auto same_length = [&](const std::vector<std::string>& list, const char* key) {
    if (doc.contains(key) && !doc[key].is_null() && list.size() != queries.size()) {
      err = {400, key,
             std::string{key} + ": has " + std::to_string(list.size()) + " entries for "
               + std::to_string(queries.size()) + " queries"};
      return false;
    }
    return true;
  };
  if (!same_length(prompts, "prompts") || !same_length(labels, "labels")) {
    return false;
  }
  out.clear();
  out.reserve(queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    score_item item;
    const std::string prompt = prompts.empty() ? std::string{} : prompts[i];
    item.solution_str = response_of(queries[i], prompt);
    item.ground_truth.push_back(labels.empty() ? std::string{} : labels[i]);
    item.data_source = "openrlhf";
    item.extra_info = extra_info_for(prompt, prompt);
    if (!bind_reward(item, reward, "query[" + std::to_string(i) + "]", err)) {
      return false;
    }
    out.push_back(std::move(item));
  }
  return true;
}

std::string encode_openrlhf_response(const std::vector<item_result>& results,
                                     const failure_policy& policy) {
  std::string out = R"({"rewards":[)";
  auto list = [&](auto&& value_of) {
    for (size_t i = 0; i < results.size(); ++i) {
      if (i > 0) {
        out += ',';
      }
      append_json_number(out, value_of(results[i]));
    }
    out += ']';
  };
  auto score = [&](const item_result& r) { return score_or_policy(r, policy); };
  list(score);
  out += R"(,"scores":[)";
  list(score);
  out += R"(,"extra_logs":{"arbiter_failed":[)";
  list([](const item_result& r) { return r.status == item_status::failed ? 1.0 : 0.0; });
  out += R"(,"arbiter_fallback":[)";
  list([](const item_result& r) { return r.status == item_status::fallback ? 1.0 : 0.0; });
  out += R"(,"arbiter_cached":[)";
  list([](const item_result& r) { return r.cached ? 1.0 : 0.0; });
  out += "}}";
  return out;
}

bool decode_slime_request(std::string_view body, const backends::reward_entry& reward,
                          score_item& out, codec_error& err) {
  json doc;
  if (!parse_json_object(body, doc, err)) {
    return false;
  }
  auto response = doc.find("response");
  if (response == doc.end() || response->is_null()) {
    err = {400, "response", "response: required"};
    return false;
  }
  if (!response->is_string()) {
    err = {400, "response", "response: expected a string"};
    return false;
  }
  std::string prompt;
  std::string question;
  if (auto p = doc.find("prompt"); p != doc.end() && !p->is_null()) {
    if (p->is_string()) {
      prompt = question = p->get<std::string>();
    } else if (p->is_array()) {
      for (size_t i = 0; i < p->size(); ++i) {
        const auto& m = (*p)[i];
        auto field = "prompt[" + std::to_string(i) + "]";
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
          err = {400, field, field + ": expected a message object with a string role"};
          return false;
        }
        auto text = m.contains("content") ? content_text(m["content"]) : std::string{};
        if (!prompt.empty()) {
          prompt += '\n';
        }
        prompt += text;
        if (m["role"] == "user") {
          question = text;
        }
      }
    } else {
      err = {400, "prompt", "prompt: expected a string or a list of messages"};
      return false;
    }
  }
  out = score_item{};
  out.solution_str = response->get<std::string>();
  if (auto label = doc.find("label"); label != doc.end() && !label->is_null()) {
    if (label->is_string()) {
      out.ground_truth.push_back(label->get<std::string>());
    } else if (label->is_number() || label->is_boolean()) {
      out.ground_truth.push_back(label->dump());
    } else if (label->is_array()) {
      for (size_t i = 0; i < label->size(); ++i) {
        if (!(*label)[i].is_string()) {
          auto field = "label[" + std::to_string(i) + "]";
          err = {400, field, field + ": expected a string"};
          return false;
        }
        out.ground_truth.push_back((*label)[i].get<std::string>());
      }
    } else {
      err = {400, "label", "label: expected a string, a number, a list of strings or null"};
      return false;
    }
  }
  out.data_source = "slime";
  out.extra_info = extra_info_for(prompt, question);
  return bind_reward(out, reward, "body", err);
}

std::string encode_slime_response(const item_result& result, const std::string& key,
                                  const failure_policy& policy) {
  std::string out;
  double score = score_or_policy(result, policy);
  if (key.empty()) {
    append_json_number(out, score);
    return out;
  }
  out += '{';
  append_json_string(out, key);
  out += ':';
  append_json_number(out, score);
  out += R"(,"status":)";
  append_json_string(out, to_string(result.status));
  out += R"(,"source":)";
  append_json_string(out, result.source);
  out += R"(,"error":)";
  append_json_string(out, result.error);
  out += '}';
  return out;
}

} // namespace arbiter::net
