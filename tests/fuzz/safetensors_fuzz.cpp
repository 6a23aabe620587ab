// libFuzzer target: the safetensors header reader (backends/models/safetensors.hpp) on the
// bytes of an arbitrary file, as a downloaded checkpoint may be.
//
// Invariants: it throws std::runtime_error, or every tensor it returns is a view that lies
// inside the input and holds exactly shape × element size bytes for the dtypes it knows, with
// no dimension negative and no overflow on the way.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "backends/models/safetensors.hpp"

using arbiter::backends::models::safetensors_file;
using arbiter::backends::models::tensor_dtype;

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

size_t element_size(tensor_dtype d) {
  switch (d) {
    case tensor_dtype::f32:
      return 4;
    case tensor_dtype::f16:
    case tensor_dtype::bf16:
      return 2;
    case tensor_dtype::i64:
      return 8;
    default:
      return 0;
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  try {
    const auto tensors = safetensors_file::read_header(bytes, size, "fuzz.safetensors");
    for (const auto& [name, t] : tensors) {
      check(t.name == name, "a tensor filed under another name");
      check(t.bytes <= size && t.data >= bytes && t.data <= bytes + size - t.bytes,
            "a tensor view outside the file");
      uint64_t elements = 1;
      bool overflow = false;
      for (const int64_t d : t.shape) {
        check(d >= 0, "a negative dimension");
        overflow = overflow || __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements);
      }
      if (const size_t each = element_size(t.dtype); each > 0) {
        uint64_t needed = 0;
        overflow = overflow || __builtin_mul_overflow(elements, each, &needed);
        check(!overflow && needed == t.bytes, "a tensor whose bytes are not shape x element size");
      }
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
