#include "net/json_reading.hpp"

#include <charconv>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "net/json_body.hpp"
#include "net/number_text.hpp"

namespace arbiter::net {

bool json_body_reader::open(std::string_view body, ondemand::object& root, codec_error& err) {
  thread_local ondemand::parser parser;
  padded_ = simdjson::padded_string{body};
  if (auto e = parser.iterate(padded_).get(doc_)) {
    err = {refusal::invalid, "body",
           e == simdjson::UTF8_ERROR ? std::string{"body: invalid UTF-8"}
                                     : std::string{"body: malformed JSON ("}
                                         + simdjson::error_message(e) + ")"};
    return false;
  }
  if (auto e = doc_.get_object().get(root)) {
    // simdjson checks the root's brackets here: a truncated body or text after it is not a
    // wrong type (both said "expected a JSON object").
    err = {refusal::invalid, "body",
           e == simdjson::UTF8_ERROR      ? std::string{"body: invalid UTF-8"}
           : e == simdjson::INCORRECT_TYPE ? std::string{"body: expected a JSON object"}
           : e == simdjson::TRAILING_CONTENT
             ? std::string{"body: trailing content after the JSON object"}
           : e == simdjson::INCOMPLETE_ARRAY_OR_OBJECT
             // simdjson says so of `{...} x` too
             ? std::string{"body: malformed JSON (an object or list not closed, or text after "
                           "the object)"}
             : std::string{"body: malformed JSON ("} + simdjson::error_message(e) + ")"};
    return false;
  }
  return true;
}

bool json_body_reader::finish(codec_error& err) {
  const char* trailing = nullptr;
  if (!doc_.current_location().get(trailing)) {
    err = {refusal::invalid, "body", "body: trailing content after the JSON object"};
    return false;
  }
  return true;
}

bool json_body_reader::finish(codec_error& err, bool present, const std::string& required) {
  if (!finish(err)) {
    return false;
  }
  if (!present) {
    err = codec_error::missing(required);
    return false;
  }
  return true;
}

namespace {

/// The path of the first key given twice in one object of `value`, below `path`.
std::optional<std::string> repeated_key(simdjson::dom::element value, const std::string& path) {
  if (auto array = value.get_array(); !array.error()) {
    size_t i = 0;
    for (auto element : array.value_unsafe()) {
      if (auto found = repeated_key(element, path + "[" + std::to_string(i++) + "]")) {
        return found;
      }
    }
  } else if (auto object = value.get_object(); !object.error()) {
    std::unordered_set<std::string_view> keys;  // views into the parser's strings
    for (auto field : object.value_unsafe()) {
      // The path is written only where it may be needed: a repeat, or a value that nests.
      auto name = [&] { return field_path(path.empty() ? "body" : path, field.key); };
      if (!keys.insert(field.key).second) {
        return name();
      }
      if (field.value.is_array() || field.value.is_object()) {
        if (auto found = repeated_key(field.value, name())) {
          return found;
        }
      }
    }
  }
  return std::nullopt;
}

} // namespace

void name_malformed_body(std::string_view body, codec_error& err) {
  if (err.why != refusal::invalid || err.field == "body") {
    return;
  }
  thread_local simdjson::dom::parser parser;
  auto error = parser.parse(body.data(), body.size(), /*realloc_if_needed=*/true).error();
  // The structure only: a number, a string (a lone surrogate the decoders take) or bad UTF-8
  // is named by its path in the decoder's own message.
  if (error != simdjson::TAPE_ERROR && error != simdjson::INCOMPLETE_ARRAY_OR_OBJECT
      && error != simdjson::T_ATOM_ERROR && error != simdjson::F_ATOM_ERROR
      && error != simdjson::N_ATOM_ERROR) {
    return;
  }
  err = {refusal::invalid, "body",
         std::string{"body: malformed JSON ("} + simdjson::error_message(error) + ")"};
}

bool well_formed_json(std::string_view text, std::string* twice) {
  thread_local simdjson::dom::parser parser;
  auto parsed = parser.parse(text.data(), text.size(), /*realloc_if_needed=*/true);
  auto error = parsed.error();
  if (error == simdjson::NUMBER_ERROR || error == simdjson::NUMBER_OUT_OF_RANGE) {
    // simdjson's DOM holds no integer past 64 bits (a Python int id, a 128-bit hash), though
    // it is valid JSON: nlohmann's validator decides those (it reads them as doubles, and still
    // refuses a malformed number or one past the doubles, such as 1e400).
    return nlohmann::json::accept(text.begin(), text.end());
  }
  if (error) {
    return false;
  }
  if (twice != nullptr) {
    if (auto found = repeated_key(parsed.value_unsafe(), "")) {
      *twice = std::move(*found);
      return false;
    }
  }
  return true;
}

std::string field_path(const std::string& where, std::string_view key) {
  std::string name = key.empty() ? std::string{"\"\""} : std::string{key};
  return where == "body" ? name : where + "." + name;
}

bool field_names::add(std::string_view key, const std::string& where, codec_error& err) {
  if (!seen_.emplace(key).second) {
    auto field = field_path(where, key);
    err = {refusal::invalid, field, field + ": given twice"};
    return false;
  }
  return true;
}

bool read_field(simdjson::simdjson_result<ondemand::field> field, std::string_view& key,
                ondemand::value& value, const std::string& where, codec_error& err,
                field_names* seen) {
  if (field.unescaped_key().get(key) || field.value().get(value)) {
    err = {refusal::invalid, where, where + ": malformed JSON"};
    return false;
  }
  return seen == nullptr || seen->add(key, where, err);
}

bool read_type(ondemand::value& value, ondemand::json_type& type, const std::string& field,
               codec_error& err) {
  if (value.type().get(type)) {
    err = {refusal::invalid, field, field + ": malformed value"};
    return false;
  }
  return true;
}

namespace {

/// The code unit of the four hex digits at `text[at]`, or -1.
long hex4(std::string_view text, size_t at) noexcept {
  if (at + 4 > text.size()) {
    return -1;
  }
  unsigned unit = 0;
  const char* first = text.data() + at;
  auto [end, error] = std::from_chars(first, first + 4, unit, 16);
  return error == std::errc{} && end == first + 4 ? static_cast<long>(unit) : -1;
}

/// The code unit of the `\uXXXX` escape at `text[at]` (its backslash), or -1.
long escaped_unit(std::string_view text, size_t at) noexcept {
  if (at + 6 > text.size() || text[at] != '\\' || text[at + 1] != 'u') {
    return -1;
  }
  return hex4(text, at + 2);
}

bool high_surrogate(long unit) noexcept {
  return unit >= 0xD800 && unit <= 0xDBFF;
}

bool low_surrogate(long unit) noexcept {
  return unit >= 0xDC00 && unit <= 0xDFFF;
}

/// What the one-letter escape after a backslash stands for (`n`: a newline); 0 for `u` and
/// for letters JSON has no escape for.
char simple_escape(char e) noexcept {
  constexpr std::string_view from = "\"\\/bfnrt";
  constexpr std::string_view to = "\"\\/\b\f\n\r\t";
  auto at = from.find(e);
  return at == std::string_view::npos ? char{0} : to[at];
}

void append_utf8(std::string& out, long cp) {
  utf8proc_uint8_t bytes[4];
  auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), bytes);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

} // namespace

bool decode_string_token_lossy(std::string_view token, std::string& out) {
  out.clear();
  if (token.empty() || token.front() != '"') {
    return false;
  }
  constexpr long replacement = 0xFFFD;
  for (size_t i = 1; i < token.size();) {
    char c = token[i];
    if (c == '"') {
      return true;
    }
    if (static_cast<unsigned char>(c) < 0x20) {
      return false; // a raw control character: not JSON
    }
    if (c != '\\') {
      out += c; // the body's UTF-8 was checked whole when it was opened
      ++i;
      continue;
    }
    if (i + 1 >= token.size()) {
      return false;
    }
    char e = token[i + 1];
    i += 2;
    if (e != 'u') {
      char plain = simple_escape(e);
      if (plain == 0) {
        return false;
      }
      out += plain;
      continue;
    }
    long unit = hex4(token, i);
    if (unit < 0) {
      return false;
    }
    i += 4;
    if (high_surrogate(unit)) {
      long low = escaped_unit(token, i);
      if (low_surrogate(low)) {
        append_utf8(out, 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
        i += 6;
      } else {
        append_utf8(out, replacement); // a high surrogate alone
      }
    } else if (low_surrogate(unit)) {
      append_utf8(out, replacement); // a low surrogate alone
    } else {
      append_utf8(out, unit);
    }
  }
  return false; // no closing quote
}

bool read_string(ondemand::value value, std::string& out, const std::string& field,
                 codec_error& err) {
  std::string_view view;
  const std::string_view token = value.raw_json_token();
  if (auto e = value.get_string().get(view)) {
    // A lone surrogate (Python's json.dumps writes one of a badly decoded text as "\ud800",
    // and Python's json.loads takes it back) is read as U+FFFD, as the Python client sends
    // it: one odd rollout does not fail its whole batch.
    if (e == simdjson::STRING_ERROR && decode_string_token_lossy(token, out)) {
      return true;
    }
    err = {refusal::invalid, field,
           field
             + (e == simdjson::STRING_ERROR ? ": invalid string escape (a malformed \\u)"
                                            : ": expected a string")};
    return false;
  }
  out.assign(view);
  return true;
}

namespace {

/// A list whose elements `read_one(element, text, "FIELD[i]", err)` reads into `out`; else
/// "FIELD: expected a list of WHAT".
template <class ReadOne>
bool read_text_list(ondemand::value value, std::vector<std::string>& out,
                    const std::string& field, const char* what, codec_error& err,
                    ReadOne read_one) {
  ondemand::array list;
  if (value.get_array().get(list)) {
    err = {refusal::invalid, field, field + ": expected a list of " + what};
    return false;
  }
  return read_elements(list, field, err, [&](ondemand::value v, const std::string& sub) {
    out.emplace_back();
    return read_one(v, out.back(), sub, err);
  });
}

} // namespace

bool read_string_list(ondemand::value value, std::vector<std::string>& out,
                      const std::string& field, codec_error& err) {
  return read_text_list(value, out, field, "strings", err, read_string);
}

bool malformed_number(ondemand::value& value) {
  ondemand::json_type type;
  return !value.type().get(type) && type == ondemand::json_type::number
         && !python_number_text(value.raw_json_token());
}

bool read_reference(ondemand::value value, std::string& out, const std::string& field,
                    codec_error& err) {
  ondemand::json_type type;
  if (!read_type(value, type, field, err)) {
    return false;
  }
  if (type == ondemand::json_type::string) {
    return read_string(value, out, field, err);
  }
  if (type != ondemand::json_type::number) {
    err = {refusal::invalid, field, field + ": expected a string or a number"};
    return false;
  }
  auto text = python_number_text(value.raw_json_token());
  if (!text) {
    err = {refusal::invalid, field, field + ": malformed number"};
    return false;
  }
  out = std::move(*text);
  return true;
}


namespace {

/// `read_references`; `target` when reading the inside of a {"target": ...}, which may not be
/// such an object again (a request nesting them 20,000 deep overflowed the stack).
bool read_references_in(ondemand::value value, std::vector<std::string>& out,
                        const std::string& field, codec_error& err, bool target) {
  ondemand::json_type type;
  if (!read_type(value, type, field, err)) {
    return false;
  }
  if (type == ondemand::json_type::string || type == ondemand::json_type::number) {
    out.emplace_back();
    return read_reference(value, out.back(), field, err);
  }
  if (type == ondemand::json_type::object && target) {
    err = {refusal::invalid, field, field + ": expected a string, a number or a list of them"};
    return false;
  }
  if (type == ondemand::json_type::object) {
    // verl's search-R1 data: {"target": [...]}; the object's other keys are the dataset's.
    ondemand::object object;
    if (value.get_object().get(object)) {
      err = {refusal::invalid, field, field + ": malformed object"};
      return false;
    }
    bool has_target = false;
    auto read = [&](std::string_view key, ondemand::value& inner) {
      if (key == "target") {
        has_target = true;
        if (!read_references_in(inner, out, field + ".target", err, true)) {
          return false;
        }
      }
      return true;
    };
    if (!read_fields(object, field, err, read)) {
      return false;
    }
    if (!has_target) {
      err = {refusal::invalid, field + ".target",
             field + ".target: required when ground_truth is an object (verl's "
                     "{\"target\": [...]})"};
      return false;
    }
    return true;
  }
  ondemand::array list;
  if (type != ondemand::json_type::array || value.get_array().get(list)) {
    err = {refusal::invalid, field, field + ": expected a string, a number, a list of them or {\"target\": ...}"};
    return false;
  }
  return read_elements(list, field, err, [&](ondemand::value v, const std::string& sub) {
    out.emplace_back();
    return read_reference(v, out.back(), sub, err);
  });
}

} // namespace

bool read_references(ondemand::value value, std::vector<std::string>& out,
                     const std::string& field, codec_error& err) {
  return read_references_in(value, out, field, err, false);
}

bool check_json_text(std::string_view body, std::string& fixed, codec_error& err) {
  fixed.clear();
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '"') {
        in_string = false;
      } else if (c == '\\') {
        const long unit = escaped_unit(body, i);
        if (unit < 0) {
          ++i; // a one-letter escape (or a malformed one, which the parser names)
        } else if (high_surrogate(unit) && low_surrogate(escaped_unit(body, i + 6))) {
          i += 11; // a pair
        } else {
          if (high_surrogate(unit) || low_surrogate(unit)) {
            if (fixed.empty()) {
              fixed.assign(body);
            }
            fixed.replace(i + 2, 4, "fffd");
          }
          i += 5;
        }
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_json_depth) {
        err = {refusal::invalid, "body",
               "body: nested deeper than " + std::to_string(max_json_depth) + " levels"};
        return false;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

bool parse_json_object(std::string_view body, nlohmann::json& doc, codec_error& err) {
  std::string fixed;
  if (!check_json_text(body, fixed, err)) {
    return false;
  }
  const std::string_view text = fixed.empty() ? body : std::string_view{fixed};
  // A key given twice in one object is refused, as /v1/score refuses it: nlohmann keeps the
  // last, so `{"model": "a", ..., "model": "b"}` went to b's sources unseen. It is named by its
  // path, as /v1/score names it (`messages[0].role`).
  struct open_value {
    bool array = false;
    size_t elements = 0;          // an array's elements begun so far
    std::string key;              // an object's key being read
    std::unordered_set<std::string> keys;
  };
  std::vector<open_value> open;
  std::optional<std::string> twice; // the path; "" is a key too
  // A long key is named by its start (the whole of it would make the error body as long).
  auto shown = [](const std::string& key) {
    constexpr size_t most = 64;
    if (key.empty()) {
      return std::string{"\"\""};
    }
    return key.size() > most ? key.substr(0, most) + "..." : key;
  };
  auto path_to = [&open, &shown](const std::string& key) {
    std::string path;
    for (size_t i = 0; i + 1 < open.size(); ++i) {
      if (open[i].array) {
        path += "[" + std::to_string(open[i].elements - 1) + "]";
      } else {
        path += (path.empty() ? "" : ".") + shown(open[i].key);
      }
    }
    return path + (path.empty() ? "" : ".") + shown(key);
  };
  auto note_keys = [&open, &twice, &path_to](int /*depth*/, nlohmann::json::parse_event_t event,
                                             nlohmann::json& parsed) {
    using event_t = nlohmann::json::parse_event_t;
    const bool begins = event == event_t::object_start || event == event_t::array_start
                        || event == event_t::value;
    if (begins && !open.empty() && open.back().array) {
      ++open.back().elements;
    }
    if (event == event_t::object_start || event == event_t::array_start) {
      open.push_back({event == event_t::array_start, 0, {}, {}});
    } else if ((event == event_t::object_end || event == event_t::array_end) && !open.empty()) {
      open.pop_back();
    } else if (event == event_t::key && !open.empty()) {
      auto key = parsed.get<std::string>();
      if (!twice && !open.back().keys.insert(key).second) {
        twice = path_to(key);
      }
      open.back().key = std::move(key);
    }
    return true;
  };
  try {
    doc = nlohmann::json::parse(text.begin(), text.end(), note_keys);
  } catch (const nlohmann::json::out_of_range&) {
    // A number past the double range (`1e400`): named by the value it was for, which the
    // parser had begun when it stopped.
    std::string path;
    for (size_t i = 0; i < open.size(); ++i) {
      if (open[i].array) {
        // The innermost array's element that failed was never counted as begun.
        auto index = open[i].elements - (i + 1 < open.size() ? 1 : 0);
        path += "[" + std::to_string(index) + "]";
      } else {
        path += (path.empty() ? "" : ".") + shown(open[i].key);
      }
    }
    if (path.empty() || path.front() == '[') {
      path = "body" + path;
    }
    err = {refusal::invalid, path, path + ": a number out of range"};
    return false;
  } catch (const nlohmann::json::exception&) {
    err = {refusal::invalid, "body", "body: not valid JSON"};
    return false;
  }
  if (twice) {
    err = {refusal::invalid, *twice, *twice + ": given twice"};
    return false;
  }
  if (!doc.is_object()) {
    err = {refusal::invalid, "body", "body: expected a JSON object"};
    return false;
  }
  return true;
}

} // namespace arbiter::net
