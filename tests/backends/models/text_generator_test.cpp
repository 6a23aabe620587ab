// Text in, completions out, several calls at once: the tiny Qwen3 LM with its byte-level BPE
// tokenizer (fixtures/tiny_qwen3_lm). Calls batched together give what each gives alone; a
// call that cannot run fails alone; the token budget cuts the calls into several passes.

#include "backends/models/text_generator.hpp"
#include "test_device.hpp"

#include <gtest/gtest.h>

using namespace arbiter;
using namespace arbiter::backends::models;

namespace {

const std::string folder = ARBITER_SOURCE_DIR "/tests/backends/models/fixtures/tiny_qwen3_lm";

std::vector<model_call> calls() {
  std::vector<model_call> out;
  for (int i = 0; i < 4; ++i) {
    model_call c;
    c.prompt = std::string(static_cast<size_t>(1 + 3 * i), 'a') + " question " + std::to_string(i);
    c.temperature = i == 0 ? 0.0 : 0.9;
    c.max_tokens = static_cast<uint32_t>(3 + i);
    c.n = static_cast<uint32_t>(1 + i % 2);
    c.seed = static_cast<uint64_t>(40 + i);
    out.push_back(c);
  }
  return out;
}

void expect_same(const model_output& a, const model_output& b) {
  ASSERT_EQ(a.texts.size(), b.texts.size());
  for (size_t k = 0; k < a.texts.size(); ++k) {
    EXPECT_EQ(a.texts[k].text, b.texts[k].text);
    EXPECT_EQ(a.texts[k].tokens, b.texts[k].tokens);
    // bf16: a batch's shape changes the rounding of each log-probability by ~1e-4.
    EXPECT_NEAR(a.texts[k].mean_logprob, b.texts[k].mean_logprob, test_support::tolerance(1e-5, 2e-2));
  }
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.completion_tokens, b.completion_tokens);
}

} // namespace

TEST(TextGenerator, CallsRunTogetherAsTheyRunAlone) {
  auto gen = text_generator::load(folder, test_support::test_options());
  auto all = calls();
  std::vector<text_generator::call_ref> refs;
  for (size_t i = 0; i < all.size(); ++i) {
    refs.push_back({&all[i], i % 2 == 1});
  }
  size_t passes = 0;
  auto together = gen->complete_all(refs, 16384, &passes);
  EXPECT_EQ(passes, 1u);
  ASSERT_EQ(together.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_TRUE(together[i].output) << together[i].error;
    EXPECT_EQ(together[i].output->texts.size(), all[i].n);
    expect_same(*together[i].output, gen->complete(all[i], i % 2 == 1));
  }
  // A small budget: one call per pass, the same texts.
  auto split = gen->complete_all(refs, 8, &passes);
  EXPECT_EQ(passes, all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_TRUE(split[i].output) << split[i].error;
    expect_same(*split[i].output, *together[i].output);
  }
}

TEST(TextGenerator, ACallThatCannotRunFailsAlone) {
  auto gen = text_generator::load(folder, test_support::test_options());
  auto all = calls();
  model_call too_long = all[1];
  too_long.prompt = std::string(2000, 'x');
  model_call empty = all[2];
  empty.prompt.clear();
  std::vector<text_generator::call_ref> refs = {
    {&all[0], false}, {&too_long, false}, {&empty, false}, {&all[3], false}};
  auto got = gen->complete_all(refs);
  ASSERT_EQ(got.size(), 4u);
  ASSERT_TRUE(got[0].output && got[3].output);
  expect_same(*got[0].output, gen->complete(all[0], false));
  EXPECT_FALSE(got[1].output);
  EXPECT_NE(got[1].error.find("new ones (max_tokens) exceeds the model's 128; send a shorter"),
            std::string::npos)
    << got[1].error;
  EXPECT_TRUE(got[1].rejected);
  EXPECT_FALSE(got[2].output);
  EXPECT_EQ(got[2].error, "the prompt is empty");
  EXPECT_TRUE(got[2].rejected);
  EXPECT_FALSE(got[0].rejected);
  EXPECT_THROW(gen->complete(too_long, false), std::invalid_argument);
  // A max_tokens nobody sent is named as the default it is.
  model_call unset = all[1];
  unset.prompt = std::string(100, 'x');
  unset.max_tokens.reset();
  try {
    gen->complete(unset, false);
    ADD_FAILURE() << "256 default new tokens do not fit in 128";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string{e.what()}.find("plus 256 new ones (max_tokens, unset: the default)"),
              std::string::npos)
      << e.what();
  }
}

TEST(TextGenerator, TopPZeroAndATemperatureNearZeroAreGreedyAndHarmNoNeighbour) {
  // top_p 0 dropped every token and a temperature of 1e-40 overflowed the logits: the
  // sampler threw, and every call decoded in the same pass failed with it.
  auto gen = text_generator::load(folder, test_support::test_options());
  auto all = calls();
  model_call greedy = all[1];
  greedy.temperature = 0.0;
  greedy.n = 1;
  model_call no_mass = greedy;
  no_mass.temperature = 0.9;
  no_mass.top_p = 0.0;
  model_call frozen = greedy;
  frozen.temperature = 1e-40;
  std::vector<text_generator::call_ref> refs = {
    {&all[0], false}, {&no_mass, false}, {&frozen, false}, {&all[3], false}};
  auto got = gen->complete_all(refs);
  ASSERT_EQ(got.size(), 4u);
  const auto alone = gen->complete(greedy, false);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].output) << i << ": " << got[i].error;
  }
  expect_same(*got[1].output, alone);
  expect_same(*got[2].output, alone);
  expect_same(*got[3].output, gen->complete(all[3], false));
}

TEST(TextGenerator, AChatWithAPartItCannotReadFailsNamingItInsteadOfDroppingIt) {
  auto gen = text_generator::load(folder, test_support::test_options());
  model_call text_parts;
  text_parts.messages = R"([{"role": "user", "content": [{"type": "text", "text": "a b"},
                                                          {"type": "text", "text": " c"}]}])";
  text_parts.max_tokens = 2;
  text_parts.temperature = 0.0;
  model_call plain = text_parts;
  plain.messages = R"([{"role": "user", "content": "a b\n c"}])";
  model_call image = text_parts;
  image.messages = R"([{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}])";
  // A role the template does not render and a message with no content were rendered as if
  // they were a user's turn with what they held.
  model_call tool = text_parts;
  tool.messages = R"([{"role": "user", "content": "a"}, {"role": "tool", "content": "42"}])";
  model_call no_content = text_parts;
  no_content.messages = R"([{"role": "user", "content": "a"}, {"role": "assistant"}])";
  // A pass-through client's fields that only a remote source gets.
  model_call extra = text_parts;
  extra.extra_body = R"({"logit_bias":{"7":-100},"top_k":5})";
  std::vector<text_generator::call_ref> refs = {
    {&text_parts, true}, {&image, true}, {&tool, true}, {&no_content, true}, {&extra, true}};
  auto got = gen->complete_all(refs);
  ASSERT_EQ(got.size(), 5u);
  ASSERT_TRUE(got[0].output) << got[0].error;
  // Text parts are the text they hold, joined with "\n" (vLLM's rule).
  expect_same(*got[0].output, gen->complete(plain, true));
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_FALSE(got[i].output);
    EXPECT_TRUE(got[i].rejected);
  }
  EXPECT_EQ(got[1].error, "messages[1].content[1]: a part of type 'image_url'; this local model "
                          "reads text parts only");
  EXPECT_EQ(got[2].error, "messages[1].role: 'tool' is not one of system, user, assistant, the "
                          "roles this local model reads");
  EXPECT_EQ(got[3].error, "messages[1].content: expected a string or a list of text parts");
  EXPECT_EQ(got[4].error, "logit_bias, top_k: a local generator cannot honour them (only a "
                          "remote source gets them)");
}

TEST(TextGenerator, AStopStringEndsDecodingAtTheTokenThatCompletesIt) {
  // Before, a sequence decoded to max_tokens and its text was cut afterwards: ΔIG's samples
  // (stop "\n") paid for every token up to max_new_tokens, and usage counted them all.
  auto gen = text_generator::load(folder, test_support::test_options());
  model_call call;
  call.messages = R"([{"role": "user", "content": "tell me a long story"}])";
  call.max_tokens = 40;
  call.temperature = 0.9;
  call.seed = 7;
  call.n = 4;
  const auto free = gen->complete(call, true);
  ASSERT_EQ(free.texts.size(), 4u);
  // A stop string that a sample which ran to max_tokens holds past its start.
  std::string stop;
  for (const auto& t : free.texts) {
    if (t.finish_reason != "length" || !stop.empty()) {
      continue;
    }
    for (size_t at = t.text.size() / 2; at < t.text.size() && stop.empty(); ++at) {
      if (std::isalpha(static_cast<unsigned char>(t.text[at]))) {
        stop = t.text.substr(at, 1);
      }
    }
  }
  ASSERT_FALSE(stop.empty()) << "no sample ran to max_tokens with a letter in its second half";
  model_call stopped_call = call;
  stopped_call.stop = {stop};
  const auto stopped = gen->complete(stopped_call, true);
  ASSERT_EQ(stopped.texts.size(), 4u);
  uint32_t ended_early = 0;
  for (size_t k = 0; k < 4; ++k) {
    // The same draws: each text is the free one cut at its first stop string.
    const std::string& text = free.texts[k].text;
    const auto cut = text.find(stop);
    SCOPED_TRACE(text);
    EXPECT_EQ(stopped.texts[k].text, text.substr(0, cut));
    if (cut != std::string::npos) {
      EXPECT_EQ(stopped.texts[k].finish_reason, "stop");
      EXPECT_LE(stopped.texts[k].tokens, free.texts[k].tokens);
      ended_early += free.texts[k].finish_reason == "length" ? 1 : 0;
    } else {
      EXPECT_EQ(stopped.texts[k].finish_reason, free.texts[k].finish_reason);
    }
  }
  ASSERT_GE(ended_early, 1u);
  // Decoding ended where the stop string was completed: fewer tokens generated and counted.
  EXPECT_LT(stopped.completion_tokens, free.completion_tokens);
}
