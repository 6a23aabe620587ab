#include "net/trainer_codec.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/json_reading.hpp"

namespace arbiter::net {

namespace {

using json = nlohmann::json;

/// End-of-sequence markers a decoded query may end with (Qwen/ChatML, GPT-2 family, Llama 2,
/// Llama 3, DeepSeek).
constexpr std::array<std::string_view, 9> end_markers = {
    "<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
    "<end_of_turn>", "<eos>",  // Gemma
    "<|end|>"};                // Phi-3

/// Placeholders a VLM processor repeats once per image or video patch in the query, where the
/// prompt has one.
constexpr std::array<std::string_view, 2> patch_pads = {"<|image_pad|>", "<|video_pad|>"};

bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view trim_right(std::string_view text) noexcept {
  while (!text.empty() && is_space(text.back())) {
    text.remove_suffix(1);
  }
  return text;
}

/// Whether `value` is JSON null (a trainer's way of leaving a field out).
bool is_null(ondemand::value& value) {
  ondemand::json_type type;
  return !value.type().get(type) && type == ondemand::json_type::null;
}

/// The text of a message's content: a string, or the text parts of a list joined by
/// newlines; anything else has none.
bool read_content_text(ondemand::value content, std::string& out, const std::string& field,
                       codec_error& err) {
  out.clear();
  ondemand::json_type type;
  if (!read_type(content, type, field, err)) {
    return false;
  }
  if (type == ondemand::json_type::string) {
    return read_string(content, out, field, err);
  }
  ondemand::array parts;
  if (type != ondemand::json_type::array || content.get_array().get(parts)) {
    return true;
  }
  return read_elements(parts, field, err, [&](ondemand::value element, const std::string& sub) {
    ondemand::object part;
    if (element.get_object().get(part)) {
      return true;  // not a text part
    }
    std::string text;
    bool has_text = false;
    for (auto f : part) {
      std::string_view key;
      ondemand::value value;
      if (!read_field(f, key, value, sub, err)) {
        return false;
      }
      ondemand::json_type part_type;
      if (key != "text" || value.type().get(part_type)
          || part_type != ondemand::json_type::string) {
        continue;
      }
      // A text that does not decode is refused, naming it, rather than dropped from the prompt.
      if (!read_string(value, text, field_path(sub, key), err)) {
        return false;
      }
      has_text = true;
    }
    if (has_text) {
      if (!out.empty()) {
        out += '\n';
      }
      out += text;
    }
    return true;
  });
}

/// Reads slime's `prompt` as a list of messages: `prompt` joins their texts by newlines and
/// `question` is the last user message's.
bool read_messages(ondemand::value value, std::string& prompt, std::string& question,
                   codec_error& err) {
  ondemand::array messages;
  if (value.get_array().get(messages)) {
    err = {refusal::invalid, "prompt", "prompt: expected a string or a list of messages"};
    return false;
  }
  return read_elements(messages, "prompt", err, [&](ondemand::value element,
                                                    const std::string& field) {
    auto refuse = [&] {
      err = {refusal::invalid, field, field + ": expected a message object with a string role"};
      return false;
    };
    ondemand::object message;
    if (element.get_object().get(message)) {
      return refuse();
    }
    std::string role;
    bool has_role = false;
    std::string text;
    auto read = [&](std::string_view key, ondemand::value& v) {
      if (key == "role") {
        std::string_view view;
        has_role = !v.get_string().get(view);
        role.assign(view);
      } else if (key == "content") {
        if (!read_content_text(v, text, field + ".content", err)) {
          return false;
        }
      }
      return true;
    };
    if (!read_fields(message, field, err, read)) {
      return false;
    }
    if (!has_role) {
      return refuse();
    }
    if (!prompt.empty()) {
      prompt += '\n';
    }
    prompt += text;
    if (role == "user") {
      question = text;
    }
    return true;
  });
}

/// The GRPO group of a trainer's sample that comes with no group of its own: its prompt (the
/// rollouts of one prompt are a group), hashed (FNV-1a, 64 bits); empty for no prompt.
std::string prompt_group(std::string_view prompt) {
  if (prompt.empty()) {
    return {};
  }
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : prompt) {
    h = (h ^ c) * 1099511628211ull;
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "prompt:";
  for (int shift = 60; shift >= 0; shift -= 4) {
    out.push_back(hex[(h >> shift) & 0xf]);
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

std::string percent_decode(std::string_view raw, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string value;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      value += static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
      i += 2;
    } else {
      value += plus_is_space && raw[i] == '+' ? ' ' : raw[i];
    }
  }
  return value;
}

namespace {

/// Calls `f(name, value)` for each parameter of `target`'s query, both percent-decoded, until
/// `f` returns false; false when it did.
template <class F>
bool each_query_parameter(std::string_view target, F&& f) {
  auto q = target.find('?');
  auto rest = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    auto pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    if (pair.empty()) {
      continue;
    }
    auto eq = pair.find('=');
    auto raw = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    auto key = percent_decode(pair.substr(0, eq), true);
    // A key is never a space, and base64 keys hold '+' (`openssl rand -base64`): in api_key a
    // '+' is itself.
    if (!f(key, percent_decode(raw, key != "api_key"))) {
      return false;
    }
  }
  return true;
}

/// False with `err` when `name` was given before in the URL: a server taking the first and a
/// proxy or log reader the last would disagree on `?reward=lexical&reward=judge`.
bool once(std::unordered_set<std::string>& seen, const std::string& name, codec_error& err) {
  if (!seen.insert(name).second) {
    err = {refusal::invalid, name, name + ": given twice in the URL"};
    return false;
  }
  return true;
}

} // namespace

std::optional<std::string> query_parameter(std::string_view target, std::string_view name) {
  std::optional<std::string> found;
  each_query_parameter(target, [&](const std::string& key, std::string value) {
    if (key != name) {
      return true;
    }
    found = std::move(value);
    return false;
  });
  return found;
}

bool refuse_query(std::string_view target, codec_error& err) {
  std::unordered_set<std::string> seen;
  return each_query_parameter(target, [&](const std::string& name, const std::string&) {
    if (name == "api_key") {
      return once(seen, name, err);
    }
    err = {refusal::invalid, name,
           "unknown query parameter '" + name
             + "': this route reads its options from the body (give " + name
             + " there); its URL takes only api_key"};
    return false;
  });
}

bool read_trainer_query(std::string_view target, const codec_context& ctx, size_t& priority,
                        std::chrono::milliseconds& deadline, codec_error& err) {
  std::unordered_set<std::string> seen;
  return each_query_parameter(target, [&](const std::string& name, const std::string& value) {
    if (!once(seen, name, err)) {
      return false;
    }
    if (name == "reward" || name == "api_key") {
      return true;
    }
    if (name == "priority") {
      return priority_named(value, ctx, priority, err);
    }
    if (name == "deadline_ms") {
      int64_t ms = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
      if (value.empty() || ec != std::errc{} || end != value.data() + value.size()) {
        err = {refusal::invalid, "deadline_ms",
               "deadline_ms: expected an integer number of milliseconds, got '" + value + "'"};
        return false;
      }
      return deadline_within(ms, ctx, deadline, err);
    }
    err = {refusal::invalid, name,
           "unknown query parameter '" + name
             + "' (this route takes reward, priority, deadline_ms and api_key)"};
    return false;
  });
}

namespace {

/// `text` with each run of one patch placeholder written once; `origin[j]` is where the
/// result's byte j came from in `text`.
std::string collapse_patch_pads(std::string_view text, std::vector<size_t>& origin) {
  std::string out;
  out.reserve(text.size());
  origin.clear();
  origin.reserve(text.size());
  std::string_view last;
  size_t i = 0;
  while (i < text.size()) {
    bool pad = false;
    for (auto p : patch_pads) {
      if (text.substr(i, p.size()) == p) {
        if (last != p) {
          out.append(p);
          for (size_t k = 0; k < p.size(); ++k) {
            origin.push_back(i + k);
          }
        }
        last = p;
        i += p.size();
        pad = true;
        break;
      }
    }
    if (!pad) {
      origin.push_back(i);
      out += text[i++];
      last = {};
    }
  }
  return out;
}

/// The length of the longest tail of `prompt` that `text` starts with (the prefix function of
/// `text`'s head, a separator, and `prompt`).
size_t prompt_tail_in_head(std::string_view prompt, std::string_view text) {
  auto head = text.substr(0, prompt.size());
  std::string s;
  s.reserve(head.size() + 1 + prompt.size());
  s.append(head).push_back('\0');
  s.append(prompt);
  std::vector<size_t> pi(s.size(), 0);
  for (size_t i = 1; i < s.size(); ++i) {
    size_t k = pi[i - 1];
    while (k > 0 && s[i] != s[k]) {
      k = pi[k - 1];
    }
    if (s[i] == s[k]) {
      ++k;
    }
    pi[i] = k;
  }
  return std::min(pi.back(), head.size());
}

/// A tail this long of the prompt at the query's start is the prompt, cut on the left.
constexpr size_t min_prompt_tail = 32;
/// Bytes the query may start with before that tail: a token decoded alone from the middle of
/// a character (U+FFFD) or a word.
constexpr size_t max_cut_token_bytes = 8;

} // namespace

std::string response_of(std::string_view query, std::string_view prompt) {
  const std::string_view original = query;
  std::string collapsed_query;
  std::string collapsed_prompt;
  std::vector<size_t> origin;
  const bool collapsed = prompt.find("_pad|>") != std::string_view::npos;
  if (collapsed) {
    std::vector<size_t> unused;
    collapsed_query = collapse_patch_pads(query, origin);
    collapsed_prompt = collapse_patch_pads(prompt, unused);
    query = collapsed_query;
    prompt = collapsed_prompt;
  }
  std::string_view response = query;
  if (!prompt.empty()) {
    if (query.substr(0, prompt.size()) == prompt) {
      response = query.substr(prompt.size());
    } else if (auto at = query.find(prompt); at != std::string_view::npos) {
      response = query.substr(at + prompt.size());
    } else {
      // Truncated on the left (OpenRLHF keeps the prompt's last max_prompt_length tokens):
      // the query starts with a tail of the prompt.
      for (size_t skip = 0; skip <= max_cut_token_bytes && skip < query.size(); ++skip) {
        auto tail = prompt_tail_in_head(prompt, query.substr(skip));
        if (tail >= min_prompt_tail) {
          response = query.substr(skip + tail);
          break;
        }
      }
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
  if (!collapsed || response.empty()) {
    return std::string{response};
  }
  // The same stretch of the query as sent (the fuzzer: a response with a run of pads in it
  // came back with the run collapsed, text the query did not hold).
  auto first = static_cast<size_t>(response.data() - query.data());
  auto from = origin[first];
  auto to = origin[first + response.size() - 1] + 1;
  return std::string{original.substr(from, to - from)};
}

bool decode_openrlhf_request(std::string_view body, const backends::reward_entry& reward,
                             const codec_context& ctx, std::vector<score_item>& out,
                             codec_error& err) {
  json_body_reader reader;
  ondemand::object root;
  if (!reader.open(body, root, err)) {
    return false;
  }
  std::vector<std::string> queries;
  std::vector<std::string> prompts;
  // Each sample's references: none for a null or "" label (OpenRLHF sends "" without
  // --data.label_key), one for a string or a number, several for a list.
  std::vector<std::vector<std::string>> labels;
  bool has_query = false;
  bool has_prompts = false;
  bool has_labels = false;
  auto read = [&](std::string_view key, ondemand::value& value) {
    // A null list counts as absent.
    if (key == "query") {
      queries.clear();
      has_query = !is_null(value);
      if (has_query && !read_string_list(value, queries, "query", err)) {
        return false;
      }
    } else if (key == "prompts") {
      prompts.clear();
      has_prompts = !is_null(value);
      if (has_prompts && !read_string_list(value, prompts, "prompts", err)) {
        return false;
      }
    } else if (key == "labels") {
      labels.clear();
      has_labels = !is_null(value);
      ondemand::array list;
      if (has_labels && value.get_array().get(list)) {
        err = {refusal::invalid, "labels", "labels: expected a list"};
        return false;
      }
      if (has_labels
          && !read_elements(list, "labels", err, [&](ondemand::value label,
                                                     const std::string& sub) {
               labels.emplace_back();
               if (is_null(label)) {
                 return true;
               }
               if (!read_references(label, labels.back(), sub, err)) {
                 return false;
               }
               if (labels.back().size() == 1 && labels.back()[0].empty()) {
                 labels.back().clear();
               }
               return true;
             })) {
        return false;
      }
    }
    return true;
  };
  if (!read_fields(root, "body", err, read) || !reader.finish(err, has_query, "query")) {
    return false;
  }
  if (queries.size() > ctx.max_batch_items) {
    err = {refusal::too_large, "query",
           "query: more than " + std::to_string(ctx.max_batch_items)
             + " items in one request (server.max_batch_items)"};
    return false;
  }
  auto same_length = [&](bool present, size_t size, const char* key) {
    if (present && size != queries.size()) {
      err = {refusal::invalid, key,
             std::string{key} + ": has " + std::to_string(size) + " entries for "
               + std::to_string(queries.size()) + " queries"};
      return false;
    }
    return true;
  };
  if (!same_length(has_prompts, prompts.size(), "prompts")
      || !same_length(has_labels, labels.size(), "labels")) {
    return false;
  }
  out.clear();
  out.reserve(queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    score_item item;
    const std::string prompt = prompts.empty() ? std::string{} : prompts[i];
    item.solution_str = response_of(queries[i], prompt);
    if (!labels.empty()) {
      item.ground_truth = std::move(labels[i]);
    }
    item.data_source = "openrlhf";
    item.extra_info = extra_info_for(prompt, prompt);
    item.group = prompt_group(prompt);
    if (!bind_reward(item, reward, "query[" + std::to_string(i) + "]", err)) {
      return false;
    }
    out.push_back(std::move(item));
  }
  return true;
}

std::string encode_openrlhf_response(const std::vector<item_result>& results,
                                     const failure_policy& policy,
                                     const std::vector<std::string>& groups,
                                     const std::vector<scheduler::group_summary>& summaries) {
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
  // Each sample's group as the scheduler knows it (members in other requests included: OpenRLHF
  // sends one sample per request); a sample with no group is a group of its own.
  auto group_of = [&](size_t i) {
    scheduler::group_summary own;
    if (i < groups.size() && !groups[i].empty()) {
      for (const auto& g : summaries) {
        if (g.group == groups[i]) {
          return g;
        }
      }
    }
    if (results[i].status != item_status::failed) {
      own.scored = 1;
      own.mean = results[i].score;
      own.zero_std = true;
    }
    return own;
  };
  std::vector<scheduler::group_summary> per_item;
  per_item.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    per_item.push_back(group_of(i));
  }
  auto per_sample = [&](const char* name, auto&& value_of) {
    out += ",\"";
    out += name;
    out += "\":[";
    for (size_t i = 0; i < per_item.size(); ++i) {
      if (i > 0) {
        out += ',';
      }
      append_json_number(out, value_of(per_item[i]));
    }
    out += ']';
  };
  using summary = scheduler::group_summary;
  per_sample("arbiter_group_scored", [](const summary& g) { return double(g.scored); });
  per_sample("arbiter_group_mean", [](const summary& g) { return g.mean; });
  per_sample("arbiter_group_std", [](const summary& g) { return g.std; });
  per_sample("arbiter_group_zero_std", [](const summary& g) { return g.zero_std ? 1.0 : 0.0; });
  out += "}}";
  return out;
}

bool decode_slime_request(std::string_view body, const backends::reward_entry& reward,
                          score_item& out, codec_error& err) {
  json_body_reader reader;
  ondemand::object root;
  if (!reader.open(body, root, err)) {
    return false;
  }
  out = score_item{};
  bool has_response = false;
  std::string prompt;
  std::string question;
  auto read = [&](std::string_view key, ondemand::value& value) {
    if (key == "response") {
      has_response = !is_null(value);
      if (has_response && !read_string(value, out.solution_str, "response", err)) {
        return false;
      }
    } else if (key == "prompt") {
      prompt.clear();
      question.clear();
      ondemand::json_type type;
      if (!read_type(value, type, "prompt", err)) {
        return false;
      }
      if (type == ondemand::json_type::string) {
        if (!read_string(value, prompt, "prompt", err)) {
          return false;
        }
        question = prompt;
      } else if (type != ondemand::json_type::null
                 && !read_messages(value, prompt, question, err)) {
        return false;
      }
    } else if (key == "label") {
      // null: no reference (rewards that need one fail the item).
      out.ground_truth.clear();
      if (!is_null(value)
          && !read_references(value, out.ground_truth, "label", err)) {
        return false;
      }
    }
    return true;
  };
  if (!read_fields(root, "body", err, read) || !reader.finish(err, has_response, "response")) {
    return false;
  }
  out.data_source = "slime";
  out.extra_info = extra_info_for(prompt, question);
  out.group = prompt_group(prompt);
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
