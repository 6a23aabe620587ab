#include "backends/remote/remote_codec.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace arbiter::backends::remote {

namespace {

using json = nlohmann::json;

constexpr std::string_view judge_kind = "judge";
constexpr std::string_view embedding_kind = "embedding";
constexpr std::string_view info_gain_kind = "info_gain";

/// How much of a body `bad_reply` quotes.
constexpr size_t bad_reply_quote_bytes = 120;
/// How much of a model's reply a per-item failure quotes.
constexpr size_t reply_quote_bytes = 80;
/// How much of a service's own per-item error text a failure keeps.
constexpr size_t service_error_bytes = 200;
/// How much of a non-JSON error body `error_message` keeps.
constexpr size_t error_body_bytes = 200;
/// How long a message taken from an error body's JSON may be.
constexpr size_t error_message_bytes = 500;

bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/// `text` with ASCII letters lower-cased; same length, so offsets carry over.
std::string ascii_lower(std::string_view text) {
  std::string out{text};
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

/// The first `max_bytes` bytes of `text`, with every byte that is not printable ASCII
/// replaced by '?' (the body may be anything, the result goes into logs and JSON).
std::string printable_prefix(std::string_view text, size_t max_bytes) {
  std::string out{text.substr(0, max_bytes)};
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      c = '?';
    }
  }
  return out;
}

/// At most `max_bytes` of `text` (valid UTF-8), cut on a code point boundary.
std::string_view utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) {
    return text;
  }
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return text.substr(0, cut);
}

/// `text`'s opening (at most `max_bytes`, cut on a code point boundary) in double quotes, with
/// control characters shown as spaces and "..." after the quote when something was cut.
std::string quote_opening(std::string_view text, size_t max_bytes) {
  auto head = utf8_prefix(text, max_bytes);
  std::string out = "\"";
  for (char c : head) {
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  out += '"';
  if (head.size() < text.size()) {
    out += "...";
  }
  return out;
}

/// A number for a message: "0.25", "8", "1e+300".
std::string format_number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

/// `value` serialized; invalid UTF-8 (which the ingress should already have refused) becomes
/// U+FFFD instead of an exception.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// Throws `bad_reply` with `problem` and the opening of `body`.
[[noreturn]] void reject(const std::string& problem, std::string_view body) {
  std::string what = problem + "; body: \"" + printable_prefix(body, bad_reply_quote_bytes) + "\"";
  if (body.size() > bad_reply_quote_bytes) {
    what += "...";
  }
  throw bad_reply{what};
}

item_outcome failure(std::string reason) {
  item_outcome out;
  out.code = errc::reward_failed;
  out.error = std::move(reason);
  return out;
}

item_outcome success(double score) {
  item_outcome out;
  out.score = score;
  return out;
}

/// The kind shared by every item of `items`; throws std::invalid_argument when `items` is
/// empty, holds a null item, or mixes kinds.
const std::string& batch_kind(const std::vector<shared_item>& items) {
  if (items.empty()) {
    throw std::invalid_argument{"remote batch is empty"};
  }
  for (const auto& item : items) {
    if (!item) {
      throw std::invalid_argument{"remote batch holds a null item"};
    }
  }
  const std::string& kind = items.front()->kind;
  for (const auto& item : items) {
    if (item->kind != kind) {
      throw std::invalid_argument{"remote batch mixes reward kinds '" + kind + "' and '"
                                  + item->kind + "'"};
    }
  }
  return kind;
}

/// Throws std::invalid_argument unless `api` computes `kind`.
void require_support(api_kind api, const std::string& kind) {
  if (!supports(api, kind)) {
    throw std::invalid_argument{"reward kind '" + kind + "' is not served by api '"
                                + to_string(api) + "'"};
  }
}

/// extra_info as an object; empty when absent or not a JSON object.
json parse_extra_info(const std::string& text) {
  if (text.empty()) {
    return json::object();
  }
  auto parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : json::object();
}

/// The first of `keys` that holds a string in `object`, else `fallback`.
std::string first_string(const json& object, std::initializer_list<const char*> keys,
                         std::string_view fallback) {
  for (const char* key : keys) {
    auto found = object.find(key);
    if (found != object.end() && found->is_string()) {
      return found->get<std::string>();
    }
  }
  return std::string{fallback};
}

// ---- requests ---------------------------------------------------------------------------

prepared_call prepare_judge(const endpoint_options& opts, const score_item& item) {
  auto prompt = judge_prompt(item);
  json body = json::object();
  if (!opts.model.empty()) {
    body["model"] = opts.model;
  }
  prepared_call call;
  call.estimated_tokens = estimate_prompt_tokens(prompt) + opts.max_tokens;
  if (opts.use_completions) {
    call.path = "/v1/completions";
    body["prompt"] = std::move(prompt);
  } else {
    call.path = "/v1/chat/completions";
    json message = {{"role", "user"}, {"content", std::move(prompt)}};
    body["messages"] = json::array();
    body["messages"].push_back(std::move(message));
    call.estimated_tokens += chat_message_overhead_tokens;
  }
  body["temperature"] = opts.temperature;
  body["top_p"] = opts.top_p;
  body["max_tokens"] = opts.max_tokens;
  body["n"] = 1;
  if (!opts.stop.empty()) {
    body["stop"] = opts.stop;
  }
  if (opts.enable_thinking && !opts.use_completions) {
    body["chat_template_kwargs"] = {{"enable_thinking", *opts.enable_thinking}};
  }
  call.body = dump(body);
  return call;
}

prepared_call prepare_embedding(api_kind api, const endpoint_options& opts,
                                const std::vector<shared_item>& items) {
  prepared_call call;
  json inputs = json::array();
  auto add = [&](const std::string& text) {
    inputs.push_back(text);
    call.estimated_tokens += estimate_prompt_tokens(text);
  };
  for (const auto& item : items) {
    input_span span;
    span.first = static_cast<uint32_t>(inputs.size());
    span.references = static_cast<uint32_t>(item->ground_truth.size());
    add(item->solution_str);
    for (const auto& reference : item->ground_truth) {
      add(reference);
    }
    call.spans.push_back(span);
  }
  call.input_count = static_cast<uint32_t>(inputs.size());
  json body = json::object();
  if (api == api_kind::openai) {
    call.path = "/v1/embeddings";
    if (!opts.model.empty()) {
      body["model"] = opts.model;
    }
    body["input"] = std::move(inputs);
  } else {
    call.path = "/embed";
    body["inputs"] = std::move(inputs);
  }
  call.body = dump(body);
  return call;
}

prepared_call prepare_info_gain(const std::vector<shared_item>& items) {
  prepared_call call;
  call.path = "/compute_info_gain";
  json list = json::array();
  for (const auto& item : items) {
    auto extra = parse_extra_info(item->extra_info);
    auto question = first_string(extra, {"question", "problem"}, "");
    auto context = first_string(extra, {"context"}, item->solution_str);
    call.estimated_tokens += estimate_prompt_tokens(question) + estimate_prompt_tokens(context);
    for (const auto& answer : item->ground_truth) {
      call.estimated_tokens += estimate_prompt_tokens(answer);
    }
    json entry = json::object();
    entry["question"] = std::move(question);
    entry["context"] = std::move(context);
    entry["answers"] = item->ground_truth;
    list.push_back(std::move(entry));
  }
  json body = json::object();
  body["items"] = std::move(list);
  call.body = dump(body);
  return call;
}

// ---- replies ----------------------------------------------------------------------------

item_outcome parse_judge(const json& doc, const endpoint_options& opts, std::string_view body) {
  if (!doc.is_object()) {
    reject("judge reply is not a JSON object", body);
  }
  auto choices = doc.find("choices");
  if (choices == doc.end() || !choices->is_array() || choices->empty()) {
    reject("judge reply has no choices", body);
  }
  const json& choice = choices->front();
  if (!choice.is_object()) {
    reject("judge reply's choices[0] is not an object", body);
  }
  const json* holder = &choice;
  const char* field = "text";
  if (!opts.use_completions) {
    auto message = choice.find("message");
    if (message == choice.end() || !message->is_object()) {
      reject("judge reply's choices[0] has no message object", body);
    }
    holder = &*message;
    field = "content";
  }
  auto content = holder->find(field);
  if (content == holder->end()) {
    reject(std::string{"judge reply's choices[0] has no "} + field, body);
  }
  if (content->is_null()) {
    auto refusal = holder->find("refusal");
    if (refusal != holder->end() && refusal->is_string()) {
      return failure("judge refused: " + quote_opening(refusal->get_ref<const std::string&>(),
                                                       reply_quote_bytes));
    }
    std::string reason = "judge reply has no " + std::string{field};
    auto finish = choice.find("finish_reason");
    if (finish != choice.end() && finish->is_string()) {
      reason += " (finish_reason " + finish->get<std::string>() + ")";
    }
    return failure(std::move(reason));
  }
  if (!content->is_string()) {
    reject(std::string{"judge reply's "} + field + " is not a string", body);
  }
  const auto& text = content->get_ref<const std::string&>();
  auto score = extract_judge_score(text);
  if (!score) {
    return failure("judge reply has no REWARD score: "
                   + quote_opening(text, reply_quote_bytes));
  }
  if (!(*score >= 0.0 && *score <= 1.0)) {
    return failure("judge score " + format_number(*score) + " outside [0, 1]: "
                   + quote_opening(text, reply_quote_bytes));
  }
  return success(*score);
}

/// `value` as a vector of numbers; throws bad_reply naming input `index` otherwise.
std::vector<double> to_vector(const json& value, size_t index, std::string_view body) {
  if (!value.is_array() || value.empty()) {
    reject("embedding " + std::to_string(index) + " is not a non-empty list of numbers", body);
  }
  std::vector<double> out;
  out.reserve(value.size());
  for (const auto& x : value) {
    if (!x.is_number()) {
      reject("embedding " + std::to_string(index) + " holds a value that is not a number", body);
    }
    out.push_back(x.get<double>());
  }
  return out;
}

std::vector<std::vector<double>> read_vectors(api_kind api, const json& doc, uint32_t expected,
                                              std::string_view body) {
  auto count_mismatch = [&](size_t got) {
    reject("embedding reply has " + std::to_string(got) + " vectors for "
             + std::to_string(expected) + " inputs",
           body);
  };
  std::vector<std::vector<double>> vectors(expected);
  if (api == api_kind::tei) {
    if (!doc.is_array()) {
      reject("embedding reply is not a list of vectors", body);
    }
    if (doc.size() != expected) {
      count_mismatch(doc.size());
    }
    for (size_t i = 0; i < doc.size(); ++i) {
      vectors[i] = to_vector(doc[i], i, body);
    }
    return vectors;
  }
  if (!doc.is_object()) {
    reject("embedding reply is not a JSON object", body);
  }
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_array()) {
    reject("embedding reply has no data list", body);
  }
  if (data->size() != expected) {
    count_mismatch(data->size());
  }
  std::vector<bool> seen(expected, false);
  for (const auto& entry : *data) {
    if (!entry.is_object()) {
      reject("embedding reply's data holds an entry that is not an object", body);
    }
    auto index = entry.find("index");
    if (index == entry.end() || !index->is_number_integer()) {
      reject("embedding reply's data entry has no integer index", body);
    }
    auto i = index->get<int64_t>();
    if (i < 0 || i >= static_cast<int64_t>(expected) || seen[static_cast<size_t>(i)]) {
      reject("embedding reply's data index " + std::to_string(i) + " is out of range or repeated",
             body);
    }
    seen[static_cast<size_t>(i)] = true;
    auto embedding = entry.find("embedding");
    if (embedding == entry.end()) {
      reject("embedding reply's data entry " + std::to_string(i) + " has no embedding", body);
    }
    vectors[static_cast<size_t>(i)] = to_vector(*embedding, static_cast<size_t>(i), body);
  }
  return vectors;
}

double norm(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) {
    sum += x * x;
  }
  return std::sqrt(sum);
}

std::vector<item_outcome> parse_embedding(api_kind api, const json& doc,
                                          const prepared_call& call,
                                          const std::vector<shared_item>& items,
                                          std::string_view body) {
  if (call.spans.size() != items.size()) {
    throw std::invalid_argument{"embedding call has " + std::to_string(call.spans.size())
                                + " spans for " + std::to_string(items.size()) + " items"};
  }
  for (const auto& span : call.spans) {
    if (uint64_t{span.first} + span.references >= call.input_count) {
      throw std::invalid_argument{"embedding call span lies outside its input list"};
    }
  }
  auto vectors = read_vectors(api, doc, call.input_count, body);
  std::vector<item_outcome> outcomes;
  outcomes.reserve(items.size());
  for (const auto& span : call.spans) {
    if (span.references == 0) {
      outcomes.push_back(failure("embedding needs at least one reference in ground_truth"));
      continue;
    }
    const auto& candidate = vectors[span.first];
    double candidate_norm = norm(candidate);
    if (candidate_norm == 0.0) {
      outcomes.push_back(failure("the embedding of solution_str is a zero vector"));
      continue;
    }
    std::optional<double> best;
    for (uint32_t r = 1; r <= span.references; ++r) {
      const auto& reference = vectors[span.first + r];
      if (reference.size() != candidate.size()) {
        reject("embeddings have different dimensions (" + std::to_string(candidate.size())
                 + " and " + std::to_string(reference.size()) + ")",
               body);
      }
      double reference_norm = norm(reference);
      if (reference_norm == 0.0) {
        continue;
      }
      double dot = 0.0;
      for (size_t i = 0; i < candidate.size(); ++i) {
        dot += candidate[i] * reference[i];
      }
      double cosine = std::clamp(dot / (candidate_norm * reference_norm), -1.0, 1.0);
      best = best ? std::max(*best, cosine) : cosine;
    }
    outcomes.push_back(best ? success(*best)
                            : failure("the embedding of every reference is a zero vector"));
  }
  return outcomes;
}

std::vector<item_outcome> parse_info_gain(const json& doc, const std::vector<shared_item>& items,
                                          std::string_view body) {
  if (!doc.is_object()) {
    reject("info gain reply is not a JSON object", body);
  }
  auto scores = doc.find("scores");
  if (scores == doc.end() || !scores->is_array()) {
    reject("info gain reply has no scores list", body);
  }
  if (scores->size() != items.size()) {
    reject("info gain reply has " + std::to_string(scores->size()) + " scores for "
             + std::to_string(items.size()) + " items",
           body);
  }
  const json* errors = nullptr;
  if (auto found = doc.find("errors"); found != doc.end() && found->is_array()) {
    errors = &*found;
  }
  std::vector<item_outcome> outcomes;
  outcomes.reserve(items.size());
  for (size_t i = 0; i < scores->size(); ++i) {
    const json& score = (*scores)[i];
    if (score.is_number()) {
      outcomes.push_back(success(score.get<double>()));
    } else if (score.is_null()) {
      std::string reason = "info gain service returned no score";
      if (errors != nullptr && i < errors->size() && (*errors)[i].is_string()) {
        reason += ": " + quote_opening((*errors)[i].get_ref<const std::string&>(),
                                       service_error_bytes);
      }
      outcomes.push_back(failure(std::move(reason)));
    } else {
      reject("info gain score " + std::to_string(i) + " is neither a number nor null", body);
    }
  }
  return outcomes;
}

/// Where a score starts after "REWARD" ends at `pos`: optional '*' / whitespace, ':' or '=',
/// optional '*' / whitespace / '['; then the number, or nullopt.
std::optional<double> score_after(std::string_view text, size_t pos) {
  while (pos < text.size() && (text[pos] == '*' || is_ascii_space(text[pos]))) {
    ++pos;
  }
  if (pos >= text.size() || (text[pos] != ':' && text[pos] != '=')) {
    return std::nullopt;
  }
  ++pos;
  while (pos < text.size()
         && (text[pos] == '*' || text[pos] == '[' || is_ascii_space(text[pos]))) {
    ++pos;
  }
  // [+-]? (digits [. digits*]? | . digits) ([eE] [+-]? digits)?
  size_t start = pos;
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    ++pos;
  }
  size_t digits = 0;
  while (pos < text.size() && is_digit(text[pos])) {
    ++pos;
    ++digits;
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && is_digit(text[pos])) {
      ++pos;
      ++digits;
    }
  }
  if (digits == 0) {
    return std::nullopt;
  }
  bool negative_exponent = false;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    size_t exp = pos + 1;
    if (exp < text.size() && (text[exp] == '+' || text[exp] == '-')) {
      negative_exponent = text[exp] == '-';
      ++exp;
    }
    if (exp < text.size() && is_digit(text[exp])) {
      while (exp < text.size() && is_digit(text[exp])) {
        ++exp;
      }
      pos = exp;
    } else {
      negative_exponent = false;
    }
  }
  bool negative = text[start] == '-';
  if (text[start] == '+' || text[start] == '-') {
    ++start;  // from_chars takes neither sign; '-' is applied below
  }
  double value = 0.0;
  auto [end, ec] = std::from_chars(text.data() + start, text.data() + pos, value);
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves `value` alone: a huge magnitude is infinite, a tiny one is zero.
    value = negative_exponent ? 0.0 : std::numeric_limits<double>::infinity();
  } else if (ec != std::errc{} || end != text.data() + pos) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

/// `reply` without its <think> blocks (see `extract_judge_score`).
std::string strip_think(std::string_view reply) {
  constexpr std::string_view open_tag = "<think>";
  constexpr std::string_view close_tag = "</think>";
  auto low = ascii_lower(reply);
  size_t pos = 0;
  auto first_open = low.find(open_tag);
  auto first_close = low.find(close_tag);
  if (first_close != std::string::npos
      && (first_open == std::string::npos || first_close < first_open)) {
    pos = first_close + close_tag.size();
  }
  std::string out;
  while (true) {
    auto open = low.find(open_tag, pos);
    if (open == std::string::npos) {
      out.append(reply.substr(pos));
      break;
    }
    out.append(reply.substr(pos, open - pos));
    auto close = low.find(close_tag, open + open_tag.size());
    if (close == std::string::npos) {
      break;  // unclosed: the rest is thinking
    }
    pos = close + close_tag.size();
  }
  return out;
}

/// The message of an error body's JSON, or empty when it has none of the known shapes.
std::string message_of(const json& doc) {
  if (!doc.is_object()) {
    return {};
  }
  if (auto error = doc.find("error"); error != doc.end()) {
    if (error->is_string()) {
      return error->get<std::string>();
    }
    if (error->is_object()) {
      auto message = error->find("message");
      if (message != error->end() && message->is_string()) {
        return message->get<std::string>();
      }
    }
  }
  if (auto message = doc.find("message"); message != doc.end() && message->is_string()) {
    return message->get<std::string>();
  }
  auto detail = doc.find("detail");
  if (detail == doc.end()) {
    return {};
  }
  if (detail->is_string()) {
    return detail->get<std::string>();
  }
  if (!detail->is_array()) {
    return {};
  }
  std::string out;
  for (const auto& entry : *detail) {
    std::string part;
    if (entry.is_string()) {
      part = entry.get<std::string>();
    } else if (entry.is_object()) {
      auto msg = entry.find("msg");
      if (msg == entry.end() || !msg->is_string()) {
        continue;
      }
      auto loc = entry.find("loc");
      if (loc != entry.end() && loc->is_array() && !loc->empty()) {
        for (const auto& step : *loc) {
          if (!part.empty()) {
            part += '.';
          }
          part += step.is_string() ? step.get<std::string>() : dump(step);
        }
        part += ": ";
      }
      part += msg->get<std::string>();
    }
    if (!part.empty()) {
      out += out.empty() ? part : "; " + part;
    }
  }
  return out;
}

} // namespace

const std::string_view default_judge_template =
  "You are grading a candidate solution against a reference solution.\n"
  "Reply with your reasoning, then a final line of the form \"REWARD: <score>\" where <score> "
  "is a number between 0 and 1 (1 = fully correct).\n"
  "\n"
  "Problem: {PROBLEM}\n"
  "Reference: {REFERENCE_SOLUTION}\n"
  "Candidate: {CANDIDATE_SOLUTION}";

std::optional<api_kind> parse_api_kind(std::string_view name) {
  for (auto k : {api_kind::openai, api_kind::tei, api_kind::ig_service}) {
    if (name == to_string(k)) {
      return k;
    }
  }
  return std::nullopt;
}

const char* to_string(api_kind k) noexcept {
  switch (k) {
    case api_kind::openai:
      return "openai";
    case api_kind::tei:
      return "tei";
    case api_kind::ig_service:
      return "ig_service";
  }
  return "unknown";
}

uint64_t estimate_prompt_tokens(std::string_view text) noexcept {
  uint64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = is_ascii_space(c);
    if (!space && !in_word) {
      ++words;
    }
    in_word = !space;
  }
  uint64_t thirds = (uint64_t{text.size()} + 2) / 3;
  return std::max(words, thirds);
}

std::string judge_prompt(const score_item& item) {
  auto extra = parse_extra_info(item.extra_info);
  // Fill from the last placeholder to the first, so each `find` hits the template's own
  // placeholder and never one inside an item's text.
  std::string prompt{default_judge_template};
  auto fill = [&prompt](std::string_view placeholder, std::string_view value) {
    auto pos = prompt.find(placeholder);
    prompt.replace(pos, placeholder.size(), value);
  };
  fill("{CANDIDATE_SOLUTION}", item.solution_str);
  fill("{REFERENCE_SOLUTION}", item.ground_truth.empty() ? std::string_view{}
                                                          : item.ground_truth.front());
  fill("{PROBLEM}", first_string(extra, {"problem", "question"}, ""));
  return prompt;
}

bool supports(api_kind api, std::string_view reward_kind) noexcept {
  switch (api) {
    case api_kind::openai:
      return reward_kind == judge_kind || reward_kind == embedding_kind;
    case api_kind::tei:
      return reward_kind == embedding_kind;
    case api_kind::ig_service:
      return reward_kind == info_gain_kind;
  }
  return false;
}

prepared_call prepare_call(api_kind api, const endpoint_options& opts,
                           const std::vector<shared_item>& items) {
  const std::string& kind = batch_kind(items);
  require_support(api, kind);
  if (kind == judge_kind) {
    if (items.size() != 1) {
      throw std::invalid_argument{"a judge call carries one item, not "
                                  + std::to_string(items.size())};
    }
    return prepare_judge(opts, *items.front());
  }
  if (kind == embedding_kind) {
    return prepare_embedding(api, opts, items);
  }
  return prepare_info_gain(items);
}

std::vector<item_outcome> parse_reply(api_kind api, const endpoint_options& opts,
                                      const prepared_call& call,
                                      const std::vector<shared_item>& items,
                                      std::string_view body) {
  const std::string& kind = batch_kind(items);
  require_support(api, kind);
  auto doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    reject(std::string{"reply to "} + (call.path.empty() ? "the call" : call.path)
             + " is not valid JSON",
           body);
  }
  try {
    if (kind == judge_kind) {
      if (items.size() != 1) {
        throw std::invalid_argument{"a judge call carries one item, not "
                                    + std::to_string(items.size())};
      }
      return {parse_judge(doc, opts, body)};
    }
    if (kind == embedding_kind) {
      return parse_embedding(api, doc, call, items, body);
    }
    return parse_info_gain(doc, items, body);
  } catch (const json::exception& e) {
    // Every access above checks its type first; this is a guard, not a path.
    reject(std::string{"reply has an unexpected shape ("} + e.what() + ")", body);
  }
}

std::string error_message(std::string_view body) noexcept {
  try {
    auto first = std::find_if(body.begin(), body.end(), [](char c) { return !is_ascii_space(c); });
    if (first == body.end()) {
      return "(empty body)";
    }
    auto doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded()) {
      auto message = message_of(doc);
      if (!message.empty()) {
        return std::string{utf8_prefix(message, error_message_bytes)};
      }
    }
    return printable_prefix(body, error_body_bytes);
  } catch (...) {
    return {};
  }
}

std::optional<double> extract_judge_score(std::string_view reply) {
  constexpr std::string_view label = "reward";
  auto text = strip_think(reply);
  auto low = ascii_lower(text);
  for (size_t pos = low.rfind(label); pos != std::string::npos;
       pos = pos == 0 ? std::string::npos : low.rfind(label, pos - 1)) {
    if (pos > 0 && is_ascii_letter(text[pos - 1])) {
      continue;
    }
    if (auto score = score_after(text, pos + label.size())) {
      return score;
    }
  }
  return std::nullopt;
}

double entailment_probability(const nlohmann::json& labels) {
  if (!labels.is_array()) {
    reject("NLI result is not a list of labels", dump(labels));
  }
  for (const auto& entry : labels) {
    if (!entry.is_object()) {
      reject("NLI result holds an entry that is not an object", dump(labels));
    }
    auto label = entry.find("label");
    if (label == entry.end() || !label->is_string()) {
      continue;
    }
    auto name = ascii_lower(label->get_ref<const std::string&>());
    if (name != "entailment" && name != "entail") {
      continue;
    }
    auto score = entry.find("score");
    if (score == entry.end() || !score->is_number()) {
      reject("NLI entailment entry has no numeric score", dump(labels));
    }
    return score->get<double>();
  }
  reject("NLI result has no entailment label", dump(labels));
}

} // namespace arbiter::backends::remote
