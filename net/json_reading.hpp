#pragma once

// Reading request bodies with simdjson's on-demand API, field by field, for the decoders of
// /v1/score and the trainer protocols. Internal to net/: only .cpp files include it.

#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <simdjson.h>

#include "net/score_codec.hpp"

namespace arbiter::net {

namespace ondemand = simdjson::ondemand;

/// A body that must be one JSON object. `open` parses it (on this thread's parser) and gives
/// the root object; after its fields were read, `finish` checks that nothing follows it. The
/// reader owns the padded copy of the body that the values point into; one reader at a time
/// per thread.
class json_body_reader {
public:
  /// False with `err` (400, field "body") when the body is not JSON, not valid UTF-8, or not
  /// an object.
  bool open(std::string_view body, ondemand::object& root, codec_error& err);

  /// False with `err` (400, field "body") when content follows the object.
  bool finish(codec_error& err);

  /// `finish`, then false with `codec_error::missing(required)` unless `present`.
  bool finish(codec_error& err, bool present, const std::string& required);

private:
  simdjson::padded_string padded_;
  ondemand::document doc_;
};

/// Decodes the JSON string token `token` (from its opening quote; what follows its closing
/// quote is ignored) into `out`, reading a lone UTF-16 surrogate escape as U+FFFD where
/// simdjson refuses the string. False when the token is malformed otherwise (an unknown or cut
/// escape, a raw control character, no closing quote).
bool decode_string_token_lossy(std::string_view token, std::string& out);

/// Whether `text` is one well-formed JSON value. On-demand parsing checks only the brackets
/// of a value it skips (`raw_json`), so a value kept as text (an item's `extra_info`) is
/// checked whole before it is passed on. Integers past 64 bits are well-formed; numbers past
/// the doubles (1e400) are not. With `twice`, a key given twice in one object (at any depth)
/// makes it ill-formed too, and `*twice` is its path below the value (`a.b`, `a[2].b`): one
/// reader of the value would take the first, another the last. (A value with an integer past
/// 64 bits is not checked for repeated keys.)
bool well_formed_json(std::string_view text, std::string* twice = nullptr);

/// Names a malformed body: when a decoder refused `body` for a field (`items[1]: expected an
/// object`) while the body is not well-formed JSON (on-demand parsing reads a list's trailing
/// comma `[{...},]` as one more element), `err` becomes `body: malformed JSON (WHY)`.
void name_malformed_body(std::string_view body, codec_error& err);

/// The path of field `key` of the object at `where` ("body" for the top level): `key`, or
/// `WHERE.key`; an empty key is written `""`, so that a refusal always names a field.
std::string field_path(const std::string& where, std::string_view key);

/// The keys of one object seen so far, so that a key given twice is refused rather than read
/// twice (two "items" lists would be concatenated past `max_batch_items`) or last-wins.
class field_names {
public:
  /// False with `err` (400, "KEY: given twice", the field named under `where`) when `key`
  /// was seen before.
  bool add(std::string_view key, const std::string& where, codec_error& err);

private:
  // Hashed: an item of 100,000 keys (1.3 MB) took 6 s of an I/O thread when they were compared
  // each with each.
  std::unordered_set<std::string> seen_;
};

/// The next field of an object being iterated: its (unescaped) key and value; false with
/// `err` naming `where` when the JSON there is malformed, or, with `seen`, when the key was
/// given before in the same object.
bool read_field(simdjson::simdjson_result<ondemand::field> field, std::string_view& key,
                ondemand::value& value, const std::string& where, codec_error& err,
                field_names* seen = nullptr);

/// Calls `read(key, value)` for each field of `object` (at `where`) in order, refusing a key
/// given twice; false at the first field that is malformed or that `read` refuses.
template <typename Read>
bool read_fields(ondemand::object& object, const std::string& where, codec_error& err,
                 Read&& read) {
  field_names seen;
  for (auto field : object) {
    std::string_view key;
    ondemand::value value;
    if (!read_field(field, key, value, where, err, &seen) || !read(key, value)) {
      return false;
    }
  }
  return true;
}

/// The JSON type of `value`; false with `err` ("FIELD: malformed value") when it has none.
bool read_type(ondemand::value& value, ondemand::json_type& type, const std::string& field,
               codec_error& err);

/// Reads a string into `out`; else `FIELD: expected a string`.
bool read_string(ondemand::value value, std::string& out, const std::string& field,
                 codec_error& err);

/// Calls `read(element, "FIELD[i]")` for each element of `list` in order, until one returns
/// false; a malformed element is refused naming it.
template <typename Read>
bool read_elements(ondemand::array list, const std::string& field, codec_error& err,
                   Read&& read) {
  size_t i = 0;
  for (auto element : list) {
    auto sub = field + "[" + std::to_string(i++) + "]";
    ondemand::value value;
    if (element.get(value)) {
      err = {refusal::invalid, sub, sub + ": malformed value"};
      return false;
    }
    if (!read(value, sub)) {
      return false;
    }
  }
  return true;
}

/// Reads a list of strings into `out` (appended); else `FIELD: expected a list of strings`
/// or `FIELD[i]: expected a string`.
bool read_string_list(ondemand::value value, std::vector<std::string>& out,
                      const std::string& field, codec_error& err);

/// Whether `value` is a number token JSON does not allow (a leading zero: `01`), which
/// simdjson finds only when the value is read: refused as "FIELD: malformed number", not as a
/// value of the wrong kind.
bool malformed_number(ondemand::value& value);

/// Reads one reference (a ground truth, a label) into `out`: a string as it is, or a number
/// as Python's `str()` writes it (`python_number_text`). Anything else (a boolean, null, an
/// object, a list) is refused with `FIELD: expected a string or a number`.
bool read_reference(ondemand::value value, std::string& out, const std::string& field,
                    codec_error& err);

/// Reads references into `out` (appended): one (`read_reference`), a list of them, each named
/// `FIELD[i]` when refused, or verl's search-R1 object `{"target": ONE_OR_A_LIST, ...}` (its
/// other keys ignored; a target that is such an object again is refused). Anything else is refused with `FIELD: expected a string, a number, a
/// list of them or {"target": ...}`. An empty list is read (each reward decides what no
/// reference means: search-R1 scores it, most fail the item).
bool read_references(ondemand::value value, std::vector<std::string>& out,
                     const std::string& field, codec_error& err);

} // namespace arbiter::net
