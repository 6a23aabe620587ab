// The safetensors reader on hand-made files: views, shards, and every malformed-file message.

#include "backends/models/safetensors.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::backends::models;
using json = nlohmann::json;

namespace {

std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("arbiter_st_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_file(const std::filesystem::path& path, const std::string& header,
                const std::string& data, uint64_t declared = 0) {
  uint64_t n = declared ? declared : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  std::ofstream{path, std::ios::binary} << out << header << data;
}

std::string float_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) {
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
  }
  return out;
}

std::string open_error(const std::filesystem::path& path) {
  try {
    safetensors_file::open(path.string());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(opened)";
}

} // namespace

TEST(Safetensors, ViewsTensorsInPlace) {
  auto dir = scratch("views");
  json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                 {"b", {{"dtype", "BF16"}, {"shape", {1, 2}}, {"data_offsets", {8, 12}}}},
                 {"__metadata__", {{"format", "pt"}}}};
  write_file(dir / "model.safetensors", header.dump(), float_bytes({1.5f, -2.0f}) + std::string("\x80\x3f\x00\x40", 4));
  auto ckpt = checkpoint::open(dir.string());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "b"}));
  const auto* a = ckpt.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, tensor_dtype::f32);
  EXPECT_EQ(a->shape, std::vector<int64_t>{2});
  float second = 0;
  std::memcpy(&second, a->data + 4, 4);
  EXPECT_EQ(second, -2.0f);
  EXPECT_EQ(ckpt.find("b")->dtype, tensor_dtype::bf16);
  EXPECT_EQ(ckpt.find("b")->bytes, 4u);
  EXPECT_EQ(ckpt.find("c"), nullptr);
}

TEST(Safetensors, ReadsShardsFromTheIndex) {
  auto dir = scratch("shards");
  write_file(dir / "s1.safetensors",
             json{{"x", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}.dump(),
             float_bytes({1.0f}));
  write_file(dir / "s2.safetensors",
             json{{"y", {{"dtype", "F16"}, {"shape", {1}}, {"data_offsets", {0, 2}}}}}.dump(),
             std::string("\x00\x3c", 2));
  std::ofstream{dir / "model.safetensors.index.json"}
    << R"({"metadata":{},"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})";
  auto ckpt = checkpoint::open(dir.string());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.find("y")->dtype, tensor_dtype::f16);
}

TEST(Safetensors, NamesTheFileAndTheProblem) {
  auto dir = scratch("bad");
  auto path = dir / "model.safetensors";
  std::ofstream{path, std::ios::binary} << "abc";
  EXPECT_NE(open_error(path).find("too short"), std::string::npos);
  write_file(path, "{}", "", 1000);
  EXPECT_NE(open_error(path).find("header length 1000 exceeds"), std::string::npos);
  write_file(path, "[1]", "");
  EXPECT_NE(open_error(path).find("header is not a JSON object"), std::string::npos);
  write_file(path, json{{"t", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}}.dump(),
             float_bytes({1.0f}));
  auto err = open_error(path);
  EXPECT_NE(err.find("tensor t: data_offsets [0, 16] lie outside the data buffer of 4 bytes"),
            std::string::npos)
    << err;
  write_file(path, json{{"t", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 4}}}}}.dump(),
             float_bytes({1.0f}));
  err = open_error(path);
  EXPECT_NE(err.find("tensor t: F32 shape needs 8 bytes, the file has 4"), std::string::npos) << err;
  EXPECT_EQ(err.rfind(path.string(), 0), 0u) << "starts with the file name: " << err;
  EXPECT_NE(open_error(dir / "nope.safetensors").find("cannot open"), std::string::npos);
  std::ofstream{dir / "model.safetensors.index.json"} << R"({"weight_map":{"x":"../evil"}})";
  std::filesystem::remove(path);
  try {
    checkpoint::open(dir.string());
    ADD_FAILURE() << "opened";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string{e.what()}.find("outside the folder"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, AShapeWhoseSizeOverflowsIsRefused) {
  // 2^62 × 2^2 elements of 4 bytes wraps to 0 in 64 bits: it must not pass for the empty
  // data range it claims, nor may a dimension over 2^63 become a negative int64.
  auto header = [](const json& shape) {
    std::string text = json{{"t", {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {0, 0}}}}}
                         .dump();
    std::string out(8, '\0');
    for (size_t i = 0; i < 8; ++i) {
      out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    }
    return out + text;
  };
  auto error_of = [](const std::string& bytes) -> std::string {
    try {
      safetensors_file::read_header(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(),
                                    "mem.safetensors");
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(read)";
  };
  EXPECT_NE(error_of(header(json::array({uint64_t{1} << 62, 4}))).find("more than 2^64"),
            std::string::npos);
  EXPECT_NE(error_of(header(json::array({uint64_t{1} << 63}))).find("non-negative 64-bit"),
            std::string::npos);
  EXPECT_NE(error_of(header(json::array({uint64_t{1} << 61, 2}))).find("more than 2^64"),
            std::string::npos)
    << "2^62 elements of 4 bytes";
  EXPECT_EQ(error_of(header(json::array({0, 5}))), "(read)") << "an empty tensor is fine";
}
