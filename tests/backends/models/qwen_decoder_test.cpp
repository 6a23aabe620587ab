// The native Qwen3 / Qwen2 decoder against Hugging Face transformers on tiny random-weight
// checkpoints (make_qwen_fixture.py): logits, greedy generations token for token, embedding
// mode, and the sampler's contracts.

#include "backends/models/qwen_decoder.hpp"
#include "test_device.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace arbiter::backends::models;
using json = nlohmann::json;

namespace {

std::string fixture(const std::string& name) {
  return std::string{ARBITER_SOURCE_DIR} + "/tests/backends/models/fixtures/" + name;
}

json expected(const std::string& name) {
  std::ifstream in{fixture(name) + "/expected.json"};
  return json::parse(in);
}

std::vector<int64_t> prefix(const std::vector<int64_t>& tokens, size_t n) {
  return {tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(std::min(n, tokens.size()))};
}

class QwenDecoder : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    model_ = qwen_decoder::load(fixture(GetParam()), test_support::test_options());
    if (test_support::low_precision()) {
      f32_ = qwen_decoder::load(fixture(GetParam()), test_support::f32_options());
    }
    expected_ = expected(GetParam());
  }

  /// How many leading greedy steps of `tokens` must match: all in f32; in bf16, those the f32
  /// model decides by a clear margin (top-2 logit gap >= 0.1, over three times bf16's logit
  /// error on these models). Past the first close call bf16 may rightly take the other token.
  size_t decided_steps(std::vector<int64_t> sequence, const std::vector<int64_t>& tokens) const {
    if (!f32_) {
      return tokens.size();
    }
    for (size_t t = 0; t < tokens.size(); ++t) {
      auto last = f32_->logits(sequence).back();
      std::partial_sort(last.begin(), last.begin() + 2, last.end(), std::greater<>{});
      if (last[0] - last[1] < 0.1f) {
        return t;
      }
      sequence.push_back(tokens[t]);
    }
    return tokens.size();
  }

  std::unique_ptr<qwen_decoder> model_;
  std::unique_ptr<qwen_decoder> f32_;
  json expected_;
};

} // namespace

TEST_P(QwenDecoder, LogitsMatchTransformers) {
  for (const auto& c : expected_["logits"]) {
    auto ids = c["ids"].get<std::vector<int64_t>>();
    auto got = model_->logits(ids);
    const auto& want = c["logits"];
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t t = 0; t < got.size(); ++t) {
      ASSERT_EQ(got[t].size(), want[t].size());
      for (size_t v = 0; v < got[t].size(); ++v) {
        worst = std::max(worst, std::fabs(double{got[t][v]} - want[t][v].get<double>()));
      }
    }
    EXPECT_LE(worst, test_support::tolerance(1e-4, 5e-2)) << "sequence of " << ids.size();
  }
}

TEST_P(QwenDecoder, GreedyGenerationsAreTokenIdenticalAloneAndBatched) {
  sampling_options greedy;
  greedy.max_new_tokens = 8;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::vector<int64_t>> wanted;
  std::vector<size_t> decided;
  for (const auto& c : expected_["greedy"]) {
    prompts.push_back(c["ids"].get<std::vector<int64_t>>());
    wanted.push_back(c["tokens"].get<std::vector<int64_t>>());
    decided.push_back(decided_steps(prompts.back(), wanted.back()));
    auto alone = model_->generate({prompts.back()}, greedy);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(prefix(alone[0].tokens, decided.back()), prefix(wanted.back(), decided.back()));
    EXPECT_EQ(alone[0].finish_reason, "length");
    // n samples of one prompt share its prefill (copied to each row): greedy, all are it.
    auto three = model_->generate({prompts.back()}, greedy, 3);
    ASSERT_EQ(three.size(), 3u);
    for (const auto& g : three) {
      EXPECT_EQ(prefix(g.tokens, decided.back()), prefix(wanted.back(), decided.back()));
      ASSERT_EQ(g.logprobs.size(), alone[0].logprobs.size());
      for (size_t t = 0; t < decided.back(); ++t) {
        EXPECT_NEAR(g.logprobs[t], alone[0].logprobs[t], test_support::tolerance(1e-5, 5e-2));
      }
    }
  }
  auto batched = model_->generate(prompts, greedy);
  ASSERT_EQ(batched.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(prefix(batched[i].tokens, decided[i]), prefix(wanted[i], decided[i]))
      << "prompt " << i << " in a left-padded batch";
  }
}

TEST_P(QwenDecoder, LogprobsAreTheModelsOwn) {
  sampling_options greedy;
  greedy.max_new_tokens = 1;
  auto prompt = expected_["greedy"][0]["ids"].get<std::vector<int64_t>>();
  auto g = model_->generate({prompt}, greedy).at(0);
  auto logits = model_->logits(prompt).back();
  double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) {
    sum += std::exp(x - max);
  }
  double want = logits[static_cast<size_t>(g.tokens[0])] - max - std::log(sum);
  EXPECT_NEAR(g.logprobs[0], want, test_support::tolerance(1e-5, 5e-2));
}

TEST_P(QwenDecoder, EmbeddingModeMatchesAndIgnoresItsBatch) {
  std::vector<std::vector<int64_t>> all;
  for (const auto& c : expected_["embed"]) {
    auto ids = c["ids"].get<std::vector<int64_t>>();
    all.push_back(ids);
    auto got = model_->embed({ids}).at(0);
    auto want = c["vector"].get<std::vector<float>>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], test_support::tolerance(1e-5, 2e-2)) << i;
    }
  }
  auto batched = model_->embed(all);
  for (size_t k = 0; k < all.size(); ++k) {
    auto alone = model_->embed({all[k]}).at(0);
    for (size_t i = 0; i < alone.size(); ++i) {
      EXPECT_NEAR(batched[k][i], alone[i], test_support::tolerance(1e-5, 2e-2));
    }
  }
}

TEST_P(QwenDecoder, SamplingIsSeededAndHonoursStopAndTopK) {
  auto prompt = expected_["greedy"][1]["ids"].get<std::vector<int64_t>>();
  sampling_options s;
  s.temperature = 1.0;
  s.top_p = 0.9;
  s.max_new_tokens = 12;
  s.seed = 7;
  auto a = model_->generate({prompt}, s, 4);
  auto b = model_->generate({prompt}, s, 4);
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "same seed, same samples";
    EXPECT_EQ(a[i].tokens.size(), a[i].logprobs.size());
  }
  bool differ = false;
  for (size_t i = 1; i < a.size(); ++i) {
    differ = differ || a[i].tokens != a[0].tokens;
  }
  EXPECT_TRUE(differ) << "four samples at temperature 1 are not all the same";
  s.seed = 8;
  auto c = model_->generate({prompt}, s, 4);
  EXPECT_NE(c[0].tokens, a[0].tokens);
  // top_k = 1 is greedy.
  sampling_options k1 = s;
  k1.top_k = 1;
  sampling_options greedy;
  greedy.max_new_tokens = 12;
  EXPECT_EQ(model_->generate({prompt}, k1).at(0).tokens,
            model_->generate({prompt}, greedy).at(0).tokens);
  // A stop id ends the sequence, kept as its last token.
  auto first = model_->generate({prompt}, greedy).at(0).tokens;
  greedy.stop_ids = {first[2]};
  auto stopped = model_->generate({prompt}, greedy).at(0);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.tokens.back(), first[2]);
  EXPECT_LE(stopped.tokens.size(), 3u);
}

TEST_P(QwenDecoder, CallsBatchedTogetherKeepTheirOwnOptionsAndSamples) {
  // Three calls of different prompts, lengths, temperatures, seeds, n and max_new_tokens in
  // one left-padded batch give what each gives alone.
  std::vector<generation_request> requests;
  for (size_t i = 0; i < 3; ++i) {
    generation_request r;
    r.prompt = expected_["greedy"][i % expected_["greedy"].size()]["ids"].get<std::vector<int64_t>>();
    r.options.temperature = i == 1 ? 0.0 : 0.7 + 0.2 * static_cast<double>(i);
    r.options.top_p = i == 2 ? 0.8 : 1.0;
    r.options.max_new_tokens = static_cast<uint32_t>(4 + 3 * i);
    r.options.seed = 100 + i;
    r.n = static_cast<uint32_t>(1 + i);
    requests.push_back(r);
  }
  auto together = model_->generate(requests);
  ASSERT_EQ(together.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    auto alone = model_->generate(std::vector<generation_request>{requests[i]});
    ASSERT_EQ(together[i].size(), requests[i].n);
    ASSERT_EQ(alone[0].size(), requests[i].n);
    for (size_t k = 0; k < requests[i].n; ++k) {
      EXPECT_EQ(together[i][k].tokens, alone[0][k].tokens) << "call " << i << " sample " << k;
      EXPECT_EQ(together[i][k].tokens.size(), requests[i].options.max_new_tokens);
      EXPECT_EQ(together[i][k].finish_reason, "length");
      ASSERT_EQ(together[i][k].logprobs.size(), alone[0][k].logprobs.size());
      for (size_t t = 0; t < alone[0][k].logprobs.size(); ++t) {
        EXPECT_NEAR(together[i][k].logprobs[t], alone[0][k].logprobs[t],
                    test_support::tolerance(1e-5, 2e-2));
      }
    }
  }
  // The greedy call is the golden greedy continuation.
  auto wanted = expected_["greedy"][1]["tokens"].get<std::vector<int64_t>>();
  wanted.resize(requests[1].options.max_new_tokens);
  const auto decided = decided_steps(requests[1].prompt, wanted);
  EXPECT_EQ(prefix(together[1][0].tokens, decided), prefix(wanted, decided));
}

TEST_P(QwenDecoder, FixedShapeStepsDecodeAsEagerStepsDo) {
  // decode_graphs = 1: every step attends to the whole cache under a mask and writes at a
  // position held on the device; on a GPU it is a CUDA graph replayed, here the same step run
  // eagerly. Its tokens are the eager decoder's, alone, left-padded in a batch, with n samples
  // of a prompt and with a seeded sampled call beside greedy ones.
  auto eager_options = test_support::test_options();
  eager_options.decode_graphs = 0;
  auto fixed_options = test_support::test_options();
  fixed_options.decode_graphs = 1;
  auto eager = qwen_decoder::load(fixture(GetParam()), eager_options);
  auto fixed = qwen_decoder::load(fixture(GetParam()), fixed_options);
  std::vector<generation_request> requests;
  for (const auto& c : expected_["greedy"]) {
    generation_request r;
    r.prompt = c["ids"].get<std::vector<int64_t>>();
    r.options.max_new_tokens = 10;
    requests.push_back(r);
  }
  requests[0].n = 3;
  auto sampled = requests[1];
  sampled.options.temperature = 0.8;
  sampled.options.seed = 11;
  sampled.n = 2;
  requests.push_back(sampled);
  std::vector<std::vector<generation_request>> runs;
  for (const auto& r : requests) {
    runs.push_back({r});  // alone
  }
  runs.push_back(requests);  // together
  for (const auto& run : runs) {
    auto want = eager->generate(run);
    auto got = fixed->generate(run);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      const bool greedy = run[i].options.temperature == 0.0;
      if (!greedy && test_support::low_precision()) {
        continue;  // a sampled token may flip with the logits' rounding
      }
      for (size_t k = 0; k < want[i].size(); ++k) {
        const auto decided = decided_steps(run[i].prompt, want[i][k].tokens);
        EXPECT_EQ(prefix(got[i][k].tokens, decided), prefix(want[i][k].tokens, decided))
          << "call " << i << " of " << run.size() << ", sample " << k;
        for (size_t t = 0; t < std::min(decided, got[i][k].logprobs.size()); ++t) {
          EXPECT_NEAR(got[i][k].logprobs[t], want[i][k].logprobs[t],
                      test_support::tolerance(1e-4, 5e-2));
        }
      }
    }
  }
  EXPECT_EQ(eager->replayed_steps(), 0u);
  if (test_support::test_options().device.rfind("cuda", 0) == 0) {
    EXPECT_GT(fixed->replayed_steps(), 0u) << "the steps were replayed from CUDA graphs";
  } else {
    EXPECT_EQ(fixed->replayed_steps(), 0u) << "no graphs without CUDA";
  }
}

TEST_P(QwenDecoder, RefusesInputsItCannotRun) {
  EXPECT_THROW(model_->logits({}), std::invalid_argument);
  EXPECT_THROW(model_->logits({1, 999999}), std::invalid_argument);
  EXPECT_TRUE(model_->generate({}, sampling_options{}).empty());
}

INSTANTIATE_TEST_SUITE_P(Tiny, QwenDecoder, ::testing::Values("tiny_qwen3", "tiny_qwen2"));

TEST(QwenDecoderLoad, RefusesOtherArchitecturesAndNamesMissingTensors) {
  auto dir = std::filesystem::temp_directory_path() / "arbiter_qwen_load";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream{dir / "config.json"} << R"({"model_type":"llama"})";
  try {
    qwen_decoder::load(dir.string());
    ADD_FAILURE() << "loaded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string{e.what()}.find("model_type \"llama\" is not supported"),
              std::string::npos)
      << e.what();
  }
  // The tiny Qwen3's config over the tiny Qwen2's weights: no q_norm.
  std::filesystem::copy_file(fixture("tiny_qwen3") + "/config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(fixture("tiny_qwen2") + "/model.safetensors", dir / "model.safetensors");
  try {
    qwen_decoder::load(dir.string());
    ADD_FAILURE() << "loaded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string{e.what()}.find("model.safetensors: tensor model.layers.0.self_attn."),
              std::string::npos)
      << e.what();
  }
}

// cuDNN's attention builds a graph per shape, and a decoder's shapes are new at every step
// (loading.hpp, use_no_cudnn_attention). Without a GPU the load fails at its first tensor,
// after the placement has set what this checks.
TEST(ModelPlacement, AGpuModelTurnsCudnnAttentionOffUnlessTheEnvironmentKeepsIt) {
  const bool before = cudnn_attention_allowed();
  model_options gpu;
  gpu.device = "cuda:0";
  gpu.dtype = "bf16";
  auto load_on = [](const model_options& options) {
    try {
      qwen_decoder::load(fixture("tiny_qwen3"), options);
    } catch (const std::exception&) {
    }
  };
  ::unsetenv("ARBITER_CUDNN_ATTENTION");
  allow_cudnn_attention(true);
  load_on(model_options{});
  EXPECT_TRUE(cudnn_attention_allowed()) << "a CPU model leaves the GPU's attention alone";
  load_on(gpu);
  EXPECT_FALSE(cudnn_attention_allowed());
  ::setenv("ARBITER_CUDNN_ATTENTION", "1", 1);
  allow_cudnn_attention(true);
  load_on(gpu);
  EXPECT_TRUE(cudnn_attention_allowed());
  ::unsetenv("ARBITER_CUDNN_ATTENTION");
  allow_cudnn_attention(before);
}
