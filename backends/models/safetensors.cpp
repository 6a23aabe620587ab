#include "backends/models/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/enum_names.hpp"

namespace arbiter::backends::models {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& problem) {
  throw std::runtime_error{file + ": " + problem};
}

constexpr auto tensor_dtype_names = names_of<tensor_dtype::other>("F32", "F16", "BF16", "I64",
                                                                  "other");
constexpr size_t element_sizes[] = {4, 2, 2, 8, 0};

tensor_dtype dtype_of(const std::string& name, size_t& element_size) {
  auto dtype = tensor_dtype_names.parse(name).value_or(tensor_dtype::other);
  element_size = element_sizes[static_cast<size_t>(dtype)];
  return dtype;
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

} // namespace

const char* to_string(tensor_dtype d) noexcept {
  return tensor_dtype_names[d];
}

std::map<std::string, tensor_view> safetensors_file::read_header(const std::byte* bytes,
                                                                 size_t size,
                                                                 const std::string& path) {
  std::map<std::string, tensor_view> tensors;
  if (size < 8) {
    fail(path, "too short for a safetensors header (" + std::to_string(size) + " bytes)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  }
  if (header_len > size - 8) {
    fail(path, "header length " + std::to_string(header_len) + " exceeds the file size "
                 + std::to_string(size));
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  auto doc = json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    fail(path, "header is not a JSON object");
  }
  const std::byte* buffer = bytes + 8 + header_len;
  const size_t buffer_size = size - 8 - header_len;
  for (const auto& [name, entry] : doc.items()) {
    if (name == "__metadata__") {
      continue;
    }
    auto where = "tensor " + name;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string()
        || !entry.contains("shape") || !entry["shape"].is_array()
        || !entry.contains("data_offsets") || !entry["data_offsets"].is_array()
        || entry["data_offsets"].size() != 2) {
      fail(path, where + ": expected {dtype, shape, data_offsets: [begin, end]}");
    }
    tensor_view view;
    view.name = name;
    view.file = path;
    view.dtype_name = entry["dtype"].get<std::string>();
    size_t element_size = 0;
    view.dtype = dtype_of(view.dtype_name, element_size);
    uint64_t elements = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()
          || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(path, where + ": shape holds a value that is not a non-negative 64-bit integer");
      }
      view.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(elements, d.get<uint64_t>(), &elements)) {
        fail(path, where + ": shape has more than 2^64 elements");
      }
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      fail(path, where + ": data_offsets are not non-negative integers");
    }
    auto begin = offsets[0].get<uint64_t>();
    auto end = offsets[1].get<uint64_t>();
    if (begin > end || end > buffer_size) {
      fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end)
                   + "] lie outside the data buffer of " + std::to_string(buffer_size)
                   + " bytes");
    }
    uint64_t needed = 0;
    if (element_size > 0
        && (__builtin_mul_overflow(elements, element_size, &needed) || needed != end - begin)) {
      fail(path, where + ": " + view.dtype_name + " shape needs "
                   + (needed == 0 && elements > 0 ? std::string{"more than 2^64"}
                                                  : std::to_string(needed))
                   + " bytes, the file has " + std::to_string(end - begin));
    }
    view.data = buffer + begin;
    view.bytes = static_cast<size_t>(end - begin);
    tensors.emplace(name, std::move(view));
  }
  return tensors;
}

std::shared_ptr<const safetensors_file> safetensors_file::open(const std::string& path) {
  std::shared_ptr<safetensors_file> file{new safetensors_file{}};
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail(path, std::string{"cannot open: "} + std::strerror(errno));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, std::string{"cannot stat: "} + std::strerror(errno));
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ < 8) {
    ::close(fd);
    fail(path, "too short for a safetensors header (" + std::to_string(file->size_) + " bytes)");
  }
  void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    fail(path, std::string{"cannot map: "} + std::strerror(errno));
  }
  file->map_ = map;
  file->tensors_ = read_header(static_cast<const std::byte*>(map), file->size_, path);
  return file;
}

safetensors_file::~safetensors_file() {
  if (map_ != nullptr) {
    ::munmap(map_, size_);
  }
}

checkpoint checkpoint::open(const std::string& folder) {
  checkpoint out;
  const std::string single = folder + "/model.safetensors";
  const std::string index = folder + "/model.safetensors.index.json";
  if (exists(single)) {
    out.shards_.push_back(safetensors_file::open(single));
    out.files_.push_back(single);
    return out;
  }
  if (!exists(index)) {
    throw std::runtime_error{folder + ": no model.safetensors or model.safetensors.index.json"};
  }
  std::ifstream in{index};
  auto doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("weight_map")
      || !doc["weight_map"].is_object()) {
    fail(index, "expected {\"weight_map\": {tensor: file}}");
  }
  std::vector<std::string> shard_names;
  for (const auto& [tensor, shard] : doc["weight_map"].items()) {
    if (!shard.is_string()) {
      fail(index, "weight_map." + tensor + " is not a file name");
    }
    auto name = shard.get<std::string>();
    if (name.find('/') != std::string::npos) {
      fail(index, "weight_map." + tensor + " names a file outside the folder: " + name);
    }
    if (std::find(shard_names.begin(), shard_names.end(), name) == shard_names.end()) {
      shard_names.push_back(name);
    }
  }
  for (const auto& name : shard_names) {
    auto path = folder + "/" + name;
    out.shards_.push_back(safetensors_file::open(path));
    out.files_.push_back(path);
  }
  return out;
}

const tensor_view* checkpoint::find(const std::string& name) const {
  for (const auto& shard : shards_) {
    auto found = shard->tensors().find(name);
    if (found != shard->tensors().end()) {
      return &found->second;
    }
  }
  return nullptr;
}

std::vector<std::string> checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& shard : shards_) {
    for (const auto& [name, view] : shard->tensors()) {
      out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace arbiter::backends::models
