// The native DeBERTa-v2 classifier against transformers' DebertaV2ForSequenceClassification:
// two tiny random-weight models and their logits, written by make_deberta_fixture.py
// (fixtures/tiny_deberta_v2{,_alt}/). The first has the v2-xlarge-mnli shape (log buckets,
// shared keys, layer-normed relative embeddings, conv layer, token types); the second takes the
// other branches (no buckets, pos_key_proj / pos_query_proj, absolute positions, embed_proj).

#include "backends/models/deberta_classifier.hpp"
#include "test_device.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::backends::models;
using json = nlohmann::json;

namespace {

const std::string fixtures = ARBITER_SOURCE_DIR "/tests/backends/models/fixtures/";

// bf16 bounds: the tiny models' logits are O(1), and bf16 keeps about 3 significant digits
// through each of their layers.
constexpr double kBf16Logits = 3e-2;
constexpr double kBf16Probs = 1e-2;

struct golden_case {
  std::vector<int64_t> ids;
  std::vector<int64_t> type_ids;
  std::vector<float> logits;
  std::vector<float> probabilities;
};

std::vector<golden_case> load_cases(const std::string& variant) {
  std::ifstream in{fixtures + variant + "/expected.json"};
  auto doc = json::parse(in);
  std::vector<golden_case> cases;
  for (const auto& c : doc["cases"]) {
    cases.push_back({c["ids"].get<std::vector<int64_t>>(),
                     c["type_ids"].get<std::vector<int64_t>>(),
                     c["logits"].get<std::vector<float>>(),
                     c["probabilities"].get<std::vector<float>>()});
  }
  return cases;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, double{std::fabs(a[i] - b[i])});
  }
  return worst;
}

class TinyDeberta : public ::testing::TestWithParam<std::string> {};

} // namespace

TEST_P(TinyDeberta, MatchesTransformersOneByOne) {
  auto model = deberta_classifier::load(fixtures + GetParam(), test_support::test_options());
  for (const auto& c : load_cases(GetParam())) {
    auto got = model->logits({c.ids}, {c.type_ids});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_LE(max_abs_diff(got[0], c.logits), test_support::tolerance(1e-4, kBf16Logits)) << c.ids.size() << " tokens";
    auto probs = model->probabilities({c.ids}, {c.type_ids});
    EXPECT_LE(max_abs_diff(probs[0], c.probabilities), test_support::tolerance(1e-5, kBf16Probs)) << c.ids.size() << " tokens";
  }
}

TEST_P(TinyDeberta, ARowDoesNotDependOnItsBatch) {
  auto model = deberta_classifier::load(fixtures + GetParam(), test_support::test_options());
  auto cases = load_cases(GetParam());
  // Mixed lengths, longest in the middle, so every short input is padded.
  std::vector<std::vector<int64_t>> ids, types;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[(k * 3) % cases.size()];
    ids.push_back(c.ids);
    types.push_back(c.type_ids);
  }
  auto batched = model->logits(ids, types);
  ASSERT_EQ(batched.size(), ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    const auto& c = cases[(k * 3) % cases.size()];
    auto alone = model->logits({c.ids}, {c.type_ids});
    EXPECT_LE(max_abs_diff(batched[k], alone[0]), test_support::tolerance(1e-5, kBf16Logits)) << c.ids.size() << " tokens";
    EXPECT_LE(max_abs_diff(batched[k], c.logits), test_support::tolerance(1e-4, kBf16Logits)) << c.ids.size() << " tokens";
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TinyDeberta,
                         ::testing::Values("tiny_deberta_v2", "tiny_deberta_v2_alt"));

TEST(DebertaClassifier, FindsLabelsByNameInAnyCase) {
  auto mnli = deberta_classifier::load(fixtures + "tiny_deberta_v2", test_support::test_options());
  EXPECT_EQ(mnli->labels(), (std::vector<std::string>{"CONTRADICTION", "NEUTRAL", "ENTAILMENT"}));
  EXPECT_EQ(mnli->label_index("entailment"), 2u);
  EXPECT_EQ(mnli->label_index("Neutral"), 1u);
  EXPECT_FALSE(mnli->label_index("entail").has_value());
  auto nli = mnli->nli_labels();
  ASSERT_TRUE(nli.has_value());
  EXPECT_EQ(nli->entailment, 2u);
  EXPECT_EQ(nli->neutral, 1u);
  EXPECT_EQ(nli->contradiction, 0u);

  auto v3 = deberta_classifier::load(fixtures + "tiny_deberta_v2_alt", test_support::test_options());
  EXPECT_EQ(v3->label_index("ENTAILMENT"), 0u);
  EXPECT_EQ(v3->nli_labels()->contradiction, 2u);
}

TEST(DebertaClassifier, DescribesItselfAndRefusesBadInputs) {
  auto model = deberta_classifier::load(fixtures + "tiny_deberta_v2", test_support::test_options());
  const auto& info = model->info();
  EXPECT_EQ(info.architecture, "deberta-v2");
  EXPECT_EQ(info.hidden, 32u);
  EXPECT_EQ(info.layers, 2u);
  EXPECT_EQ(info.max_tokens, 64u);
  EXPECT_EQ(info.dtype, test_support::test_options().dtype);
  EXPECT_GT(info.weight_bytes, 50'000u);
  EXPECT_TRUE(model->logits({}, {}).empty());
  EXPECT_EQ(model->logits({{1, 5, 2}}, {}).size(), 1u); // no type ids: all 0
  EXPECT_THROW(model->logits({{}}, {}), std::invalid_argument);
  EXPECT_THROW(model->logits({std::vector<int64_t>(65, 7)}, {}), std::invalid_argument);
  EXPECT_THROW(model->logits({{1, 128, 2}}, {}), std::invalid_argument);
  EXPECT_THROW(model->logits({{1, 5, 2}}, {{0, 0}}), std::invalid_argument);
  EXPECT_THROW(model->logits({{1, 5, 2}}, {{0, 2, 0}}), std::invalid_argument);
}

// ---- loading errors: copies of the fixture with one thing broken ----------------------------

namespace {

std::filesystem::path broken_copy(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("arbiter_deberta_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy(fixtures + "tiny_deberta_v2/model.safetensors", dir / "model.safetensors");
  std::filesystem::copy(fixtures + "tiny_deberta_v2/config.json", dir / "config.json");
  return dir;
}

json read_json(const std::filesystem::path& path) {
  std::ifstream in{path};
  return json::parse(in);
}

void write_json(const std::filesystem::path& path, const json& doc) {
  std::ofstream out{path};
  out << doc.dump();
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    deberta_classifier::load(dir.string());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(loaded)";
}

} // namespace

TEST(DebertaClassifierLoad, RefusesOtherModelTypes) {
  auto dir = broken_copy("type");
  auto cfg = read_json(dir / "config.json");
  cfg["model_type"] = "deberta";
  write_json(dir / "config.json", cfg);
  auto err = load_error(dir);
  EXPECT_NE(err.find((dir / "config.json").string() + ": model_type \"deberta\" is not supported"),
            std::string::npos)
    << err;
}

TEST(DebertaClassifierLoad, NamesTheFileAndTensorOfAShapeMismatch) {
  auto dir = broken_copy("shape");
  auto cfg = read_json(dir / "config.json");
  cfg["intermediate_size"] = 48;
  write_json(dir / "config.json", cfg);
  auto err = load_error(dir);
  EXPECT_NE(err.find((dir / "model.safetensors").string()
                     + ": tensor deberta.encoder.layer.0.intermediate.dense.weight has shape "
                       "[64, 32], config.json implies [48, 32]"),
            std::string::npos)
    << err;
}

TEST(DebertaClassifierLoad, NamesTheFileAndAMissingTensor) {
  auto dir = broken_copy("missing");
  auto cfg = read_json(dir / "config.json");
  cfg["share_att_key"] = false; // now pos_key_proj / pos_query_proj are expected
  write_json(dir / "config.json", cfg);
  auto err = load_error(dir);
  EXPECT_NE(err.find((dir / "model.safetensors").string()
                     + ": tensor deberta.encoder.layer.0.attention.self.pos_key_proj.weight is "
                       "missing"),
            std::string::npos)
    << err;
  std::filesystem::remove(dir / "config.json");
  EXPECT_NE(load_error(dir).find("config.json: cannot open"), std::string::npos);
}
