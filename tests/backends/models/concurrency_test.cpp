// Two model workers run on two threads at once (a generator beside an NLI classifier, as
// `[[models]]` spawns them): neither changes the other's numbers.

#include "backends/models/text_classifier.hpp"
#include "backends/models/text_generator.hpp"
#include "test_device.hpp"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::backends::models;

TEST(ModelConcurrency, AGeneratorBesideAClassifierGivesItsNumbersAlone) {
  const std::string fixtures = ARBITER_SOURCE_DIR "/tests/backends/models/fixtures/";
  auto gen = text_generator::load(fixtures + "tiny_qwen3_lm", test_support::test_options());
  auto nli = text_classifier::load(fixtures + "tiny_deberta_nli", test_support::test_options());
  model_call call;
  call.prompt = "What is the capital of France? Paris is the capital of France.";
  call.temperature = 1.0;
  call.max_tokens = 10;
  call.n = 3;
  call.seed = 11;
  const auto alone = gen->complete(call, false);
  std::vector<std::pair<std::string, std::string>> pairs(
    8, {"Paris is the capital of France.", "The capital of France is Paris."});
  const auto probs_alone = nli->nli(pairs);
  std::atomic<bool> stop{false};
  std::atomic<int> nli_differ{0};
  std::thread other([&] {
    while (!stop) {
      auto p = nli->nli(pairs);
      if (std::abs(p[0].entailment - probs_alone[0].entailment) > 1e-6) {
        ++nli_differ;
      }
    }
  });
  int differ = 0;
  for (int round = 0; round < 40; ++round) {
    auto again = gen->complete(call, false);
    for (size_t k = 0; k < alone.texts.size(); ++k) {
      if (again.texts[k].text != alone.texts[k].text
          || std::abs(again.texts[k].mean_logprob - alone.texts[k].mean_logprob) > 1e-6) {
        ++differ;
      }
    }
  }
  stop = true;
  other.join();
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(nli_differ.load(), 0);
}
