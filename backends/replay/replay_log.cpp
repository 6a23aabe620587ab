#include "backends/replay/replay_log.hpp"

#include <array>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "common/json_text.hpp"

namespace arbiter::backends::replay {

namespace {

using json = nlohmann::json;

/// Text as the log holds it: invalid UTF-8 replaced, so one bad byte cannot lose a record.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// A JSON object written straight into a line (the writer's thread encodes every record, so
/// no document is built): `field(...)` appends `"key":value`, `close()` the brace.
class object {
public:
  explicit object(std::string& out) : out_(out) {
    out_ += '{';
  }
  object& str(std::string_view key, std::string_view value) {
    name(key);
    append_json_string(out_, value);
    return *this;
  }
  object& num(std::string_view key, double value) {
    name(key);
    append_json_number(out_, value);
    return *this;
  }
  object& integer(std::string_view key, uint64_t value) {
    name(key);
    append_json_integer(out_, value);
    return *this;
  }
  object& null(std::string_view key) {
    name(key);
    out_ += "null";
    return *this;
  }
  object& boolean(std::string_view key, bool value) {
    name(key);
    out_ += value ? "true" : "false";
    return *this;
  }
  object& strings(std::string_view key, const std::vector<std::string>& values) {
    name(key);
    out_ += '[';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) {
        out_ += ',';
      }
      append_json_string(out_, values[i]);
    }
    out_ += ']';
    return *this;
  }
  /// The field only where there is something to say: a non-empty text or list, a set optional.
  object& str_if(std::string_view key, std::string_view value) {
    return value.empty() ? *this : str(key, value);
  }
  object& strings_if(std::string_view key, const std::vector<std::string>& values) {
    return values.empty() ? *this : strings(key, values);
  }
  template <class T>
  object& opt(std::string_view key, const std::optional<T>& value) {
    if (!value) {
      return *this;
    }
    if constexpr (std::is_same_v<T, bool>) {
      return boolean(key, *value);
    } else if constexpr (std::is_integral_v<T>) {
      return integer(key, *value);
    } else {
      return num(key, *value);
    }
  }
  /// Names a field whose value the caller appends to the returned text.
  std::string& value_of(std::string_view key) {
    name(key);
    return out_;
  }
  void close() {
    out_ += '}';
  }

private:
  void name(std::string_view key) {
    if (!first_) {
      out_ += ',';
    }
    first_ = false;
    append_json_string(out_, key);
    out_ += ':';
  }

  std::string& out_;
  bool first_ = true;
};

template <class T>
void append_numbers(std::string& out, const std::vector<T>& values) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    append_json_number(out, static_cast<double>(values[i]));
  }
  out += ']';
}

errc parse_errc(const std::string& name) {
  if (auto code = parse_error_code(name)) {
    return *code;
  }
  throw std::invalid_argument{"unknown error code '" + name + "'"};
}

item_status parse_status(const std::string& name) {
  if (auto status = item_status_names.parse(name)) {
    return *status;
  }
  throw std::invalid_argument{"unknown status '" + name + "'"};
}

// ---- model calls and their outputs ---------------------------------------------------------

void write_call(std::string& out, const model_call& c) {
  object o{out};
  o.str("prompt", c.prompt).integer("n", c.n).str("prompt_hash", prompt_hash(c));
  o.str_if("messages", c.messages).str_if("hypothesis", c.hypothesis).str_if("model", c.model);
  o.opt("temperature", c.temperature).opt("top_p", c.top_p).opt("max_tokens", c.max_tokens);
  o.opt("enable_thinking", c.enable_thinking).strings_if("stop", c.stop).opt("seed", c.seed);
  o.str_if("extra_body", c.extra_body);
  o.close();
}

/// `j[key]` into `out` when the record has it.
template <class T>
void read_if(const json& j, const char* key, std::optional<T>& out) {
  if (auto found = j.find(key); found != j.end()) {
    out = found->get<T>();
  }
}
template <class T>
void read_if(const json& j, const char* key, std::vector<T>& out) {
  if (auto found = j.find(key); found != j.end()) {
    out = found->get<std::vector<T>>();
  }
}

model_call call_from(const json& j) {
  model_call c;
  c.prompt = j.at("prompt").get<std::string>();
  c.n = j.at("n").get<uint32_t>();
  c.messages = j.value("messages", std::string{});
  c.hypothesis = j.value("hypothesis", std::string{});
  c.model = j.value("model", std::string{});
  read_if(j, "temperature", c.temperature);
  read_if(j, "top_p", c.top_p);
  read_if(j, "max_tokens", c.max_tokens);
  read_if(j, "enable_thinking", c.enable_thinking);
  read_if(j, "stop", c.stop);
  read_if(j, "seed", c.seed);
  c.extra_body = j.value("extra_body", std::string{});
  return c;
}

void write_output(std::string& out, const model_output& o) {
  object j{out};
  if (!o.texts.empty()) {
    auto& texts = j.value_of("texts");
    texts += '[';
    for (size_t i = 0; i < o.texts.size(); ++i) {
      const auto& t = o.texts[i];
      if (i > 0) {
        texts += ',';
      }
      object text{texts};
      text.str("text", t.text);
      if (t.tokens > 0 || t.mean_logprob != 0.0) {
        text.num("mean_logprob", t.mean_logprob).integer("tokens", t.tokens);
      }
      text.str_if("finish_reason", t.finish_reason);
      text.close();
    }
    texts += ']';
  }
  if (o.entailment != 0.0 || o.neutral != 0.0 || o.contradiction != 0.0) {
    j.num("entailment", o.entailment).num("neutral", o.neutral).num("contradiction",
                                                                     o.contradiction);
  }
  if (!o.embedding.empty()) {
    append_numbers(j.value_of("embedding"), o.embedding);
  }
  j.integer("prompt_tokens", o.prompt_tokens).integer("completion_tokens", o.completion_tokens);
  j.str_if("model", o.model);
  j.close();
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
  read_if(j, "embedding", o.embedding);
  o.prompt_tokens = j.value("prompt_tokens", 0u);
  o.completion_tokens = j.value("completion_tokens", 0u);
  o.model = j.value("model", std::string{});
  return o;
}

// ---- results ---------------------------------------------------------------------------------

/// How an item ended (an item record's, or a graph's answer to one of its calls).
void write_result(std::string& out, const item_result& r) {
  object j{out};
  j.str("status", to_string(r.status));
  if (r.status == item_status::failed) {
    j.null("score"); // what the trainer got: no score, never a silent 0
  } else {
    j.num("score", r.score);
  }
  j.str("source", r.source);
  j.strings_if("sources", r.sources);
  if (r.cached) {
    j.boolean("cached", true);
  }
  if (r.coalesced) {
    j.boolean("coalesced", true);
  }
  j.integer("attempts", r.attempts);
  if (r.code != errc::none) {
    j.str("code", to_string(r.code)).str("error", r.error);
  }
  j.str_if("fallback_reason", r.fallback_reason);
  j.str_if("detail", r.detail);
  j.str_if("extra", r.extra);
  if (r.output) {
    write_output(j.value_of("output"), *r.output);
  }
  j.close();
}
item_result result_from(const json& j) {
  item_result r;
  r.status = parse_status(j.at("status").get<std::string>());
  const auto& score = j.at("score");
  r.score = score.is_null() && r.status == item_status::failed ? 0.0 : score.get<double>();
  r.source = j.value("source", std::string{});
  read_if(j, "sources", r.sources);
  r.cached = j.value("cached", false);
  r.coalesced = j.value("coalesced", false);
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
  std::string line;
  line.reserve(256 + item.solution_str.size() + result.evidence.size());
  object j{line};
  j.str("type", item.call ? "call" : "item").str("time", time);
  if (internal) {
    j.boolean("internal", true);
  }
  j.str_if("step", item.step);
  j.str_if("group", item.group);
  j.str("reward", item.reward).str("kind", item.kind).str("capability", item.capability);
  if (item.call) {
    write_call(j.value_of("call"), *item.call);
  } else {
    j.str("solution_str", item.solution_str).strings("ground_truth", item.ground_truth);
    j.str_if("data_source", item.data_source);
    j.str_if("extra_info", item.extra_info);
    j.str_if("options", item.options);
    j.str_if("fallback", item.fallback);
    j.str_if("route_suffix", item.route_suffix);
  }
  write_result(j.value_of("result"), result);
  if (!result.evidence.empty()) {
    j.value_of("evidence") += result.evidence; // already JSON text
  }
  j.close();
  return line;
}
std::string encode_start(std::string_view version, std::string_view time) {
  std::string line;
  object{line}.str("type", "start").str("time", time).str("version", version).close();
  return line;
}
std::string encode_gap(uint64_t dropped, std::string_view time) {
  std::string line;
  object{line}.str("type", "gap").str("time", time).integer("dropped", dropped).close();
  return line;
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
    if (type == "gap") {
      r.type = record_type::gap;
      r.time = j.value("time", std::string{});
      const auto& dropped = j.at("dropped");
      if (!dropped.is_number_unsigned()) { // -5 read as a count wrapped to 18446744073709551611
        throw std::invalid_argument{"dropped: expected a count of records, not "
                                    + dropped.dump()};
      }
      r.dropped = dropped.get<uint64_t>();
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
  std::string out;
  object top{out};
  auto& steps = top.value_of("steps");
  steps += '[';
  for (size_t k = 0; k < steps_.size(); ++k) {
    if (k > 0) {
      steps += ',';
    }
    object step{steps};
    auto& calls = step.value_of("calls");
    calls += '[';
    for (size_t i = 0; i < steps_[k].calls.size(); ++i) {
      const auto& c = steps_[k].calls[i];
      if (i > 0) {
        calls += ',';
      }
      object call{calls};
      call.str("capability", c.capability);
      call.str_if("prompt_hash", c.prompt_hash);
      call.close();
    }
    calls += ']';
    auto& answers = step.value_of("answers");
    answers += '[';
    for (size_t i = 0; i < steps_[k].answers.size(); ++i) {
      if (i > 0) {
        answers += ',';
      }
      write_result(answers, steps_[k].answers[i]);
    }
    answers += ']';
    step.close();
  }
  steps += ']';
  top.close();
  return out;
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
  std::string out;
  object j{out};
  j.str("model", evidence.model);
  auto& vectors = j.value_of("vectors");
  vectors += '[';
  for (size_t i = 0; i < evidence.vectors.size(); ++i) {
    if (i > 0) {
      vectors += ',';
    }
    append_numbers(vectors, evidence.vectors[i]);
  }
  vectors += ']';
  j.close();
  return out;
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
