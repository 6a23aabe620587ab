#include "net/score_codec.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "backends/rewards/reward_kinds.hpp"
#include "backends/rewards/reward_options.hpp"
#include "net/json_body.hpp"
#include "net/json_reading.hpp"
#include "net/number_text.hpp"

namespace arbiter::net {

namespace {

/// A group name or step tag: a string (verl's uid) or an integer (TRL's prompt index, a step
/// number); null leaves it empty.
/// Whether `value` is JSON `null` (then consumed).
bool is_null(ondemand::value& value) {
  bool null = false;
  return !value.is_null().get(null) && null;
}

bool read_tag(ondemand::value value, std::string& out, const std::string& field,
                codec_error& err) {
  ondemand::json_type type;
  if (!read_type(value, type, field, err)) {
    return false;
  }
  out.clear();
  if (type == ondemand::json_type::null) {
    return true;
  }
  if (type == ondemand::json_type::number) {
    // An integer of any size is named by its digits, as Python's str() writes it; a token
    // with a fraction or an exponent is a float, which names no tag.
    std::string_view token = value.raw_json_token();
    auto text = python_number_text(token);
    if (!text) {
      err = {refusal::invalid, field, field + ": malformed number"}; // 01, not JSON
      return false;
    }
    if (token.find_first_of(".eE") != std::string_view::npos) {
      err = {refusal::invalid, field, field + ": expected a string or an integer"};
      return false;
    }
    out = std::move(*text);
  } else if (type == ondemand::json_type::string) {
    if (!read_string(value, out, field, err)) {
      return false;
    }
  } else {
    err = {refusal::invalid, field, field + ": expected a string or an integer"};
    return false;
  }
  if (out.size() > max_tag_bytes) {
    err = {refusal::invalid, field,
           field + ": longer than " + std::to_string(max_tag_bytes) + " bytes"};
    return false;
  }
  return true;
}

bool read_item(ondemand::object object, size_t index, const codec_context& ctx,
               score_item& item, codec_error& err) {
  auto prefix = "items[" + std::to_string(index) + "]";
  bool has_solution = false;
  bool has_ground_truth = false;
  bool has_reward = false;
  auto read = [&](std::string_view key, ondemand::value& value) {
    auto name = field_path(prefix, key);
    if ((key == "reward" || key == "data_source") && is_null(value)) {
      return true; // as absent
    }
    if (key == "solution_str") {
      has_solution = true;
      if (!read_string(value, item.solution_str, name, err)) {
        return false;
      }
    } else if (key == "ground_truth") {
      has_ground_truth = true;
      item.ground_truth.clear();
      if (!read_references(value, item.ground_truth, name, err)) {
        return false;
      }
    } else if (key == "reward") {
      has_reward = true;
      if (!read_string(value, item.reward, name, err)) {
        return false;
      }
    } else if (key == "data_source") {
      if (!read_string(value, item.data_source, name, err)) {
        return false;
      }
    } else if (key == "group") {
      if (!read_tag(value, item.group, name, err)) {
        return false;
      }
    } else if (key == "extra_info") {
      ondemand::json_type type;
      if (!read_type(value, type, name, err)) {
        return false;
      }
      if (type == ondemand::json_type::null) {
        return true;
      }
      ondemand::object extra;
      std::string_view raw;
      if (type != ondemand::json_type::object || value.get_object().get(extra)
          || extra.raw_json().get(raw)) {
        err = {refusal::invalid, name, name + ": expected an object"};
        return false;
      }
      // A lone surrogate escape (Python's json.dumps writes one from broken dataset text) is
      // read as U+FFFD, as in every other string: it failed the whole batch.
      std::string fixed;
      codec_error deep;
      if (!check_json_text(raw, fixed, deep)) {
        err = {refusal::invalid, name,
               name + ": nested deeper than " + std::to_string(max_json_depth) + " levels"};
        return false;
      }
      if (!fixed.empty()) {
        raw = fixed;
      }
      std::string twice;
      if (!well_formed_json(raw, &twice)) {
        if (!twice.empty()) {
          // As in the body: a rule reward reading the first and a Python one the last would
          // score the item by different values.
          err = {refusal::invalid, name + "." + twice, name + "." + twice + ": given twice"};
        } else {
          err = {refusal::invalid, name, name + ": malformed JSON"};
        }
        return false;
      }
      item.extra_info.assign(raw);
    }
    // Other keys (verl passes its own) are ignored.
    return true;
  };
  if (!read_fields(object, prefix, err, read)) {
    return false;
  }
  if (!has_solution) {
    err = codec_error::missing(prefix + ".solution_str");
    return false;
  }
  if (!has_ground_truth) {
    err = codec_error::missing(prefix + ".ground_truth");
    return false;
  }
  const backends::reward_entry* reward = nullptr;
  if (has_reward) {
    reward = ctx.catalog->find(item.reward);
    if (reward == nullptr) {
      err = {refusal::invalid, prefix + ".reward",
             prefix + ".reward: unknown reward '" + item.reward + "' (GET /info lists them)"};
      return false;
    }
  } else {
    reward = ctx.catalog->for_data_source(item.data_source);
    if (reward == nullptr && item.data_source.empty()) {
      err = {refusal::invalid, prefix + ".reward", prefix + ".reward: required when there is no data_source"};
      return false;
    }
    if (reward == nullptr) {
      std::string served;
      for (const auto& [known, name] : ctx.catalog->data_sources()) {
        served += (served.empty() ? "" : ", ") + known;
      }
      err = {refusal::invalid, prefix + ".data_source",
             prefix + ".data_source: '" + item.data_source
               + "' is not served (no [data_sources] entry matches it; served: " + served
               + "); name a reward instead"};
      return false;
    }
    if (const auto* kind = backends::find_reward_kind(reward->kind);
        kind != nullptr && kind->verl_rule) {
      // As verl's default_compute_score: the row's extra_info does not reach the function.
      item.extra_info.clear();
    }
  }
  return bind_reward(item, *reward, prefix, err);
}

bool read_items(ondemand::value value, const codec_context& ctx, score_request_body& out,
                codec_error& err) {
  ondemand::array items;
  if (value.get_array().get(items)) {
    err = {refusal::invalid, "items", "items: expected a list of items"};
    return false;
  }
  size_t index = 0;
  for (auto element : items) {
    if (index >= ctx.max_batch_items) {
      err = {refusal::too_large, "items",
             "items: more than " + std::to_string(ctx.max_batch_items)
               + " items in one request (server.max_batch_items)"};
      return false;
    }
    ondemand::object object;
    if (element.get_object().get(object)) {
      auto field = "items[" + std::to_string(index) + "]";
      err = {refusal::invalid, field, field + ": expected an object"};
      return false;
    }
    out.items.emplace_back();
    if (!read_item(object, index, ctx, out.items.back(), err)) {
      return false;
    }
    ++index;
  }
  if (index == 0) {
    err = {refusal::invalid, "items", "items: must not be empty"};
    return false;
  }
  return true;
}

bool read_priority(ondemand::value value, const codec_context& ctx, score_request_body& out,
                   codec_error& err) {
  std::string name;
  return read_string(value, name, "priority", err) && priority_named(name, ctx, out.priority, err);
}

bool read_deadline(ondemand::value value, const codec_context& ctx, score_request_body& out,
                   codec_error& err) {
  int64_t ms = 0;
  if (value.get_int64().get(ms)) {
    err = {refusal::invalid, "deadline_ms",
           malformed_number(value) ? "deadline_ms: malformed number"
                                   : "deadline_ms: expected an integer number of milliseconds"};
    return false;
  }
  return deadline_within(ms, ctx, out.deadline, err);
}

} // namespace

bool priority_named(const std::string& name, const codec_context& ctx, size_t& out,
                    codec_error& err) {
  for (size_t i = 0; i < ctx.priorities.size(); ++i) {
    if (ctx.priorities[i] == name) {
      out = i;
      return true;
    }
  }
  std::string known;
  for (const auto& p : ctx.priorities) {
    known += (known.empty() ? "" : ", ") + p;
  }
  err = {refusal::invalid, "priority", "priority: unknown class '" + name + "' (one of: " + known + ")"};
  return false;
}

bool deadline_within(int64_t ms, const codec_context& ctx, std::chrono::milliseconds& out,
                     codec_error& err) {
  if (ms <= 0 || ms > ctx.max_deadline.count()) {
    err = {refusal::invalid, "deadline_ms",
           "deadline_ms: must be between 1 and " + std::to_string(ctx.max_deadline.count())
             + " (scheduler.max_deadline_ms), got " + std::to_string(ms)};
    return false;
  }
  out = std::chrono::milliseconds{ms};
  return true;
}

bool bind_reward(score_item& item, const backends::reward_entry& reward,
                 const std::string& prefix, codec_error& err) {
  item.reward = reward.name;
  item.kind = reward.kind;
  item.capability = reward.capability;
  item.options = reward.options;
  item.fallback = reward.fallback;
  item.route_suffix = reward.route_suffix;
  if (const auto& keys = backends::option_keys(item.kind); !keys.empty()) {
    auto options = backends::merged_options(item, keys);
    if (auto problem = backends::check_options(item.kind, options)) {
      // Configured options were checked at start-up, so a bad value came with the item.
      err = {refusal::invalid, prefix + ".extra_info." + problem->key,
             prefix + ".extra_info." + problem->key + ": " + problem->reason};
      return false;
    }
  }
  if (const auto* kind = backends::find_reward_kind(item.kind);
      kind != nullptr && !kind->needs_one_of.empty()) {
    const auto given = backends::merged_options(item, kind->needs_one_of);
    const bool found = std::any_of(kind->needs_one_of.begin(), kind->needs_one_of.end(),
                                   [&](const std::string& key) {
                                     auto at = given.find(key);
                                     return at != given.end() && at->is_string();
                                   });
    if (!found) {
      std::string keys;
      for (const auto& key : kind->needs_one_of) {
        keys += (keys.empty() ? "" : " or ") + key;
      }
      const auto field = prefix + ".extra_info." + kind->needs_one_of.front();
      err = {refusal::invalid, field,
             field + ": required by the " + item.kind + " reward (" + keys
               + ": the question its samples answer)"};
      return false;
    }
  }
  return true;
}

bool decode_score_request(std::string_view body, const codec_context& ctx,
                          score_request_body& out, codec_error& err) {
  json_body_reader reader;
  ondemand::object root;
  if (!reader.open(body, root, err)) {
    return false;
  }
  out.priority = ctx.default_priority;
  out.deadline = ctx.default_deadline;
  bool has_items = false;
  std::string group;
  std::string step;
  uint32_t group_deadline_ms = 0;
  auto read = [&](std::string_view key, ondemand::value& value) {
    if (key != "items" && is_null(value)) {
      return true; // as absent: what a client serializing its unset fields sends
    }
    if (key == "items") {
      has_items = true;
      if (!read_items(value, ctx, out, err)) {
        return false;
      }
    } else if (key == "priority") {
      if (!read_priority(value, ctx, out, err)) {
        return false;
      }
    } else if (key == "deadline_ms") {
      if (!read_deadline(value, ctx, out, err)) {
        return false;
      }
    } else if (key == "group_id") {
      if (!read_tag(value, group, "group_id", err)) {
        return false;
      }
    } else if (key == "step") {
      if (!read_tag(value, step, "step", err)) {
        return false;
      }
    } else if (key == "group_deadline_ms") {
      int64_t ms = 0;
      if (value.get_int64().get(ms) || ms <= 0 || ms > ctx.max_deadline.count()) {
        err = {refusal::invalid, "group_deadline_ms",
               malformed_number(value)
                 ? std::string{"group_deadline_ms: malformed number"}
                 : "group_deadline_ms: expected an integer between 1 and "
                     + std::to_string(ctx.max_deadline.count()) + " (scheduler.max_deadline_ms)"};
        return false;
      }
      group_deadline_ms = static_cast<uint32_t>(ms);
    } else {
      auto name = field_path("body", key);
      err = {refusal::invalid, name, name + ": unknown field"};
      return false;
    }
    return true;
  };
  if (!read_fields(root, "body", err, read) || !reader.finish(err, has_items, "items")) {
    return false;
  }
  for (auto& item : out.items) {
    item.step = step;
    if (item.group.empty()) {
      item.group = group;
    }
    if (!item.group.empty()) {
      item.group_deadline_ms = group_deadline_ms;
    }
  }
  return true;
}

std::string encode_score_response(const std::vector<item_result>& results,
                                  const std::vector<scheduler::group_summary>& groups) {
  std::string out;
  out.reserve(64 + results.size() * 160);
  out += "{\"scores\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    if (results[i].status == item_status::failed) {
      out += "null";
    } else {
      append_json_number(out, results[i].score);
    }
  }
  out += "],\"results\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (i > 0) {
      out.push_back(',');
    }
    out += "{\"score\":";
    if (r.status == item_status::failed) {
      out += "null";
    } else {
      append_json_number(out, r.score);
    }
    out += ",\"status\":\"";
    out += to_string(r.status);
    out += "\",\"source\":";
    if (r.source.empty()) {
      out += "null";
    } else {
      append_json_string(out, r.source);
    }
    if (!r.sources.empty()) {
      out += ",\"sources\":[";
      for (size_t k = 0; k < r.sources.size(); ++k) {
        if (k > 0) {
          out.push_back(',');
        }
        append_json_string(out, r.sources[k]);
      }
      out += "]";
    }
    if (r.status == item_status::fallback) {
      out += ",\"fallback_reason\":";
      append_json_string(out, r.fallback_reason);
    }
    out += r.cached ? ",\"cached\":true" : ",\"cached\":false";
    out += ",\"attempts\":";
    out += std::to_string(r.attempts);
    out += ",\"error\":";
    if (r.status == item_status::failed) {
      out += "{\"code\":\"";
      out += to_string(r.code);
      out += "\",\"message\":";
      append_json_string(out, r.error);
      out += "}";
    } else {
      out += "null";
    }
    out += ",\"queue_ms\":";
    append_json_number(out, std::round(r.queue_ms * 1000.0) / 1000.0);
    out += ",\"run_ms\":";
    append_json_number(out, std::round(r.run_ms * 1000.0) / 1000.0);
    if (!r.extra.empty()) {
      out += ",\"extra\":";
      out += r.extra; // a JSON object the reward wrote
    }
    out += "}";
  }
  out += "]";
  if (!groups.empty()) {
    out += ",\"groups\":{";
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& g = groups[i];
      if (i > 0) {
        out.push_back(',');
      }
      append_json_string(out, g.group);
      out += ":{\"scored\":";
      out += std::to_string(g.scored);
      out += ",\"failed\":";
      out += std::to_string(g.failed);
      out += ",\"pending\":";
      out += std::to_string(g.pending);
      if (g.scored == 0) {
        // No score to average: a 0.0 would read as one (every member failed, or is pending).
        out += ",\"mean\":null,\"std\":null";
      } else {
        out += ",\"mean\":";
        append_json_number(out, g.mean);
        out += ",\"std\":";
        append_json_number(out, g.std);
      }
      out += g.zero_std ? ",\"zero_std\":true}" : ",\"zero_std\":false}";
    }
    out += "}";
  }
  out += "}";
  return out;
}

std::string encode_error(std::string_view code, std::string_view message,
                         std::string_view field) {
  std::string out = "{\"error\":{\"code\":";
  append_json_string(out, code);
  out += ",\"message\":";
  append_json_string(out, message);
  if (!field.empty()) {
    out += ",\"field\":";
    append_json_string(out, field);
  }
  out += "}}";
  return out;
}

} // namespace arbiter::net
