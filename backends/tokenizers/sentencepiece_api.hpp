#pragma once

// The few libsentencepiece calls Arbiter makes, behind a table of functions.
//
// Why not link libsentencepiece directly: Debian's libsentencepiece carries its own copy of
// protobuf-lite with exported symbols, and libtorch links the system libprotobuf. In one
// process the two copies interpose on each other and the program crashes while starting.
// So libsentencepiece is opened with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), which binds its calls
// to its own protobuf, and a small shim module linked against it (sentencepiece_shim.cpp,
// libarbiter_sentencepiece.so) hands out this table. Both sides share the process's
// libstdc++, so the table passes std:: types.

#include <string>
#include <vector>

namespace arbiter::backends::tokenizers {

struct sentencepiece_api {
  /// Bumped when the table changes; the loader refuses a shim of another version.
  int version = 0;
  /// A loaded model, or null with `error` set.
  void* (*load)(const std::string& path, std::string* error) = nullptr;
  void (*destroy)(void* model) = nullptr;
  /// The ids of `text` (normalized, with the model's dummy prefix); false with `error` set.
  bool (*encode)(const void* model, const std::string& text, std::vector<int>* ids,
                 std::string* error) = nullptr;
  /// The text of `ids` ("▁" back to spaces).
  bool (*decode)(const void* model, const std::vector<int>& ids, std::string* text) = nullptr;
  int (*piece_size)(const void* model) = nullptr;
  /// The piece's id, or the unknown id when it has none.
  int (*piece_to_id)(const void* model, const std::string& piece) = nullptr;
  void (*id_to_piece)(const void* model, int id, std::string* piece) = nullptr;
  bool (*is_control)(const void* model, int id) = nullptr;
  bool (*is_unknown)(const void* model, int id) = nullptr;
};

inline constexpr int sentencepiece_api_version = 1;

/// The symbol the shim exports: `const sentencepiece_api* arbiter_sentencepiece_api()`.
inline constexpr const char* sentencepiece_api_symbol = "arbiter_sentencepiece_api";

/// The table, loading libsentencepiece and the shim on first use. Throws std::runtime_error
/// saying what could not be opened. Looks for the shim at $ARBITER_SENTENCEPIECE_SHIM, where
/// the build put it, then next to the executable.
const sentencepiece_api& load_sentencepiece_api();

} // namespace arbiter::backends::tokenizers
