#include "net/openai_codec.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "actors/source_capabilities.hpp"
#include "net/json_body.hpp"

namespace arbiter::net {

namespace {

using json = nlohmann::json;

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// `doc[key]` when present and not null.
const json* field(const json& doc, const char* key) {
  auto found = doc.find(key);
  return found == doc.end() || found->is_null() ? nullptr : &*found;
}

/// `doc[key]`; null with "KEY: required" in `err` when it is absent or null.
const json* required(const json& doc, const char* key, codec_error& err) {
  const json* v = field(doc, key);
  if (v == nullptr) {
    err = codec_error::missing(key);
  }
  return v;
}

/// A boolean `doc[key]` into `out` when present; false with "WHERE: expected a boolean" when
/// it is not one (`where` defaults to the key).
bool read_flag(const json& doc, const char* key, std::optional<bool>& out, codec_error& err,
               const std::string& where = {}) {
  const json* v = field(doc, key);
  if (v == nullptr) {
    return true;
  }
  if (!v->is_boolean()) {
    auto name = where.empty() ? std::string{key} : where;
    err = {refusal::invalid, name, name + ": expected a boolean"};
    return false;
  }
  out = v->get<bool>();
  return true;
}

/// `doc[key]` into `out` when present: a number (`T` double) or an integer (`T` uint64_t) from
/// `min` to `max`; else "KEY: expected a number from MIN to MAX" (or "an integer").
template <class T>
bool read_in_range(const json& doc, const char* key, T min, T max, std::optional<T>& out,
                   codec_error& err) {
  const json* v = field(doc, key);
  if (v == nullptr) {
    return true;
  }
  bool ok = false;
  if constexpr (std::is_integral_v<T>) {
    ok = v->is_number_integer() && v->get<int64_t>() >= static_cast<int64_t>(min)
         && v->get<uint64_t>() <= max;
  } else {
    ok = v->is_number() && v->get<double>() >= min && v->get<double>() <= max;
  }
  if (!ok) {
    // Bounds as "2" and "0.5", not std::to_string's "2.000000".
    auto text = [](T x) {
      if constexpr (std::is_integral_v<T>) {
        return std::to_string(x);
      } else {
        return std::floor(x) == x ? std::to_string(static_cast<long long>(x)) : json(x).dump();
      }
    };
    err = {refusal::invalid, key,
           std::string{key} + (std::is_integral_v<T> ? ": expected an integer from "
                                                      : ": expected a number from ")
             + text(min) + " to " + text(max)};
    return false;
  }
  out = v->get<T>();
  return true;
}

bool read_number(const json& doc, const char* key, double min, double max,
                 std::optional<double>& out, codec_error& err) {
  return read_in_range(doc, key, min, max, out, err);
}

bool read_count(const json& doc, const char* key, uint64_t min, uint64_t max,
                std::optional<uint64_t>& out, codec_error& err) {
  return read_in_range(doc, key, min, max, out, err);
}

/// The embedding routes' `dimensions` (1 to 65536), 0 when absent.
bool read_dimensions(const json& doc, uint32_t& out, codec_error& err) {
  std::optional<uint64_t> dimensions;
  if (!read_count(doc, "dimensions", 1, 1u << 16, dimensions, err)) {
    return false;
  }
  out = static_cast<uint32_t>(dimensions.value_or(0));
  return true;
}

/// Arbiter's own `priority` and `deadline_ms`.
bool read_scheduling(const json& doc, const passthrough_context& pass, size_t& priority,
                     std::chrono::milliseconds& deadline, codec_error& err) {
  const codec_context& ctx = *pass.codec;
  priority = ctx.default_priority;
  deadline = pass.client_deadline.value_or(ctx.default_deadline);
  if (const json* p = field(doc, "priority")) {
    auto at = p->is_string() ? std::find(ctx.priorities.begin(), ctx.priorities.end(),
                                         p->get<std::string>())
                             : ctx.priorities.end();
    if (at == ctx.priorities.end()) {
      std::string names;
      for (const auto& name : ctx.priorities) {
        names += (names.empty() ? "" : ", ") + name;
      }
      err = {refusal::invalid, "priority", "priority: expected one of " + names};
      return false;
    }
    priority = static_cast<size_t>(at - ctx.priorities.begin());
  }
  std::optional<uint64_t> ms;
  if (!read_count(doc, "deadline_ms", 1, static_cast<uint64_t>(ctx.max_deadline.count()), ms,
                  err)) {
    return false;
  }
  if (ms) {
    deadline = std::chrono::milliseconds{static_cast<int64_t>(*ms)};
  }
  return true;
}

/// Resolves `model` for `capability`: empty routes to any source; a listed id to the sources
/// serving it; anything else is 404.
bool resolve_model(const json& doc, const passthrough_context& ctx, capability needed,
                   std::string& model, std::string& suffix, codec_error& err) {
  model.clear();
  suffix.clear();
  const json* m = field(doc, "model");
  if (m == nullptr) {
    return true;
  }
  if (!m->is_string()) {
    err = {refusal::invalid, "model", "model: expected a string"};
    return false;
  }
  model = m->get<std::string>();
  if (model.empty()) {
    return true;
  }
  std::string known;
  std::string away;
  for (const auto& entry : *ctx.models) {
    if (std::find(entry.capabilities.begin(), entry.capabilities.end(), needed)
        == entry.capabilities.end()) {
      continue;
    }
    if (!entry.away.empty()) {
      away = entry.id == model ? entry.away : away;
      continue;
    }
    if (entry.id == model) {
      suffix = actors::model_route_suffix(model);
      return true;
    }
    known += (known.empty() ? "'" : ", '") + entry.id + "'";
  }
  if (!away.empty()) {
    err = {refusal::model_away, "model",
           "model: '" + model + "' is served only by cluster nodes that are away (" + away
             + "); it is served again once one joins"};
    return false;
  }
  err = {refusal::unknown_model, "model",
         "model: '" + model + "' is not served here for " + std::string{name_of(needed)}
           + (known.empty() ? std::string{" (no source serves it)"}
                            : " (served: " + known + "; GET /v1/models lists them)")};
  return false;
}

/// Whether a field's value asks for nothing: `null` (OpenAI's and vLLM's "not set", which a
/// client serializing its unset fields sends), an empty list of tools, or a sampling field at
/// the value every server takes when it is absent.
bool asks_nothing(const std::string& key, const json& value) {
  if (value.is_null()) {
    return true;
  }
  if (key == "frequency_penalty" || key == "presence_penalty") {
    return value.is_number() && value.get<double>() == 0.0;
  }
  if (key == "repetition_penalty") {
    return value.is_number() && value.get<double>() == 1.0;
  }
  if (key == "min_p") {
    return value.is_number() && value.get<double>() == 0.0;
  }
  if (key == "top_k") {
    return value.is_number_integer() && (value.get<int64_t>() == -1 || value.get<int64_t>() == 0);
  }
  if (key == "logit_bias") {
    return value.is_object() && value.empty();
  }
  if (key == "tools" || key == "functions") {
    return value.is_array() && value.empty();
  }
  if (key == "tool_choice" || key == "function_call") {
    return value.is_string() && value.get<std::string>() == "none";
  }
  return false;
}

/// Fields a chat request may carry that this route cannot honour.
bool refuse_unsupported_chat(const json& doc, codec_error& err) {
  if (const json* s = field(doc, "stream"); s != nullptr && !(s->is_boolean() && !s->get<bool>())) {
    err = {refusal::invalid, "stream", "stream: streaming is not supported; send stream: false"};
    return false;
  }
  for (const char* key : {"tools", "tool_choice", "functions", "function_call"}) {
    // An empty list of tools asks for none (a client that always sends the field), and so
    // does a tool_choice of "none".
    if (const json* t = field(doc, key); t != nullptr && !asks_nothing(key, *t)) {
      err = {refusal::invalid, key, std::string{key} + ": tool calls are not supported"};
      return false;
    }
  }
  if (const json* f = field(doc, "response_format")) {
    if (!f->is_object() || f->value("type", std::string{}) != "text") {
      err = {refusal::invalid, "response_format", "response_format: only {\"type\": \"text\"} is supported"};
      return false;
    }
  }
  if (const json* l = field(doc, "logprobs"); l != nullptr && !(l->is_boolean() && !l->get<bool>())) {
    err = {refusal::invalid, "logprobs", "logprobs: not supported on this route"};
    return false;
  }
  // OpenAI's top_logprobs asks for logprobs too: answering without them would be silent.
  if (const json* t = field(doc, "top_logprobs");
      t != nullptr && !(t->is_number_integer() && t->get<int64_t>() == 0)) {
    err = {refusal::invalid, "top_logprobs", "top_logprobs: not supported on this route"};
    return false;
  }
  return true;
}

/// The chat fields the route reads itself (or refuses but for their default), and those it
/// drops because they do not shape the answer (`user`, `metadata`, ...).
constexpr std::array<std::string_view, 16> chat_fields_read = {
  "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "n",
  "stop", "seed", "chat_template_kwargs", "priority", "deadline_ms", "stream", "logprobs",
  "top_logprobs", "response_format"};
constexpr std::array<std::string_view, 8> chat_fields_dropped = {
  "user", "store", "metadata", "service_tier", "stream_options", "parallel_tool_calls",
  "prompt_cache_key", "safety_identifier"};

/// The chat request's other fields, as a JSON object's text ("" when none): a penalty,
/// `logit_bias`, `reasoning_effort`, vLLM's `top_k` or `min_p` change the answer, so they go
/// upstream as they came and into the cache key, not away. `chat_template_kwargs` other than
/// `enable_thinking` go too. A field that asks for nothing (`asks_nothing`) does not: a local
/// generator refused `"presence_penalty": null`, which OpenAI and vLLM take as unset.
std::string chat_extra_body(const json& doc) {
  auto listed = [](const auto& names, const std::string& key) {
    return std::find(names.begin(), names.end(), key) != names.end();
  };
  json extra = json::object();
  for (const auto& [key, value] : doc.items()) {
    if (!listed(chat_fields_read, key) && !listed(chat_fields_dropped, key)
        && !asks_nothing(key, value)) {
      extra[key] = value;
    }
  }
  if (const json* kwargs = field(doc, "chat_template_kwargs")) {
    json rest = *kwargs;
    rest.erase("enable_thinking");
    if (!rest.empty()) {
      extra["chat_template_kwargs"] = std::move(rest);
    }
  }
  return extra.empty() ? std::string{} : dump(extra);
}

bool read_messages(const json& doc, std::string& out, codec_error& err) {
  const json* messages = field(doc, "messages");
  if (messages == nullptr) {
    err = codec_error::missing("messages");
    return false;
  }
  if (!messages->is_array() || messages->empty()) {
    err = {refusal::invalid, "messages", "messages: expected a non-empty list of messages"};
    return false;
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const auto& m = (*messages)[i];
    auto where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
      err = {refusal::invalid, where, where + ": expected an object"};
      return false;
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      err = {refusal::invalid, where + ".role", where + ".role: expected a string"};
      return false;
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_null() && !content->is_string()
        && !content->is_array()) {
      err = {refusal::invalid, where + ".content", where + ".content: expected a string or a list of parts"};
      return false;
    }
  }
  out = dump(*messages);
  return true;
}

bool read_stop(const json& doc, std::vector<std::string>& out, codec_error& err) {
  const json* stop = field(doc, "stop");
  if (stop == nullptr) {
    return true;
  }
  if (stop->is_string()) {
    out.push_back(stop->get<std::string>());
    return true;
  }
  if (stop->is_array() && stop->size() <= 16
      && std::all_of(stop->begin(), stop->end(), [](const json& s) { return s.is_string(); })) {
    for (const auto& s : *stop) {
      out.push_back(s.get<std::string>());
    }
    return true;
  }
  err = {refusal::invalid, "stop", "stop: expected a string or a list of up to 16 strings"};
  return false;
}

/// `{"type": "...", ...}` for `status`, as OpenAI names them.
const char* openai_error_type(unsigned status) {
  switch (status) {
    case 400:
    case 401:
    case 404:
    case 413:
    case 415:
    case 422:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    default:
      return "api_error";
  }
}

std::vector<float> normalized(std::vector<float> v, bool normalize) {
  if (!normalize) {
    return v;
  }
  double sum = 0.0;
  for (float x : v) {
    sum += static_cast<double>(x) * x;
  }
  if (sum > 0.0) {
    auto scale = static_cast<float>(1.0 / std::sqrt(sum));
    for (float& x : v) {
      x *= scale;
    }
  }
  return v;
}

/// The shortest text that reads back as the same float (JSON has no NaN: null).
void append_float(std::string& out, float value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, ec == std::errc{} ? end : buf);
}

void append_vector(std::string& out, const std::vector<float>& v) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    append_float(out, v[i]);
  }
  out += ']';
}

std::string base64_of(const std::vector<float>& v) {
  static_assert(sizeof(float) == 4, "float32 expected");
  std::string bytes(v.size() * 4, '\0');
  if (!v.empty()) {
    std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian hosts only (x86, arm)
  }
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

/// Builds one embedding item per input text.
bool embed_items(const json& inputs, const char* key, const passthrough_context& ctx,
                 const std::string& suffix, embed_request_body& out, codec_error& err) {
  std::vector<std::string> texts;
  if (inputs.is_string()) {
    texts.push_back(inputs.get<std::string>());
  } else if (inputs.is_array() && !inputs.empty()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].is_string()) {
        auto where = std::string{key} + "[" + std::to_string(i) + "]";
        err = {refusal::invalid, where, where + ": expected a string (token arrays are not supported)"};
        return false;
      }
      texts.push_back(inputs[i].get<std::string>());
    }
  } else {
    err = {refusal::invalid, key, std::string{key} + ": expected a string or a non-empty list of strings"};
    return false;
  }
  if (texts.size() > ctx.codec->max_batch_items) {
    err = {refusal::too_large, key,
           std::string{key} + ": more than " + std::to_string(ctx.codec->max_batch_items)
             + " inputs in one request (server.max_batch_items)"};
    return false;
  }
  for (auto& text : texts) {
    score_item item;
    item.reward = "embeddings";
    item.kind = std::string{embed_item_kind};
    item.capability = routing_key(capability::embed, suffix);
    item.route_suffix = suffix;
    auto call = std::make_shared<model_call>();
    call->prompt = std::move(text);
    item.call = std::move(call);
    out.items.push_back(std::move(item));
  }
  return true;
}

} // namespace

bool decode_chat_request(std::string_view body, const passthrough_context& ctx,
                         chat_request_body& out, codec_error& err) {
  json doc;
  if (!parse_json_object(body, doc, err) || !refuse_unsupported_chat(doc, err)
      || !read_scheduling(doc, ctx, out.priority, out.deadline, err)) {
    return false;
  }
  std::string suffix;
  if (!resolve_model(doc, ctx, capability::chat, out.model, suffix, err)) {
    return false;
  }
  auto call = std::make_shared<model_call>();
  if (!read_messages(doc, call->messages, err) || !read_stop(doc, call->stop, err)) {
    return false;
  }
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<uint64_t> max_tokens;
  std::optional<uint64_t> max_completion_tokens;
  std::optional<uint64_t> n;
  if (!read_number(doc, "temperature", 0.0, 2.0, temperature, err)
      || !read_number(doc, "top_p", 0.0, 1.0, top_p, err)
      || !read_count(doc, "max_tokens", 1, 1u << 20, max_tokens, err)
      || !read_count(doc, "max_completion_tokens", 1, 1u << 20, max_completion_tokens, err)
      || !read_count(doc, "n", 1, 128, n, err)) {
    return false;
  }
  if (const json* seed = field(doc, "seed")) {
    if (!seed->is_number_integer()) {
      err = {refusal::invalid, "seed", "seed: expected an integer"};
      return false;
    }
    call->seed = static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (const json* kwargs = field(doc, "chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      err = {refusal::invalid, "chat_template_kwargs", "chat_template_kwargs: expected an object"};
      return false;
    }
    if (!read_flag(*kwargs, "enable_thinking", call->enable_thinking, err,
                   "chat_template_kwargs.enable_thinking")) {
      return false;
    }
  }
  call->temperature = temperature;
  call->top_p = top_p;
  call->extra_body = chat_extra_body(doc);
  if (auto tokens = max_completion_tokens ? max_completion_tokens : max_tokens) {
    call->max_tokens = static_cast<uint32_t>(*tokens);
  }
  out.n = static_cast<uint32_t>(n.value_or(1));
  call->n = out.n;
  out.item = score_item{};
  out.item.reward = std::string{passthrough_chat_reward};
  out.item.kind = std::string{chat_item_kind};
  out.item.capability = routing_key(capability::chat, suffix);
  out.item.route_suffix = suffix;
  out.item.call = std::move(call);
  return true;
}

std::string encode_chat_response(const chat_request_body& request, const item_result& result,
                                 const std::string& id, int64_t created) {
  json doc;
  doc["id"] = id;
  doc["object"] = "chat.completion";
  doc["created"] = created;
  doc["model"] = request.model;
  json choices = json::array();
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  if (result.output) {
    const auto& texts = result.output->texts;
    for (size_t i = 0; i < texts.size() && i < request.n; ++i) {
      json message = {{"role", "assistant"},
                      {"content", texts[i].no_content ? json(nullptr) : json(texts[i].text)}};
      if (!texts[i].refusal.empty()) {
        message["refusal"] = texts[i].refusal;
      }
      if (!texts[i].reasoning.empty()) {
        message["reasoning_content"] = texts[i].reasoning;
      }
      choices.push_back({{"index", i},
                         {"message", std::move(message)},
                         {"finish_reason", texts[i].finish_reason.empty()
                                             ? std::string{"stop"}
                                             : texts[i].finish_reason},
                         {"logprobs", nullptr}});
    }
    prompt_tokens = result.output->prompt_tokens;
    completion_tokens = result.output->completion_tokens;
  }
  doc["choices"] = std::move(choices);
  doc["usage"] = {{"prompt_tokens", prompt_tokens},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", uint64_t{prompt_tokens} + completion_tokens}};
  doc["arbiter"] = {{"source", result.source},
                    {"cached", result.cached},
                    {"attempts", result.attempts},
                    {"queue_ms", result.queue_ms},
                    {"run_ms", result.run_ms}};
  return dump(doc);
}

bool decode_openai_embeddings(std::string_view body, const passthrough_context& ctx,
                              embed_request_body& out, codec_error& err) {
  json doc;
  if (!parse_json_object(body, doc, err)
      || !read_scheduling(doc, ctx, out.priority, out.deadline, err)) {
    return false;
  }
  std::string suffix;
  if (!resolve_model(doc, ctx, capability::embed, out.model, suffix, err)) {
    return false;
  }
  if (const json* format = field(doc, "encoding_format")) {
    if (format->is_string() && *format == "base64") {
      out.format = vector_format::base64;
    } else if (!(format->is_string() && *format == "float")) {
      err = {refusal::invalid, "encoding_format", "encoding_format: expected \"float\" or \"base64\""};
      return false;
    }
  }
  if (!read_dimensions(doc, out.dimensions, err)) {
    return false;
  }
  const json* input = required(doc, "input", err);
  return input != nullptr && embed_items(*input, "input", ctx, suffix, out, err);
}

bool decode_tei_embed(std::string_view body, const passthrough_context& ctx,
                      embed_request_body& out, codec_error& err) {
  json doc;
  if (!parse_json_object(body, doc, err)
      || !read_scheduling(doc, ctx, out.priority, out.deadline, err)) {
    return false;
  }
  std::optional<bool> normalize;
  if (!read_flag(doc, "normalize", normalize, err)) {
    return false;
  }
  out.normalize = normalize.value_or(out.normalize);
  for (const char* key : {"prompt_name", "truncation_direction"}) {
    if (field(doc, key) != nullptr) {
      err = {refusal::invalid, key, std::string{key} + ": not supported (the embedding source decides)"};
      return false;
    }
  }
  if (std::optional<bool> truncate; !read_flag(doc, "truncate", truncate, err)) {
    return false;
  }
  if (!read_dimensions(doc, out.dimensions, err)) {
    return false;
  }
  const json* inputs = required(doc, "inputs", err);
  return inputs != nullptr && embed_items(*inputs, "inputs", ctx, "", out, err);
}

bool decode_tei_predict(std::string_view body, const passthrough_context& ctx,
                        predict_request_body& out, codec_error& err) {
  json doc;
  if (!parse_json_object(body, doc, err)
      || !read_scheduling(doc, ctx, out.priority, out.deadline, err)) {
    return false;
  }
  std::optional<bool> raw_scores;
  if (!read_flag(doc, "raw_scores", raw_scores, err)) {
    return false;
  }
  if (raw_scores.value_or(false)) {
    err = {refusal::invalid, "raw_scores",
           "raw_scores: not supported (sources answer probabilities)"};
    return false;
  }
  if (field(doc, "truncation_direction") != nullptr) {
    err = {refusal::invalid, "truncation_direction",
           "truncation_direction: not supported (the NLI source truncates longest-first)"};
    return false;
  }
  if (std::optional<bool> truncate; !read_flag(doc, "truncate", truncate, err)) {
    return false;
  }
  const json* inputs = required(doc, "inputs", err);
  if (inputs == nullptr) {
    return false;
  }
  auto is_pair = [](const json& v) {
    return v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string();
  };
  std::vector<const json*> pairs;
  if (is_pair(*inputs)) {
    out.single = true;
    pairs.push_back(inputs);
  } else if (inputs->is_array() && !inputs->empty()) {
    for (size_t i = 0; i < inputs->size(); ++i) {
      if (!is_pair((*inputs)[i])) {
        auto where = "inputs[" + std::to_string(i) + "]";
        err = {refusal::invalid, where, where + ": expected a [premise, hypothesis] pair of strings"};
        return false;
      }
      pairs.push_back(&(*inputs)[i]);
    }
  } else {
    err = {refusal::invalid, "inputs",
           "inputs: expected a [premise, hypothesis] pair or a non-empty list of pairs (NLI; "
           "single-text classification is not served)"};
    return false;
  }
  if (pairs.size() > ctx.codec->max_batch_items) {
    err = {refusal::too_large, "inputs",
           "inputs: more than " + std::to_string(ctx.codec->max_batch_items)
             + " pairs in one request (server.max_batch_items)"};
    return false;
  }
  for (const json* pair : pairs) {
    score_item item;
    item.reward = "predict";
    item.kind = "nli";
    item.capability = routing_key(capability::nli);
    auto call = std::make_shared<model_call>();
    call->prompt = (*pair)[0].get<std::string>();
    call->hypothesis = (*pair)[1].get<std::string>();
    item.call = std::move(call);
    out.items.push_back(std::move(item));
  }
  return true;
}

std::string encode_tei_predict(const predict_request_body& request,
                               const std::vector<item_result>& results) {
  json all = json::array();
  for (const auto& result : results) {
    const model_output none;
    const model_output& o = result.output ? *result.output : none;
    std::vector<std::pair<const char*, double>> labels = {
      {"entailment", o.entailment}, {"neutral", o.neutral}, {"contradiction", o.contradiction}};
    std::stable_sort(labels.begin(), labels.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    json one = json::array();
    for (const auto& [label, score] : labels) {
      one.push_back({{"label", label}, {"score", score}});
    }
    all.push_back(std::move(one));
  }
  return dump(request.single && all.size() == 1 ? all[0] : all);
}

std::vector<float> shaped_vector(const embed_request_body& request, const item_result& result) {
  if (!result.output) {
    return {};
  }
  auto v = result.output->embedding;
  bool sliced = request.dimensions > 0 && request.dimensions < v.size();
  if (sliced) {
    v.resize(request.dimensions);
  }
  // OpenAI vectors come normalized; a slice of one is re-normalized (Matryoshka).
  return normalized(std::move(v), request.normalize || sliced);
}

std::string encode_openai_embeddings(const embed_request_body& request,
                                     const std::vector<item_result>& results) {
  std::string out = R"({"object":"list","data":[)";
  uint64_t tokens = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    out += R"({"object":"embedding","index":)";
    out += std::to_string(i);
    out += R"(,"embedding":)";
    auto v = shaped_vector(request, results[i]);
    if (request.format == vector_format::base64) {
      append_json_string(out, base64_of(v));
    } else {
      append_vector(out, v);
    }
    out += '}';
    if (results[i].output) {
      tokens += results[i].output->prompt_tokens;
    }
  }
  out += R"(],"model":)";
  append_json_string(out, request.model);
  out += R"(,"usage":{"prompt_tokens":)";
  out += std::to_string(tokens);
  out += R"(,"total_tokens":)";
  out += std::to_string(tokens);
  out += "}}";
  return out;
}

std::string encode_tei_embed(const embed_request_body& request,
                             const std::vector<item_result>& results) {
  std::string out = "[";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    append_vector(out, shaped_vector(request, results[i]));
  }
  out += ']';
  return out;
}

std::string encode_models(const std::vector<model_entry>& models, int64_t created) {
  json data = json::array();
  for (const auto& m : models) {
    if (!m.away.empty()) {
      continue;
    }
    data.push_back({{"id", m.id},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "arbiter"},
                    {"capabilities", actors::keys_of(m.capabilities)},
                    {"sources", m.sources}});
  }
  return dump({{"object", "list"}, {"data", std::move(data)}});
}

std::string encode_openai_error(unsigned status, std::string_view code, std::string_view message,
                                std::string_view param) {
  json error = {{"message", std::string{message}},
                {"type", openai_error_type(status)},
                {"param", param.empty() ? json(nullptr) : json(std::string{param})},
                {"code", std::string{code}}};
  return dump({{"error", std::move(error)}});
}

std::string encode_tei_error(unsigned status, std::string_view message) {
  const char* type = status == 429   ? "overloaded"
                     : status == 413 ? "validation"
                     : status < 500  ? "validation"
                                     : "backend";
  return dump({{"error", std::string{message}}, {"error_type", type}});
}

} // namespace arbiter::net
