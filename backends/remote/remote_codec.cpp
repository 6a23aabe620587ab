#include "backends/remote/remote_codec.hpp"
#include "backends/remote/redaction.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "backends/embedding_scoring.hpp"
#include "backends/remote/codec_text.hpp"
#include "backends/rewards/reward_options.hpp"
#include "backends/rewards/text_similarity.hpp"
#include "common/distinct.hpp"
#include "common/enum_names.hpp"
#include "common/text_excerpt.hpp"
#include "common/token_estimate.hpp"

namespace arbiter::backends::remote {

namespace {

using json = nlohmann::json;
using namespace detail;

constexpr std::string_view chat_kind = "chat";
constexpr std::string_view generate_kind = "generate";
constexpr std::string_view nli_kind = "nli";
constexpr std::string_view embedding_kind = "embedding";
constexpr std::string_view info_gain_kind = "info_gain";

/// How much of a body `bad_reply` quotes.
constexpr size_t bad_reply_quote_bytes = 120;
/// How much of a model's reply a per-item failure quotes.
constexpr size_t reply_quote_bytes = 80;
/// How much of a service's own per-item error text a failure keeps.
constexpr size_t service_error_bytes = 200;
/// How much of a body is looked at (for credentials) before an excerpt is cut from it.
constexpr size_t scanned_body_bytes = 8192;

/// Throws `bad_reply` with `problem` and the opening of `body`.
[[noreturn]] void reject(const std::string& problem, std::string_view body) {
  const std::string clean = redact_secrets(printable_prefix(body, scanned_body_bytes));
  const auto head = utf8_prefix(clean, bad_reply_quote_bytes);
  std::string what = problem + "; body: \"" + std::string{head} + "\"";
  if (head.size() < clean.size() || body.size() > scanned_body_bytes) {
    what += "...";
  }
  throw bad_reply{what};
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
      throw std::invalid_argument{"remote batch mixes item kinds '" + kind + "' and '"
                                  + item->kind + "'"};
    }
  }
  return kind;
}

/// Throws std::invalid_argument unless `api` computes `kind`.
void require_support(api_kind api, const std::string& kind) {
  if (!supports(api, kind)) {
    throw std::invalid_argument{"item kind '" + kind + "' is not served by api '"
                                + to_string(api) + "'"};
  }
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

/// Throws std::invalid_argument unless `items` holds exactly one item (chat and generate calls
/// carry one prompt).
void require_one(const std::string& kind, const std::vector<shared_item>& items) {
  if (items.size() != 1) {
    throw std::invalid_argument{"a " + kind + " call carries one item, not "
                                + std::to_string(items.size())};
  }
}

/// The model call of a chat, generate or nli item; throws std::invalid_argument when it has
/// none or asks for no completions.
const model_call& call_of(const score_item& item) {
  if (!item.call) {
    throw std::invalid_argument{"a " + item.kind + " item carries no model call"};
  }
  if (item.call->n == 0) {
    throw std::invalid_argument{"a " + item.kind + " call asks for n = 0 completions"};
  }
  return *item.call;
}

// ---- requests ---------------------------------------------------------------------------

/// "model": the call's, else the source's, else none.
void put_model(json& body, const model_call& c, const endpoint_options& opts) {
  const std::string& model = c.model.empty() ? opts.model : c.model;
  if (!model.empty()) {
    body["model"] = model;
  }
}

/// Whether a model's name says it is a Qwen, as the seed judge tests it ("qwen" in any case).
bool names_qwen(const std::string& model) {
  return ascii_lower(model).find("qwen") != std::string::npos;
}

} // namespace

bool is_reasoning_model(std::string_view model) {
  auto name = ascii_lower(model.substr(model.rfind('/') == std::string_view::npos
                                         ? 0
                                         : model.rfind('/') + 1));
  for (std::string_view series : {"o1", "o3", "o4"}) {
    if (name.rfind(series, 0) == 0 && (name.size() == 2 || name[2] == '-')) {
      return true;
    }
  }
  return name.rfind("gpt-5", 0) == 0 && name.find("chat") == std::string::npos;
}

namespace {

/// A seed as the wire carries it: a signed 64-bit integer, as OpenAI's and vLLM's `seed` is.
/// The call keeps a client's -1 as 2^64 - 1; written unsigned, a provider would refuse it (or
/// sample with another seed), and a seed from `extra_info` past 2^63 - 1 too.
int64_t wire_seed(uint64_t seed) {
  return static_cast<int64_t>(seed);
}

prepared_call prepare_chat(const endpoint_options& opts, const score_item& item) {
  const auto& c = call_of(item);
  json body = json::object();
  put_model(body, c, opts);
  uint32_t max_tokens = c.max_tokens.value_or(opts.max_tokens);
  prepared_call call;
  if (!c.messages.empty()) {
    // A whole conversation (the /v1/chat/completions route): sent as it came.
    auto messages = json::parse(c.messages, nullptr, /*allow_exceptions=*/false);
    if (!messages.is_array()) {
      throw std::invalid_argument{"a chat call's messages are not a JSON list"};
    }
    if (opts.use_completions) {
      throw std::invalid_argument{
        "this source sends chat as /v1/completions (use_completions), which cannot carry a "
        "conversation"};
    }
    call.path = "/v1/chat/completions";
    body["messages"] = std::move(messages);
  } else if (opts.use_completions) {
    call.path = "/v1/completions";
    body["prompt"] = c.prompt;
  } else {
    call.path = "/v1/chat/completions";
    json message = {{"role", "user"}, {"content", c.prompt}};
    body["messages"] = json::array();
    body["messages"].push_back(std::move(message));
  }
  const auto& model = c.model.empty() ? opts.model : c.model;
  if (opts.reasoning_model.value_or(is_reasoning_model(model)) && !opts.use_completions) {
    // o1/o3/o4-mini/gpt-5 refuse max_tokens ("use max_completion_tokens") and any sampling
    // but their own.
    body["max_completion_tokens"] = max_tokens;
  } else {
    body["temperature"] = c.temperature.value_or(opts.temperature);
    body["top_p"] = c.top_p.value_or(opts.top_p);
    body["max_tokens"] = max_tokens;
  }
  body["n"] = c.n;
  if (const auto& stop = c.stop.empty() ? opts.stop : c.stop; !stop.empty()) {
    body["stop"] = stop;
  }
  if (c.seed) {
    body["seed"] = wire_seed(*c.seed);
  }
  auto thinking = c.enable_thinking ? c.enable_thinking : opts.enable_thinking;
  if (!thinking && c.messages.empty() && names_qwen(c.model.empty() ? opts.model : c.model)) {
    // A reward's prompt (a judge's), not a client's conversation: the seed judge's rule, which
    // turns a Qwen model's thinking off unless asked (its replies would spend max_tokens
    // thinking and end with no score).
    thinking = false;
  }
  if (thinking && !opts.use_completions) {
    body["chat_template_kwargs"] = {{"enable_thinking", *thinking}};
  }
  if (!c.extra_body.empty()) {
    // A pass-through client's other fields, as it sent them: the route took out those it
    // reads, so none is one set above but chat_template_kwargs, whose keys join.
    const auto extra = json::parse(c.extra_body);
    for (auto at = extra.begin(); at != extra.end(); ++at) {
      auto& slot = body[at.key()];
      if (slot.is_object() && at->is_object()) {
        slot.update(*at);
      } else {
        slot = *at;
      }
    }
  }
  call.body = dump(body);
  return call;
}

prepared_call prepare_generate(const endpoint_options& opts, const score_item& item) {
  const auto& c = call_of(item);
  json body = json::object();
  put_model(body, c, opts);
  uint32_t max_tokens = c.max_tokens.value_or(opts.max_tokens);
  prepared_call call;
  call.path = "/v1/completions";
  body["prompt"] = c.prompt;
  body["n"] = c.n;
  body["temperature"] = c.temperature.value_or(opts.temperature);
  if (c.top_p) {
    body["top_p"] = *c.top_p;
  }
  body["max_tokens"] = max_tokens;
  if (!c.stop.empty()) {
    body["stop"] = c.stop;
  }
  if (c.seed) {
    body["seed"] = wire_seed(*c.seed);
  }
  body["logprobs"] = 1;
  call.body = dump(body);
  return call;
}

prepared_call prepare_nli(const std::vector<shared_item>& items) {
  prepared_call call;
  call.path = "/predict";
  json pairs = json::array();
  for (const auto& item : items) {
    const auto& c = call_of(*item);
    pairs.push_back(json::array({c.prompt, c.hypothesis}));
  }
  json body = json::object();
  body["inputs"] = std::move(pairs);
  // As the local NLI model does: a pair past the model's length is cut, not refused.
  body["truncate"] = true;
  call.body = dump(body);
  return call;
}

prepared_call prepare_embedding(api_kind api, const endpoint_options& opts,
                                const std::vector<shared_item>& items) {
  prepared_call call;
  auto inputs = embedding_texts(items, opts.model);
  call.spans = std::move(inputs.spans);
  // A text repeated in the batch (a GRPO group's reference, once per rollout) is sent once:
  // the provider charges, and TEI counts against its batch limit, every input.
  const auto distinct = find_distinct(inputs.texts);
  std::vector<std::string> texts;
  texts.reserve(distinct.first.size());
  for (auto i : distinct.first) {
    texts.push_back(std::move(inputs.texts[i]));
  }
  call.input_count = static_cast<uint32_t>(texts.size());
  json body = json::object();
  if (api == api_kind::openai) {
    call.path = "/v1/embeddings";
    if (!opts.model.empty()) {
      body["model"] = opts.model;
    }
    body["input"] = std::move(texts);
  } else {
    call.path = "/embed";
    body["inputs"] = std::move(texts);
    // As sentence-transformers and the local embedder do: a text past the model's length is
    // embedded by its beginning. TEI refuses it with a 413 otherwise, unless started with
    // `--auto-truncate`.
    body["truncate"] = true;
  }
  call.body = dump(body);
  return call;
}

/// Why the IG service cannot score `item` (a variant it does not compute), or nullopt.
std::optional<std::string> info_gain_refusal(const score_item& item) {
  auto variant = parse_info_gain_options(merged_options(item)).variant;
  if (variant == rewards::ig_variant::soft) {
    return std::nullopt;
  }
  return std::string{"the IG service computes only variant soft; ask for variant '"}
         + rewards::to_string(variant) + "' from a reward with generate and nli sources";
}

prepared_call prepare_info_gain(const std::vector<shared_item>& items) {
  prepared_call call;
  call.path = "/compute_info_gain";
  json list = json::array();
  std::optional<std::string> refused;
  for (const auto& item : items) {
    if (auto reason = info_gain_refusal(*item)) {
      refused = std::move(reason);
      continue;
    }
    auto options = merged_options(*item);
    auto question = first_string(options, {"question", "problem"}, "");
    auto context = first_string(options, {"context"}, item->solution_str);
    json entry = json::object();
    entry["question"] = std::move(question);
    entry["context"] = std::move(context);
    entry["answers"] = item->ground_truth;
    list.push_back(std::move(entry));
  }
  if (list.empty()) {
    throw std::invalid_argument{*refused};
  }
  json body = json::object();
  body["items"] = std::move(list);
  call.body = dump(body);
  return call;
}

// ---- replies ----------------------------------------------------------------------------

/// How many choices a reply must hold for a call with n completions.
enum class choice_count : uint8_t { at_least_n, exactly_n };

/// The reply's choices, ordered by "index" when every choice carries one (a repeated index is
/// a bad reply), and as many as `count` asks of `n`. `what` names the reply in messages
/// ("chat", "completion").
std::vector<const json*> ordered_choices(const json& doc, const std::string& what, uint32_t n,
                                         choice_count count, std::string_view body) {
  if (!doc.is_object()) {
    reject(what + " reply is not a JSON object", body);
  }
  auto choices = doc.find("choices");
  if (choices == doc.end() || !choices->is_array() || choices->empty()) {
    reject(what + " reply has no choices", body);
  }
  std::vector<const json*> out;
  bool indexed = true;
  for (const auto& choice : *choices) {
    if (!choice.is_object()) {
      reject(what + " reply's choices[" + std::to_string(out.size()) + "] is not an object", body);
    }
    auto index = choice.find("index");
    indexed = indexed && index != choice.end() && index->is_number_integer();
    out.push_back(&choice);
  }
  if (out.size() < n && !out.empty()) {
    // A well-formed reply with fewer choices: the server ignores or caps n.
    throw unfit_reply{what + " reply has " + std::to_string(out.size()) + " choices for n = "
                      + std::to_string(n) + " (the source does not serve n > "
                      + std::to_string(out.size()) + ")"};
  }
  if (out.size() < n || (count == choice_count::exactly_n && out.size() != n)) {
    reject(what + " reply has " + std::to_string(out.size()) + " choices for n = "
             + std::to_string(n),
           body);
  }
  if (!indexed) {
    return out;
  }
  auto index_of = [](const json* choice) { return choice->at("index").get<int64_t>(); };
  std::stable_sort(out.begin(), out.end(),
                   [&](const json* a, const json* b) { return index_of(a) < index_of(b); });
  for (size_t i = 1; i < out.size(); ++i) {
    if (index_of(out[i]) == index_of(out[i - 1])) {
      reject(what + " reply repeats choice index " + std::to_string(index_of(out[i])), body);
    }
  }
  return out;
}

/// A choice's "finish_reason" when it is a string, else empty.
std::string finish_reason_of(const json& choice) {
  auto finish = choice.find("finish_reason");
  return finish != choice.end() && finish->is_string() ? finish->get<std::string>()
                                                        : std::string{};
}

/// The token count `key` of the reply's `usage` object; 0 when it gives none.
uint32_t usage_count(const json& doc, const char* key) {
  auto usage = doc.find("usage");
  if (usage == doc.end() || !usage->is_object()) {
    return 0;
  }
  auto found = usage->find(key);
  if (found == usage->end() || !found->is_number_unsigned()) {
    return 0;
  }
  return static_cast<uint32_t>(
      std::min<uint64_t>(found->get<uint64_t>(), std::numeric_limits<uint32_t>::max()));
}

/// The outcome of a call answered with `output`, plus the reply's `model` and `usage` token
/// counts, where it gives them.
item_outcome answered(const json& doc, std::shared_ptr<model_output> output) {
  if (auto model = doc.find("model"); model != doc.end() && model->is_string()) {
    output->model = model->get<std::string>();
  }
  output->prompt_tokens = usage_count(doc, "prompt_tokens");
  output->completion_tokens = usage_count(doc, "completion_tokens");
  item_outcome answer;
  answer.output = std::move(output);
  return answer;
}

item_outcome parse_chat(const json& doc, const endpoint_options& opts, const score_item& item,
                        std::string_view body) {
  auto choices = ordered_choices(doc, "chat", call_of(item).n, choice_count::at_least_n, body);
  auto output = std::make_shared<model_output>();
  for (size_t i = 0; i < choices.size(); ++i) {
    const json& choice = *choices[i];
    std::string where = "choices[" + std::to_string(i) + "]";
    const json* holder = &choice;
    const char* field = "text";
    if (!opts.use_completions) {
      auto message = choice.find("message");
      if (message == choice.end() || !message->is_object()) {
        reject("chat reply's " + where + " has no message object", body);
      }
      holder = &*message;
      field = "content";
    }
    auto content = holder->find(field);
    if ((content == holder->end() || content->is_null())
        && finish_reason_of(choice) == "content_filter") {
      // Filtered choice by choice (Azure): a property of this text, not of the source. The
      // choice stays, empty: a judge leaves it out of its votes, a client sees the finish.
      generated_text text;
      text.finish_reason = "content_filter";
      output->texts.push_back(std::move(text));
      continue;
    }
    if (content == holder->end()) {
      reject("chat reply's " + where + " has no " + field, body);
    }
    const bool passthrough = item.reward == passthrough_chat_reward;
    std::string reasoning;
    if (auto r = holder->find("reasoning_content"); passthrough && r != holder->end()
                                                      && r->is_string()) {
      reasoning = r->get<std::string>();
    }
    if (content->is_null() && passthrough) {
      // Passed on as given: a reasoning model cut off while it reasoned, or a refusal.
      generated_text text;
      text.no_content = true;
      text.reasoning = std::move(reasoning);
      if (auto refusal = holder->find("refusal"); refusal != holder->end() && refusal->is_string()) {
        text.refusal = refusal->get<std::string>();
      }
      text.finish_reason = finish_reason_of(choice);
      output->texts.push_back(std::move(text));
      continue;
    }
    if (content->is_null()) {
      auto refusal = holder->find("refusal");
      if (refusal != holder->end() && refusal->is_string()) {
        return failure("judge refused: "
                       + quote_opening(refusal->get_ref<const std::string&>(), reply_quote_bytes));
      }
      std::string reason = "judge reply has no " + std::string{field};
      if (choices.size() > 1) {
        reason += " in " + where;
      }
      auto finish = choice.find("finish_reason");
      if (finish != choice.end() && finish->is_string()) {
        reason += " (finish_reason " + finish->get<std::string>() + ")";
      }
      return failure(std::move(reason));
    }
    if (!content->is_string()) {
      reject("chat reply's " + where + " " + field + " is not a string", body);
    }
    generated_text text;
    text.text = content->get<std::string>();
    text.finish_reason = finish_reason_of(choice);
    text.reasoning = std::move(reasoning);
    if (auto refusal = holder->find("refusal");
        passthrough && refusal != holder->end() && refusal->is_string()) {
      text.refusal = refusal->get<std::string>();
    }
    output->texts.push_back(std::move(text));
  }
  return answered(doc, std::move(output));
}

item_outcome parse_generate(const json& doc, const score_item& item, std::string_view body) {
  auto choices =
    ordered_choices(doc, "completion", call_of(item).n, choice_count::exactly_n, body);
  auto output = std::make_shared<model_output>();
  for (size_t i = 0; i < choices.size(); ++i) {
    const json& choice = *choices[i];
    std::string where = "completion choice " + std::to_string(i);
    if (auto index = choice.find("index");
        index != choice.end() && index->is_number_integer()
        && index->get<int64_t>() != static_cast<int64_t>(i)) {
      reject(where + " has index " + dump(*index) + " (a one-prompt call numbers its choices 0 to n-1)",
             body);
    }
    auto text = choice.find("text");
    if (text == choice.end() || !text->is_string()) {
      reject(where + " has no text", body);
    }
    const json* values = nullptr;
    if (auto logprobs = choice.find("logprobs"); logprobs != choice.end() && logprobs->is_object()) {
      if (auto found = logprobs->find("token_logprobs");
          found != logprobs->end() && found->is_array()) {
        values = &*found;
      }
    }
    double sum = 0.0;
    uint32_t tokens = 0;
    if (values != nullptr) {
      for (const auto& v : *values) {
        if (v.is_null()) {
          continue;
        }
        if (!v.is_number()) {
          reject(where + " has a token_logprob that is neither a number nor null", body);
        }
        sum += v.get<double>();
        ++tokens;
      }
    }
    if (tokens == 0 && values != nullptr && text->get_ref<const std::string&>().empty()) {
      // The server does return logprobs, but none for this text: an empty sample whose stop
      // token went unreported. Its probability is unknown, and ΔIG weighs every sample by it.
      reject(where + " has an empty token_logprobs list (a sample of no tokens, without the "
                     "log-probability of the token that stopped it)",
             body);
    }
    if (tokens == 0) {
      reject(where + " has no token_logprobs (does the server return logprobs?)", body);
    }
    generated_text out;
    out.text = std::string{rewards::python_strip(text->get_ref<const std::string&>())};
    out.mean_logprob = sum / tokens;
    out.tokens = tokens;
    out.finish_reason = finish_reason_of(choice);
    output->texts.push_back(std::move(out));
  }
  return answered(doc, std::move(output));
}

/// The class probabilities in the TEI /predict result for pair `index`: a list of
/// {"label","score"} objects. Throws bad_reply when it has another shape or no entailment.
std::shared_ptr<model_output> nli_output(const json& labels, size_t index, std::string_view body) {
  std::string where = "NLI result " + std::to_string(index);
  if (!labels.is_array()) {
    reject(where + " is not a list of labels", body);
  }
  auto output = std::make_shared<model_output>();
  bool entailment = false;
  std::string seen;
  bool unnamed = false;
  for (const auto& entry : labels) {
    if (!entry.is_object()) {
      reject(where + " holds an entry that is not an object", body);
    }
    auto label = entry.find("label");
    if (label == entry.end() || !label->is_string()) {
      continue;
    }
    const auto& name = label->get_ref<const std::string&>();
    seen += seen.empty() ? name : ", " + name;
    auto low = ascii_lower(name);
    unnamed = unnamed || low.rfind("label_", 0) == 0;
    double* slot = nullptr;
    if (low == "entailment" || low == "entail") {
      slot = &output->entailment;
      entailment = true;
    } else if (low == "neutral") {
      slot = &output->neutral;
    } else if (low == "contradiction" || low == "contradict") {
      slot = &output->contradiction;
    } else {
      continue;
    }
    auto score = entry.find("score");
    if (score == entry.end() || !score->is_number()) {
      reject(where + "'s " + name + " entry has no numeric score", body);
    }
    *slot = score->get<double>();
  }
  if (!entailment) {
    std::string problem = where + " has no entailment label (labels: "
                          + (seen.empty() ? std::string{"none"} : seen) + ")";
    if (unnamed) {
      problem += "; LABEL_n names mean the server's model config has no id2label";
    }
    reject(problem, body);
  }
  return output;
}

std::vector<item_outcome> parse_nli(const json& doc, const std::vector<shared_item>& items,
                                    std::string_view body) {
  if (!doc.is_array()) {
    reject("NLI reply is not a list", body);
  }
  // One pair may come back as its bare list of labels.
  const json* results = &doc;
  json wrapped;
  if (items.size() == 1 && !doc.empty() && doc.front().is_object()) {
    wrapped = json::array({doc});
    results = &wrapped;
  }
  if (results->size() != items.size()) {
    reject("NLI reply has " + std::to_string(results->size()) + " results for "
             + std::to_string(items.size()) + " pairs",
           body);
  }
  std::vector<item_outcome> outcomes(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    outcomes[i].output = nli_output((*results)[i], i, body);
  }
  return outcomes;
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

/// `reported` prompt tokens of one embedding call shared out over its texts: each distinct
/// text gets a part in proportion to its estimated tokens (at least 1), at its first place in
/// `texts` (its repeats get 0), and the parts add up to `reported` exactly (largest
/// remainders).
std::vector<uint32_t> share_out_tokens(const std::vector<std::string>& texts,
                                       const distinct_strings& distinct, uint64_t reported) {
  std::vector<uint32_t> out(texts.size(), 0);
  if (distinct.first.empty()) {
    return out;
  }
  std::vector<uint64_t> weight(distinct.first.size());
  uint64_t total = 0;
  for (size_t d = 0; d < weight.size(); ++d) {
    weight[d] = std::max<uint64_t>(estimate_text_tokens(texts[distinct.first[d]]), 1);
    total += weight[d];
  }
  std::vector<uint64_t> part(weight.size());
  std::vector<std::pair<uint64_t, size_t>> remainders;  // (remainder, distinct index)
  remainders.reserve(weight.size());
  uint64_t given = 0;
  for (size_t d = 0; d < weight.size(); ++d) {
    part[d] = reported * weight[d] / total;  // reported < 2^32, a weight < 2^31: no overflow
    given += part[d];
    remainders.emplace_back(reported * weight[d] % total, d);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < reported; ++k, ++given) {
    ++part[remainders[k % remainders.size()].second];
  }
  for (size_t d = 0; d < part.size(); ++d) {
    out[distinct.first[d]] = static_cast<uint32_t>(part[d]);
  }
  return out;
}

std::vector<item_outcome> parse_embedding(api_kind api, const endpoint_options& opts,
                                          const json& doc, const prepared_call& call,
                                          const std::vector<shared_item>& items,
                                          std::string_view body) {
  // The texts are rebuilt from the items (as prepare_call built them) so that the spans can
  // be checked against them.
  auto inputs = embedding_texts(items, opts.model);
  const auto distinct = find_distinct(inputs.texts);
  if (distinct.first.size() != call.input_count || inputs.spans.size() != call.spans.size()) {
    throw std::invalid_argument{"embedding call does not match its items"};
  }
  for (size_t i = 0; i < inputs.spans.size(); ++i) {
    if (inputs.spans[i].first != call.spans[i].first
        || inputs.spans[i].references != call.spans[i].references) {
      throw std::invalid_argument{"embedding call span " + std::to_string(i)
                                  + " does not match its item"};
    }
  }
  auto sent = read_vectors(api, doc, call.input_count, body);
  std::vector<std::vector<double>> vectors;
  vectors.reserve(inputs.texts.size());
  for (auto d : distinct.same_as) {
    vectors.push_back(sent[d]);
  }
  // OpenAI's `usage` gives one count for the whole call (TEI's /embed gives none). Shared out
  // over the items, it reaches the step accounts, the token metrics and costs, and token
  // pacing's learned ratio, and the items' counts add up to the provider's.
  const uint64_t reported = usage_count(doc, "prompt_tokens");
  if (reported > 0) {
    inputs.tokens = share_out_tokens(inputs.texts, distinct, reported);
  }
  std::vector<item_outcome> outcomes;
  try {
    outcomes = score_embeddings(items, opts.model, inputs, vectors, call.keep_vectors);
  } catch (const embedding_mismatch& e) {
    reject(e.what(), body);
  }
  if (reported > 0) {
    charge_reward_tokens(items, inputs, outcomes);
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
  // Items prepare_call left out fail here; the others take the reply's entries in order.
  std::vector<std::optional<std::string>> refusals;
  size_t sent = 0;
  for (const auto& item : items) {
    refusals.push_back(info_gain_refusal(*item));
    sent += refusals.back() ? 0 : 1;
  }
  if (scores->size() != sent) {
    reject("info gain reply has " + std::to_string(scores->size()) + " scores for "
             + std::to_string(sent) + " items",
           body);
  }
  auto list = [&doc](const char* key) -> const json* {
    auto found = doc.find(key);
    return found != doc.end() && found->is_array() ? &*found : nullptr;
  };
  const json* errors = list("errors");
  const json* details = list("details");
  std::vector<item_outcome> outcomes;
  outcomes.reserve(items.size());
  size_t k = 0;
  for (auto& refusal : refusals) {
    if (refusal) {
      outcomes.push_back(failure(std::move(*refusal)));
      continue;
    }
    const json& score = (*scores)[k];
    if (score.is_number()) {
      auto outcome = success(score.get<double>());
      if (details != nullptr && k < details->size() && (*details)[k].is_object()) {
        outcome.detail = dump((*details)[k]);
      }
      outcomes.push_back(std::move(outcome));
    } else if (score.is_null()) {
      std::string reason = "info gain service returned no score";
      if (errors != nullptr && k < errors->size() && (*errors)[k].is_string()) {
        reason += ": " + quote_opening((*errors)[k].get_ref<const std::string&>(),
                                       service_error_bytes);
      }
      outcomes.push_back(failure(std::move(reason)));
    } else {
      reject("info gain score " + std::to_string(k) + " is neither a number nor null", body);
    }
    ++k;
  }
  return outcomes;
}

} // namespace

constexpr auto api_kind_names = names_of<api_kind::ig_service>("openai", "tei", "ig_service");

const char* to_string(api_kind k) noexcept {
  return api_kind_names[k];
}

std::optional<api_kind> parse_api_kind(std::string_view name) {
  return api_kind_names.parse(name);
}

bool supports(api_kind api, std::string_view item_kind) noexcept {
  switch (api) {
    case api_kind::openai:
      return item_kind == chat_kind || item_kind == generate_kind || item_kind == embedding_kind;
    case api_kind::tei:
      return item_kind == embedding_kind || item_kind == nli_kind;
    case api_kind::ig_service:
      return item_kind == info_gain_kind;
  }
  return false;
}

prepared_call prepare_call(api_kind api, const endpoint_options& opts,
                           const std::vector<shared_item>& items) {
  const std::string& kind = batch_kind(items);
  require_support(api, kind);
  if (kind == chat_kind) {
    require_one(kind, items);
    return prepare_chat(opts, *items.front());
  }
  if (kind == generate_kind) {
    require_one(kind, items);
    return prepare_generate(opts, *items.front());
  }
  if (kind == nli_kind) {
    return prepare_nli(items);
  }
  if (kind == embedding_kind) {
    return prepare_embedding(api, opts, items);
  }
  return prepare_info_gain(items);
}

std::vector<std::string> split_embedding_call(const prepared_call& call, uint32_t max_inputs) {
  if (max_inputs == 0 || call.input_count <= max_inputs
      || (call.path != "/embed" && call.path != "/v1/embeddings")) {
    return {call.body};
  }
  auto body = json::parse(call.body);
  const char* key = call.path == "/embed" ? "inputs" : "input";
  const json all = std::move(body[key]);
  std::vector<std::string> parts;
  for (size_t at = 0; at < all.size(); at += max_inputs) {
    const auto n = std::min<size_t>(max_inputs, all.size() - at);
    body[key] = json(all.begin() + static_cast<std::ptrdiff_t>(at),
                     all.begin() + static_cast<std::ptrdiff_t>(at + n));
    parts.push_back(dump(body));
  }
  return parts;
}

std::string join_embedding_replies(api_kind api, const std::vector<std::string>& replies) {
  if (replies.size() == 1) {
    return replies.front();
  }
  if (api == api_kind::tei) {
    json vectors = json::array();
    for (const auto& reply : replies) {
      auto doc = json::parse(reply, nullptr, /*allow_exceptions=*/false);
      if (!doc.is_array()) {
        return reply;
      }
      for (auto& v : doc) {
        vectors.push_back(std::move(v));
      }
    }
    return dump(vectors);
  }
  json out = json::object();
  json data = json::array();
  uint64_t prompt_tokens = 0;
  uint64_t total_tokens = 0;
  for (const auto& reply : replies) {
    auto doc = json::parse(reply, nullptr, /*allow_exceptions=*/false);
    auto part = doc.is_object() ? doc.find("data") : doc.end();
    if (part == doc.end() || !part->is_array()) {
      return reply;
    }
    const auto offset = static_cast<int64_t>(data.size());
    for (auto& entry : *part) {
      if (entry.is_object() && entry.contains("index") && entry["index"].is_number_integer()) {
        entry["index"] = entry["index"].get<int64_t>() + offset;
      }
      data.push_back(std::move(entry));
    }
    if (out.empty() && doc.contains("model")) {
      out["model"] = doc["model"];
    }
    prompt_tokens += usage_count(doc, "prompt_tokens");
    total_tokens += usage_count(doc, "total_tokens");
  }
  out["object"] = "list";
  out["data"] = std::move(data);
  if (prompt_tokens > 0 || total_tokens > 0) {
    out["usage"] = {{"prompt_tokens", prompt_tokens}, {"total_tokens", total_tokens}};
  }
  return dump(out);
}

std::pair<uint64_t, uint64_t> reply_usage(std::string_view body) noexcept {
  auto doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    return {0, 0};
  }
  return {usage_count(doc, "prompt_tokens"), usage_count(doc, "completion_tokens")};
}

std::vector<item_outcome> parse_reply(api_kind api, const endpoint_options& opts,
                                      const prepared_call& call,
                                      const std::vector<shared_item>& items,
                                      std::string_view body) {
  const std::string& kind = batch_kind(items);
  require_support(api, kind);
  if (kind == chat_kind || kind == generate_kind) {
    require_one(kind, items);
  }
  auto doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    reject(std::string{"reply to "} + (call.path.empty() ? "the call" : call.path)
             + " is not valid JSON",
           body);
  }
  try {
    if (kind == chat_kind) {
      return {parse_chat(doc, opts, *items.front(), body)};
    }
    if (kind == generate_kind) {
      return {parse_generate(doc, *items.front(), body)};
    }
    if (kind == nli_kind) {
      return parse_nli(doc, items, body);
    }
    if (kind == embedding_kind) {
      return parse_embedding(api, opts, doc, call, items, body);
    }
    return parse_info_gain(doc, items, body);
  } catch (const json::exception& e) {
    // Every access above checks its type first; this is a guard, not a path.
    reject(std::string{"reply has an unexpected shape ("} + e.what() + ")", body);
  }
}

} // namespace arbiter::backends::remote
