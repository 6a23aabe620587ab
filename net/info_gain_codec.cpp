#include "net/info_gain_codec.hpp"

#include <nlohmann/json.hpp>

#include "backends/rewards/reward_options.hpp"
#include "net/json_body.hpp"

namespace arbiter::net {

namespace {

using json = nlohmann::json;

/// The problem with an IG item, or empty when it has question, context and answers.
std::string check_item(const json& entry, score_item& item, json& extra) {
  if (!entry.is_object()) {
    return "item is not an object";
  }
  for (const char* key : {"question", "context"}) {
    auto found = entry.find(key);
    if (found == entry.end()) {
      return std::string{"missing field '"} + key + "'";
    }
    if (!found->is_string()) {
      return std::string{"field '"} + key + "' is not a string";
    }
    extra[key] = *found;
  }
  auto answers = entry.find("answers");
  if (answers == entry.end()) {
    return "missing field 'answers'";
  }
  if (answers->is_string()) {
    item.ground_truth.push_back(answers->get<std::string>());
  } else if (answers->is_array()) {
    for (const auto& a : *answers) {
      if (!a.is_string()) {
        return "field 'answers' holds a value that is not a string";
      }
      item.ground_truth.push_back(a.get<std::string>());
    }
  } else {
    return "field 'answers' is neither a string nor a list of strings";
  }
  item.solution_str = extra["context"].get<std::string>();
  return {};
}

} // namespace

bool decode_info_gain_request(std::string_view body, const codec_context& ctx,
                              info_gain_request_body& out, codec_error& err) {
  // As every route, a key given twice is refused by its path (`items[0].question`): nlohmann
  // kept the last unseen.
  json doc;
  if (!parse_json_object(body, doc, err)) {
    if (err.message == "body: not valid JSON" || err.message == "body: expected a JSON object") {
      err.message = "body: expected a JSON object with an 'items' list";
    }
    return false;
  }
  out.priority = ctx.default_priority;
  out.deadline = ctx.default_deadline;
  for (const char* optional : {"reward", "priority", "deadline_ms", "options"}) {
    if (auto found = doc.find(optional); found != doc.end() && found->is_null()) {
      doc.erase(found); // as absent: what a client serializing its unset fields sends
    }
  }
  std::string reward_name = "info_gain";
  if (auto r = doc.find("reward"); r != doc.end()) {
    if (!r->is_string()) {
      err = {refusal::invalid, "reward", "reward: expected a string"};
      return false;
    }
    reward_name = r->get<std::string>();
  }
  const auto* reward = ctx.catalog->find(reward_name);
  if (reward == nullptr || reward->kind != "info_gain") {
    err = {refusal::invalid, "reward",
           "reward: '" + reward_name + "' is not an info_gain reward (GET /info lists them)"};
    return false;
  }
  if (auto p = doc.find("priority"); p != doc.end()) {
    bool known = false;
    for (size_t i = 0; p->is_string() && i < ctx.priorities.size(); ++i) {
      if (ctx.priorities[i] == p->get<std::string>()) {
        out.priority = i;
        known = true;
      }
    }
    if (!known) {
      err = {refusal::invalid, "priority", "priority: expected the name of a priority class"};
      return false;
    }
  }
  if (auto d = doc.find("deadline_ms"); d != doc.end()) {
    if (!d->is_number_integer() || d->get<int64_t>() < 1
        || d->get<int64_t>() > ctx.max_deadline.count()) {
      err = {refusal::invalid, "deadline_ms",
             "deadline_ms: expected an integer between 1 and "
               + std::to_string(ctx.max_deadline.count()) + " (scheduler.max_deadline_ms)"};
      return false;
    }
    out.deadline = std::chrono::milliseconds{d->get<int64_t>()};
  }
  json options = json::object();
  if (auto o = doc.find("options"); o != doc.end()) {
    if (!o->is_object()) {
      err = {refusal::invalid, "options", "options: expected an object of info_gain options"};
      return false;
    }
    options = *o;
    auto merged = backends::merged_options(reward->options, options.dump());
    if (auto problem = backends::check_options("info_gain", merged)) {
      err = {refusal::invalid, "options." + problem->key, "options." + problem->key + ": " + problem->reason};
      return false;
    }
  }
  auto items = doc.find("items");
  if (items == doc.end() || !items->is_array()) {
    err = {refusal::invalid, "items", "items: expected a list of {question, context, answers}"};
    return false;
  }
  if (items->size() > ctx.max_batch_items) {
    err = {refusal::too_large, "items", "items: " + std::to_string(items->size()) + " items; at most "
                           + std::to_string(ctx.max_batch_items) + " (server.max_batch_items)"};
    return false;
  }
  for (const auto& entry : *items) {
    score_item item;
    json extra = options;
    auto problem = check_item(entry, item, extra);
    if (!problem.empty()) {
      out.positions.push_back(-1);
      out.errors.push_back(std::move(problem));
      continue;
    }
    item.reward = reward->name;
    item.kind = reward->kind;
    item.capability = reward->capability;
    item.options = reward->options;
    item.fallback = reward->fallback;
    item.route_suffix = reward->route_suffix;
    item.extra_info = extra.dump(-1, ' ', false, json::error_handler_t::replace);
    out.positions.push_back(static_cast<int64_t>(out.items.size()));
    out.errors.emplace_back();
    out.items.push_back(std::move(item));
  }
  return true;
}

std::string encode_info_gain_response(const info_gain_request_body& req,
                                      const std::vector<item_result>& results) {
  json scores = json::array();
  json errors = json::array();
  json details = json::array();
  json provenance = json::array();
  for (size_t i = 0; i < req.positions.size(); ++i) {
    auto at = req.positions[i];
    if (at < 0 || static_cast<size_t>(at) >= results.size()) {
      scores.push_back(nullptr);
      errors.push_back(req.errors[i].empty() ? "not scored" : req.errors[i]);
      details.push_back(nullptr);
      provenance.push_back(nullptr);
      continue;
    }
    const auto& r = results[static_cast<size_t>(at)];
    bool failed = r.status == item_status::failed;
    scores.push_back(failed ? json(nullptr) : json(r.score));
    errors.push_back(failed ? json(std::string{to_string(r.code)} + ": " + r.error)
                            : json(nullptr));
    json detail = r.detail.empty() ? json(nullptr) : json::parse(r.detail, nullptr, false);
    details.push_back(detail.is_discarded() ? json(nullptr) : detail);
    json p = {{"status", to_string(r.status)},
              {"source", r.source.empty() ? json(nullptr) : json(r.source)},
              {"cached", r.cached},
              {"attempts", r.attempts},
              {"queue_ms", r.queue_ms},
              {"run_ms", r.run_ms}};
    if (!r.sources.empty()) {
      p["sources"] = r.sources;
    }
    provenance.push_back(std::move(p));
  }
  json out = {{"scores", scores}, {"errors", errors}, {"details", details},
              {"results", provenance}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace arbiter::net
