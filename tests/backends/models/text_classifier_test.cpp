// Text pairs in, NLI probabilities out: the tiny DeBERTa-v3-style model with its own
// spm.model (fixtures/tiny_deberta_nli/, make_deberta_nli_fixture.py) against what transformers
// computed from the same texts — tokenizer, truncation, forward and label order together.

#include "backends/models/text_classifier.hpp"
#include "test_device.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::backends::models;
using json = nlohmann::json;

namespace {

const std::string folder = ARBITER_SOURCE_DIR "/tests/backends/models/fixtures/tiny_deberta_nli";

struct nli_case {
  std::string premise;
  std::string hypothesis;
  size_t tokens = 0;
  // contradiction, entailment, neutral (the fixture's id2label order).
  std::vector<double> probabilities;
};

std::vector<nli_case> cases() {
  std::ifstream in{folder + "/expected.json"};
  const auto doc = json::parse(in);
  std::vector<nli_case> out;
  for (const auto& c : doc.at("nli_cases")) {
    out.push_back({c["premise"], c["hypothesis"], c["ids"].size(),
                   c["probabilities"].get<std::vector<double>>()});
  }
  return out;
}

void expect_matches(const nli_probabilities& got, const nli_case& want) {
  EXPECT_NEAR(got.contradiction, want.probabilities[0], test_support::tolerance(1e-5, 1e-2)) << want.premise;
  EXPECT_NEAR(got.entailment, want.probabilities[1], test_support::tolerance(1e-5, 1e-2)) << want.premise;
  EXPECT_NEAR(got.neutral, want.probabilities[2], test_support::tolerance(1e-5, 1e-2)) << want.premise;
}

} // namespace

TEST(TextClassifier, MatchesTransformersFromText) {
  auto model = text_classifier::load(folder, test_support::test_options());
  auto all = cases();
  ASSERT_GE(all.size(), 7u);
  for (const auto& c : all) {
    size_t tokens = 0;
    auto got = model->nli({{c.premise, c.hypothesis}}, 16384, &tokens);
    ASSERT_EQ(got.size(), 1u);
    expect_matches(got[0], c);
    EXPECT_EQ(tokens, c.tokens) << c.premise; // the long premise is truncated to 128
  }
  EXPECT_EQ(model->info().max_tokens, 128u);
}

TEST(TextClassifier, APairDoesNotDependOnItsBatchOrItsSplit) {
  auto model = text_classifier::load(folder, test_support::test_options());
  auto all = cases();
  ASSERT_GE(all.size(), 7u);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t k = 0; k < 3 * all.size(); ++k) {
    const auto& c = all[(k * 5) % all.size()];
    pairs.emplace_back(c.premise, c.hypothesis);
  }
  // A small token budget cuts the batch into several forward passes.
  for (size_t budget : {size_t{16384}, size_t{200}}) {
    auto got = model->nli(pairs, budget);
    ASSERT_EQ(got.size(), pairs.size());
    for (size_t k = 0; k < pairs.size(); ++k) {
      expect_matches(got[k], all[(k * 5) % all.size()]);
    }
  }
}

TEST(TextClassifier, RefusesAFolderWithoutTokenizerOrNliLabels) {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / "arbiter_text_classifier_bad";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(folder + "/model.safetensors", dir / "model.safetensors");
  fs::copy(folder + "/config.json", dir / "config.json");
  try {
    text_classifier::load(dir.string());
    FAIL() << "loaded without a tokenizer";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("neither spm.model nor tokenizer.json"), std::string::npos)
      << e.what();
  }
  fs::copy(folder + "/spm.model", dir / "spm.model");
  std::ifstream in{dir / "config.json"};
  auto cfg = json::parse(in);
  in.close();
  cfg["id2label"] = {{"0", "LABEL_0"}, {"1", "LABEL_1"}, {"2", "LABEL_2"}};
  std::ofstream{dir / "config.json"} << cfg.dump();
  try {
    text_classifier::load(dir.string());
    FAIL() << "loaded without NLI labels";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("config.json: id2label (LABEL_0, LABEL_1, LABEL_2)"),
              std::string::npos)
      << e.what();
  }
}
