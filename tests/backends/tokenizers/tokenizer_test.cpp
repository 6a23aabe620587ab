#include "backends/tokenizers/tokenizer.hpp"
#include "backends/tokenizers/unicode.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using arbiter::backends::tokenizers::encoding;
using arbiter::backends::tokenizers::tokenizer;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

/// Written by tests/backends/tokenizers/make_fixtures.py with the `tokenizers` library.
const std::string fixtures = ARBITER_SOURCE_DIR "/tests/backends/tokenizers/fixtures/";

json read_json(const std::string& path) {
  std::ifstream in{path};
  if (!in) throw std::runtime_error("cannot open " + path);
  return json::parse(in);
}

/// The message of the std::runtime_error that loading `text` throws, or "" when it loads.
std::string load_error(const std::string& text) {
  try {
    tokenizer::from_json(text, "test/tokenizer.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

/// A small valid WordPiece tokenizer.json to take apart in the error tests.
json minimal_wordpiece() {
  return json::parse(R"({
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                   "strip_accents": null, "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100,
              "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "world": 4, "##s": 5}},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
    "added_tokens": [{"id": 1, "content": "[CLS]", "special": true, "normalized": false,
                      "single_word": false, "lstrip": false, "rstrip": false}]
  })");
}

// --- golden cases from Hugging Face `tokenizers` ------------------------------------------------

class GoldenCases : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenCases, MatchTokenizersExactly) {
  const std::string dir = fixtures + GetParam();
  const tokenizer tok = tokenizer::from_file(dir + "/tokenizer.json");
  const json expected = read_json(dir + "/expected.json");
  ASSERT_GE(expected.at("cases").size(), 30u);
  for (const json& c : expected.at("cases")) {
    SCOPED_TRACE(GetParam() + " case " + c.at("name").get<std::string>());
    const auto max_length = c.at("max_length").get<std::size_t>();
    const std::string text = c.at("text").get<std::string>();
    const encoding got = c.contains("pair")
                           ? tok.encode_pair(text, c.at("pair").get<std::string>(), max_length)
                           : tok.encode(text, max_length);
    EXPECT_EQ(got.ids, c.at("ids").get<std::vector<std::int64_t>>());
    EXPECT_EQ(got.type_ids, c.at("type_ids").get<std::vector<std::int64_t>>());
    EXPECT_EQ(got.attention_mask, c.at("attention_mask").get<std::vector<std::int64_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenCases,
                         ::testing::Values("tiny_bpe", "tiny_bpe_gpt2", "tiny_bpe_llama3",
                                           "tiny_wordpiece", "tiny_bpe_bert", "minilm"),
                         [](const auto& param_info) { return param_info.param; });

// --- API ------------------------------------------------------------------------------------------

TEST(Tokenizer, LooksUpAddedAndVocabularyTokens) {
  const tokenizer bpe = tokenizer::from_file(fixtures + "tiny_bpe/tokenizer.json");
  EXPECT_EQ(bpe.token_id("<|endoftext|>"), 700);
  EXPECT_EQ(bpe.token_id("<think>"), 703);
  EXPECT_EQ(bpe.token_id("!"), 0);
  EXPECT_EQ(bpe.token_id("no such token"), std::nullopt);

  const tokenizer minilm = tokenizer::from_file(fixtures + "minilm/tokenizer.json");
  EXPECT_EQ(minilm.token_id("[CLS]"), 101);
  EXPECT_EQ(minilm.token_id("hello"), 7592);
}

TEST(Tokenizer, DecodesWhatItEncodes) {
  const tokenizer bpe = tokenizer::from_file(fixtures + "tiny_bpe/tokenizer.json");
  for (std::string text : {"Hello world", "  two  spaces\tand a tab\n", "café 東京 🚀 12345",
                           "I'm don't"}) {
    EXPECT_EQ(bpe.decode(bpe.encode(text).ids), text) << text;
  }
  // Special tokens: the template's <|endoftext|> is left out unless asked for.
  auto ids = bpe.encode("<|im_start|>hi").ids;
  EXPECT_EQ(bpe.decode(ids), "hi");
  EXPECT_EQ(bpe.decode(ids, /*skip_special=*/false), "<|im_start|>hi<|endoftext|>");
  const tokenizer minilm = tokenizer::from_file(fixtures + "minilm/tokenizer.json");
  EXPECT_EQ(minilm.decode(minilm.encode("Tokenization works, mostly").ids),
            "tokenization works , mostly");
}

// A generator's tokens can end (or begin) inside a multi-byte character: a random-weight model
// often, a real one when max_tokens cuts an emoji. The text must be what `tokenizers` gives,
// or the log (JSON, valid UTF-8 only) and a replay of the prompts built from it would differ.
TEST(Tokenizer, DecodesCutCharactersAsTokenizersDoes) {
  const tokenizer bpe = tokenizer::from_file(fixtures + "tiny_bpe/tokenizer.json");
  const json expected = read_json(fixtures + "tiny_bpe/decoded.json");
  ASSERT_GE(expected.at("cases").size(), 100u);
  std::size_t replaced = 0;
  for (const json& c : expected.at("cases")) {
    const auto ids = c.at("ids").get<std::vector<std::int64_t>>();
    const auto text = c.at("text").get<std::string>();
    EXPECT_EQ(bpe.decode(ids), text) << c.at("ids").dump();
    if (text.find("\xEF\xBF\xBD") != std::string::npos) ++replaced;
  }
  EXPECT_GE(replaced, 50u);  // the fixture does cut characters
}

TEST(Unicode, ReplacesEachMaximalInvalidSubsequenceOnce) {
  using arbiter::backends::tokenizers::unicode::to_valid_utf8;
  const std::string r = "\xEF\xBF\xBD";
  // Python's bytes.decode("utf-8", "replace") of each.
  EXPECT_EQ(to_valid_utf8("caf\xC3\xA9 \xF0\x9F\x9A\x80"), "caf\xC3\xA9 \xF0\x9F\x9A\x80");
  EXPECT_EQ(to_valid_utf8("\xE4\xB8"), r);
  EXPECT_EQ(to_valid_utf8("\xE4\xB8" "A"), r + "A");
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x9A"), r);
  EXPECT_EQ(to_valid_utf8("a\x80" "b"), "a" + r + "b");
  EXPECT_EQ(to_valid_utf8("\xFF\xFE"), r + r);
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), r + r);                  // overlong
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), r + r + r);          // a surrogate
  EXPECT_EQ(to_valid_utf8("\xE0\x80\xAF"), r + r + r);          // overlong
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(to_valid_utf8(""), "");
}

TEST(Tokenizer, CountsTheSpecialTokensOfItsTemplate) {
  const tokenizer bpe = tokenizer::from_file(fixtures + "tiny_bpe/tokenizer.json");
  EXPECT_EQ(bpe.added_special_tokens(false), 1u);
  EXPECT_EQ(bpe.added_special_tokens(true), 2u);
  const tokenizer minilm = tokenizer::from_file(fixtures + "minilm/tokenizer.json");
  EXPECT_EQ(minilm.added_special_tokens(false), 2u);
  EXPECT_EQ(minilm.added_special_tokens(true), 3u);
}

TEST(Tokenizer, TruncationKeepsTheSpecialTokens) {
  const tokenizer minilm = tokenizer::from_file(fixtures + "minilm/tokenizer.json");
  const encoding e = minilm.encode("hello hello hello hello", 4);
  EXPECT_EQ(e.ids, (std::vector<std::int64_t>{101, 7592, 7592, 102}));
  // Exactly the special tokens: the text is cut away entirely.
  EXPECT_EQ(minilm.encode("hello", 2).ids, (std::vector<std::int64_t>{101, 102}));
}

TEST(Tokenizer, RefusesAMaxLengthBelowTheSpecialTokens) {
  const tokenizer minilm = tokenizer::from_file(fixtures + "minilm/tokenizer.json");
  EXPECT_THROW(minilm.encode("hello", 1), std::invalid_argument);
  EXPECT_THROW(minilm.encode_pair("a", "b", 2), std::invalid_argument);
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacters) {
  const tokenizer minilm = tokenizer::from_file(fixtures + "minilm/tokenizer.json");
  // BertNormalizer's clean_text drops U+FFFD, so the stray byte disappears.
  EXPECT_EQ(minilm.encode("hello\xff world").ids, minilm.encode("hello world").ids);
}

TEST(Tokenizer, MinimalWordPieceEncodesPairs) {
  const tokenizer tok = tokenizer::from_json(minimal_wordpiece().dump(), "minimal");
  const encoding e = tok.encode_pair("Hello worlds", "xyz");
  EXPECT_EQ(e.ids, (std::vector<std::int64_t>{1, 3, 4, 5, 2, 0, 2}));
  EXPECT_EQ(e.type_ids, (std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 1}));
}

// --- loading errors -----------------------------------------------------------------------------

TEST(TokenizerErrors, MissingFileNamesThePath) {
  try {
    tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    FAIL() << "loaded a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/tokenizer.json"));
  }
}

TEST(TokenizerErrors, InvalidJson) {
  EXPECT_THAT(load_error("{\"model\": "), HasSubstr("test/tokenizer.json: not valid JSON"));
}

TEST(TokenizerErrors, UnsupportedModelType) {
  json j = minimal_wordpiece();
  j["model"]["type"] = "Unigram";
  EXPECT_EQ(load_error(j.dump()), "test/tokenizer.json: model.type \"Unigram\" is not supported");
}

TEST(TokenizerErrors, MissingModel) {
  json j = minimal_wordpiece();
  j.erase("model");
  EXPECT_EQ(load_error(j.dump()), "test/tokenizer.json: model is missing");
}

TEST(TokenizerErrors, UnsupportedNormalizerInsideASequence) {
  json j = minimal_wordpiece();
  j["normalizer"] = json::parse(
    R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled"}]})");
  EXPECT_THAT(load_error(j.dump()),
              HasSubstr("normalizer.normalizers[1].type \"Precompiled\" is not supported"));
}

TEST(TokenizerErrors, UnsupportedPreTokenizer) {
  json j = minimal_wordpiece();
  j["pre_tokenizer"] = json::parse(R"({"type": "Metaspace", "replacement": "▁"})");
  EXPECT_THAT(load_error(j.dump()),
              HasSubstr("pre_tokenizer.type \"Metaspace\" is not supported"));
}

TEST(TokenizerErrors, UnknownSplitRegex) {
  json j = minimal_wordpiece();
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated", "invert": false}]})");
  EXPECT_THAT(load_error(j.dump()),
              HasSubstr("pre_tokenizer.pretokenizers[0].pattern.Regex \"\\d+\" is not supported"));
}

TEST(TokenizerErrors, UnsupportedSplitBehavior) {
  json j = minimal_wordpiece();
  j["pre_tokenizer"] = json::parse(R"({"type": "Split",
    "pattern": {"Regex": "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
    "behavior": "Removed", "invert": false})");
  EXPECT_THAT(load_error(j.dump()), HasSubstr("pre_tokenizer.behavior \"Removed\" is not supported"));
}

TEST(TokenizerErrors, UnsupportedPostProcessor) {
  json j = minimal_wordpiece();
  j["post_processor"] = json::parse(R"({"type": "RobertaProcessing"})");
  EXPECT_THAT(load_error(j.dump()),
              HasSubstr("post_processor.type \"RobertaProcessing\" is not supported"));
}

TEST(TokenizerErrors, UnknownTokenOutsideTheVocabulary) {
  json j = minimal_wordpiece();
  j["model"]["unk_token"] = "<unk>";
  EXPECT_THAT(load_error(j.dump()),
              HasSubstr("model.unk_token \"<unk>\" is not in model.vocab"));
}

TEST(TokenizerErrors, MergeOfUnknownTokens) {
  const json j = json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
                                            "merges": [["a", "b"]]}})");
  EXPECT_THAT(load_error(j.dump()), HasSubstr("model.merges[0]: \"ab\" is not in model.vocab"));
}

TEST(TokenizerErrors, WrongJsonTypeIsNamed) {
  json j = minimal_wordpiece();
  j["model"]["vocab"]["hello"] = "three";
  EXPECT_THAT(load_error(j.dump()), HasSubstr("model.vocab is not an integer"));
}

} // namespace
