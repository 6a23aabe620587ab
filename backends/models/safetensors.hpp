#pragma once

// Reads Hugging Face checkpoints in the safetensors format: `model.safetensors`, or the shards
// a `model.safetensors.index.json` lists. Files are memory-mapped; tensors are views into the
// mapping (no copy), valid while the checkpoint lives. No torch here.
//
// Format: an 8-byte little-endian header length n, n bytes of JSON `{NAME: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {...}}`, then the data buffer the offsets
// index.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace arbiter::backends::models {

/// Element types a checkpoint may hold (others are refused when a tensor is read).
enum class tensor_dtype : uint8_t { f32, f16, bf16, i64, other };

/// "F32", "F16", "BF16", "I64", or "other".
const char* to_string(tensor_dtype d) noexcept;

/// One tensor of a checkpoint: a view into a mapped file.
struct tensor_view {
  std::string name;
  tensor_dtype dtype = tensor_dtype::other;
  /// The dtype as the file spells it (for messages about unsupported ones).
  std::string dtype_name;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t bytes = 0;
  /// The file it lives in (for messages).
  std::string file;
};

/// One mapped .safetensors file.
class safetensors_file {
public:
  /// Maps `path` and reads its header; throws std::runtime_error naming the file and the
  /// problem (missing, truncated, bad JSON, offsets outside the buffer, size that does not
  /// match shape × element size).
  static std::shared_ptr<const safetensors_file> open(const std::string& path);

  /// Reads the header of a safetensors file held in `bytes` (`size` bytes: header length,
  /// header, data buffer): the tensors as views into `bytes`. Throws std::runtime_error
  /// naming `path` and the problem, as `open` does; every view it returns lies inside the
  /// buffer and holds exactly shape × element size bytes (no overflow on the way).
  static std::map<std::string, tensor_view> read_header(const std::byte* bytes, size_t size,
                                                        const std::string& path);

  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::map<std::string, tensor_view>& tensors() const noexcept {
    return tensors_;
  }

private:
  safetensors_file() = default;

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, tensor_view> tensors_;
};

/// A model folder's weights: `model.safetensors`, else the shards of
/// `model.safetensors.index.json`.
class checkpoint {
public:
  /// Opens the weights in `folder`; throws std::runtime_error naming the missing file.
  static checkpoint open(const std::string& folder);

  /// The tensor called `name`, or nullptr.
  const tensor_view* find(const std::string& name) const;

  /// Every tensor name, sorted.
  std::vector<std::string> names() const;

  /// The files read, for messages.
  const std::vector<std::string>& files() const noexcept {
    return files_;
  }

private:
  std::vector<std::shared_ptr<const safetensors_file>> shards_;
  std::vector<std::string> files_;
};

} // namespace arbiter::backends::models
