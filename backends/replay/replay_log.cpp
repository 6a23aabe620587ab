#include "backends/replay/replay_log.hpp"

#include <array>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

namespace arbiter::backends::replay {

namespace {

using json = nlohmann::json;

/// Text as the log holds it: invalid UTF-8 replaced, so one bad byte cannot lose a record.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

errc parse_errc(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(errc::upstream_rejected); ++c) {
    if (to_string(static_cast<errc>(c)) == name) {
      return static_cast<errc>(c);
    }
  }
  throw std::invalid_argument{"unknown error code '" + name + "'"};
}

item_status parse_status(const std::string& name) {
  for (auto s : {item_status::ok, item_status::fallback, item_status::failed}) {
    if (name == to_string(s)) {
      return s;
    }
  }
  throw std::invalid_argument{"unknown status '" + name + "'"};
}

// ---- model calls and their outputs ---------------------------------------------------------

json call_json(const model_call& c) {
  json j = {{"prompt", c.prompt}, {"n", c.n}, {"prompt_hash", prompt_hash(c)}};
  if (!c.messages.empty()) {
    j["messages"] = c.messages;
  }
  if (!c.hypothesis.empty()) {
    j["hypothesis"] = c.hypothesis;
  }
  if (!c.model.empty()) {
    j["model"] = c.model;
  }
  if (c.temperature) {
    j["temperature"] = *c.temperature;
  }
  if (c.top_p) {
    j["top_p"] = *c.top_p;
  }
  if (c.max_tokens) {
    j["max_tokens"] = *c.max_tokens;
  }
  if (c.enable_thinking) {
    j["enable_thinking"] = *c.enable_thinking;
  }
  if (!c.stop.empty()) {
    j["stop"] = c.stop;
  }
  if (c.seed) {
    j["seed"] = *c.seed;
  }
  return j;
}

model_call call_from(const json& j) {
  model_call c;
  c.prompt = j.at("prompt").get<std::string>();
  c.n = j.at("n").get<uint32_t>();
  c.messages = j.value("messages", std::string{});
  c.hypothesis = j.value("hypothesis", std::string{});
  c.model = j.value("model", std::string{});
  if (j.contains("temperature")) {
    c.temperature = j["temperature"].get<double>();
  }
  if (j.contains("top_p")) {
    c.top_p = j["top_p"].get<double>();
  }
  if (j.contains("max_tokens")) {
    c.max_tokens = j["max_tokens"].get<uint32_t>();
  }
  if (j.contains("enable_thinking")) {
    c.enable_thinking = j["enable_thinking"].get<bool>();
  }
  if (j.contains("stop")) {
    c.stop = j["stop"].get<std::vector<std::string>>();
  }
  if (j.contains("seed")) {
    c.seed = j["seed"].get<uint64_t>();
  }
  return c;
}

json output_json(const model_output& o) {
  json j = json::object();
  if (!o.texts.empty()) {
    json texts = json::array();
    for (const auto& t : o.texts) {
      json text = {{"text", t.text}};
      if (t.tokens > 0 || t.mean_logprob != 0.0) {
        text["mean_logprob"] = t.mean_logprob;
        text["tokens"] = t.tokens;
      }
      if (!t.finish_reason.empty()) {
        text["finish_reason"] = t.finish_reason;
      }
      texts.push_back(std::move(text));
    }
    j["texts"] = std::move(texts);
  }
  if (o.entailment != 0.0 || o.neutral != 0.0 || o.contradiction != 0.0) {
    j["entailment"] = o.entailment;
    j["neutral"] = o.neutral;
    j["contradiction"] = o.contradiction;
  }
  if (!o.embedding.empty()) {
    j["embedding"] = o.embedding;
  }
  j["prompt_tokens"] = o.prompt_tokens;
  j["completion_tokens"] = o.completion_tokens;
  return j;
}

model_output output_from(const json& j) {
  model_output o;
  if (auto texts = j.find("texts"); texts != j.end()) {
    for (const auto& t : *texts) {
      generated_text text;
      text.text = t.at("text").get<std::string>();
      text.mean_logprob = t.value("mean_logprob", 0.0);
      text.tokens = t.value("tokens", 0u);
      text.finish_reason = t.value("finish_reason", std::string{});
      o.texts.push_back(std::move(text));
    }
  }
  o.entailment = j.value("entailment", 0.0);
  o.neutral = j.value("neutral", 0.0);
  o.contradiction = j.value("contradiction", 0.0);
  if (j.contains("embedding")) {
    o.embedding = j["embedding"].get<std::vector<float>>();
  }
  o.prompt_tokens = j.value("prompt_tokens", 0u);
  o.completion_tokens = j.value("completion_tokens", 0u);
  return o;
}

// ---- results ---------------------------------------------------------------------------------

/// How an item ended (an item record's, or a graph's answer to one of its calls).
json result_json(const item_result& r) {
  json j = {{"status", to_string(r.status)}, {"score", r.score}, {"source", r.source}};
  if (!r.sources.empty()) {
    j["sources"] = r.sources;
  }
  if (r.cached) {
    j["cached"] = true;
  }
  j["attempts"] = r.attempts;
  if (r.code != errc::none) {
    j["code"] = std::string{to_string(r.code)};
    j["error"] = r.error;
  }
  if (!r.fallback_reason.empty()) {
    j["fallback_reason"] = r.fallback_reason;
  }
  if (!r.detail.empty()) {
    j["detail"] = r.detail;
  }
  if (!r.extra.empty()) {
    j["extra"] = r.extra;
  }
  if (r.output) {
    j["output"] = output_json(*r.output);
  }
  return j;
}

item_result result_from(const json& j) {
  item_result r;
  r.status = parse_status(j.at("status").get<std::string>());
  r.score = j.at("score").get<double>();
  r.source = j.value("source", std::string{});
  if (j.contains("sources")) {
    r.sources = j["sources"].get<std::vector<std::string>>();
  }
  r.cached = j.value("cached", false);
  r.attempts = j.value("attempts", 0u);
  if (j.contains("code")) {
    r.code = parse_errc(j["code"].get<std::string>());
    r.error = j.value("error", std::string{});
  }
  r.fallback_reason = j.value("fallback_reason", std::string{});
  r.detail = j.value("detail", std::string{});
  r.extra = j.value("extra", std::string{});
  if (auto o = j.find("output"); o != j.end()) {
    r.output = std::make_shared<const model_output>(output_from(*o));
  }
  return r;
}

/// Runs `f`, turning a JSON library error into std::invalid_argument with `what` in front.
template <class F>
auto parsing(const char* what, F&& f) {
  try {
    return f();
  } catch (const json::exception& e) {
    throw std::invalid_argument{std::string{what} + ": " + e.what()};
  }
}

} // namespace

namespace {

/// Hex SHA-256 over `parts`, each length-prefixed so ("ab", "") and ("a", "b") differ.
std::string sha256_of(std::initializer_list<const std::string*> parts) {
  auto* ctx = EVP_MD_CTX_new();
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  for (const std::string* part : parts) {
    auto size = std::to_string(part->size()) + ":";
    ok = ok && EVP_DigestUpdate(ctx, size.data(), size.size()) == 1
         && EVP_DigestUpdate(ctx, part->data(), part->size()) == 1;
  }
  ok = ok && EVP_DigestFinal_ex(ctx, digest.data(), &length) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) {
    throw std::runtime_error{"SHA-256 failed"};
  }
  std::string hex;
  hex.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", digest[i]);
    hex += buf;
  }
  return hex;
}

} // namespace

std::string prompt_hash(const model_call& call) {
  return sha256_of({&call.prompt, &call.messages, &call.hypothesis});
}

std::string item_key(const score_item& item) {
  std::string references;
  for (const auto& r : item.ground_truth) {
    references += std::to_string(r.size()) + ":" + r;
  }
  return sha256_of({&item.reward, &item.kind, &item.solution_str, &references, &item.extra_info,
                    &item.options, &item.route_suffix});
}

std::string encode(const score_item& item, const item_result& result, bool internal,
                   std::string_view time) {
  json j = {{"type", item.call ? "call" : "item"}, {"time", time}};
  if (internal) {
    j["internal"] = true;
  }
  if (!item.step.empty()) {
    j["step"] = item.step;
  }
  if (!item.group.empty()) {
    j["group"] = item.group;
  }
  j["reward"] = item.reward;
  j["kind"] = item.kind;
  j["capability"] = item.capability;
  if (item.call) {
    j["call"] = call_json(*item.call);
  } else {
    j["solution_str"] = item.solution_str;
    j["ground_truth"] = item.ground_truth;
    if (!item.data_source.empty()) {
      j["data_source"] = item.data_source;
    }
    if (!item.extra_info.empty()) {
      j["extra_info"] = item.extra_info;
    }
    if (!item.options.empty()) {
      j["options"] = item.options;
    }
    if (!item.fallback.empty()) {
      j["fallback"] = item.fallback;
    }
    if (!item.route_suffix.empty()) {
      j["route_suffix"] = item.route_suffix;
    }
  }
  j["result"] = result_json(result);
  auto line = dump(j);
  if (!result.evidence.empty()) {
    // Spliced in as JSON, not as a string: it is already JSON text.
    line.pop_back();
    line += ",\"evidence\":";
    line += result.evidence;
    line += '}';
  }
  return line;
}

std::string encode_start(std::string_view version, std::string_view time) {
  return dump({{"type", "start"}, {"time", time}, {"version", version}});
}

record decode(std::string_view line) {
  return parsing("replay record", [&] {
    auto j = json::parse(line);
    record r;
    auto type = j.at("type").get<std::string>();
    if (type == "start") {
      r.type = record_type::start;
      r.time = j.value("time", std::string{});
      return r;
    }
    if (type != "item" && type != "call") {
      throw std::invalid_argument{"unknown record type '" + type + "'"};
    }
    r.type = type == "item" ? record_type::item : record_type::call;
    r.time = j.value("time", std::string{});
    r.internal = j.value("internal", false);
    auto& it = r.item;
    it.step = j.value("step", std::string{});
    it.group = j.value("group", std::string{});
    it.reward = j.at("reward").get<std::string>();
    it.kind = j.at("kind").get<std::string>();
    it.capability = j.value("capability", std::string{});
    if (r.type == record_type::call) {
      it.call = std::make_shared<const model_call>(call_from(j.at("call")));
    } else {
      it.solution_str = j.at("solution_str").get<std::string>();
      it.ground_truth = j.at("ground_truth").get<std::vector<std::string>>();
      it.data_source = j.value("data_source", std::string{});
      it.extra_info = j.value("extra_info", std::string{});
      it.options = j.value("options", std::string{});
      it.fallback = j.value("fallback", std::string{});
      it.route_suffix = j.value("route_suffix", std::string{});
    }
    r.result = result_from(j.at("result"));
    if (auto e = j.find("evidence"); e != j.end()) {
      r.result.evidence = dump(*e);
    }
    return r;
  });
}

// ---- graph traces ----------------------------------------------------------------------------

void graph_trace::calls(const std::vector<score_item>& items) {
  step s;
  for (const auto& item : items) {
    s.calls.push_back({item.capability, item.call ? prompt_hash(*item.call) : std::string{}});
  }
  steps_.push_back(std::move(s));
}

void graph_trace::answers(const std::vector<item_result>& results) {
  if (steps_.empty()) {
    steps_.emplace_back();
  }
  steps_.back().answers = results;
}

std::string graph_trace::encode() const {
  json steps = json::array();
  for (const auto& s : steps_) {
    json calls = json::array();
    for (const auto& c : s.calls) {
      json call = {{"capability", c.capability}};
      if (!c.prompt_hash.empty()) {
        call["prompt_hash"] = c.prompt_hash;
      }
      calls.push_back(std::move(call));
    }
    json answers = json::array();
    for (const auto& a : s.answers) {
      answers.push_back(result_json(a));
    }
    steps.push_back({{"calls", std::move(calls)}, {"answers", std::move(answers)}});
  }
  return dump({{"steps", std::move(steps)}});
}

graph_trace graph_trace::decode(std::string_view evidence) {
  return parsing("graph evidence", [&] {
    auto j = json::parse(evidence);
    graph_trace t;
    for (const auto& s : j.at("steps")) {
      step out;
      for (const auto& c : s.at("calls")) {
        out.calls.push_back(
          {c.at("capability").get<std::string>(), c.value("prompt_hash", std::string{})});
      }
      for (const auto& a : s.at("answers")) {
        out.answers.push_back(result_from(a));
      }
      t.steps_.push_back(std::move(out));
    }
    return t;
  });
}

// ---- embedding evidence ----------------------------------------------------------------------

std::string encode(const embedding_evidence& evidence) {
  return dump({{"model", evidence.model}, {"vectors", evidence.vectors}});
}

embedding_evidence decode_embedding(std::string_view evidence) {
  return parsing("embedding evidence", [&] {
    auto j = json::parse(evidence);
    embedding_evidence e;
    e.model = j.at("model").get<std::string>();
    e.vectors = j.at("vectors").get<std::vector<std::vector<double>>>();
    return e;
  });
}

} // namespace arbiter::backends::replay
