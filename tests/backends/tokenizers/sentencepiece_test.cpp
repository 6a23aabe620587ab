// SentencePiece tokenizers (DeBERTa's spm.model through libsentencepiece) against the ids of
// Hugging Face `tokenizers` reading the tokenizer.json transformers' DebertaV2Converter makes
// of the same model. Fixture and script: tests/backends/models/make_deberta_nli_fixture.py
// (fixtures/tiny_deberta_nli/): unicode, NFKC, emoji, CJK, whitespace runs, numbers, added
// tokens inside the text, pairs, longest-first truncation.

#include "backends/tokenizers/tokenizer.hpp"

#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using arbiter::backends::tokenizers::tokenizer;
using json = nlohmann::json;

namespace {

const std::string folder = ARBITER_SOURCE_DIR "/tests/backends/models/fixtures/tiny_deberta_nli/";

json expected() {
  std::ifstream in{folder + "expected.json"};
  return json::parse(in);
}

void expect_hf_ids(const tokenizer& tok, const std::string& how) {
  const json cases = expected()["tokenizer_cases"];
  ASSERT_GT(cases.size(), 30u);
  for (const json& c : cases) {
    const auto text = c["text"].get<std::string>();
    const size_t max_length = c.value("max_length", size_t{0});
    const auto got = c.contains("pair")
                       ? tok.encode_pair(text, c["pair"].get<std::string>(), max_length)
                       : tok.encode(text, max_length);
    const std::string label = how + " " + c.dump();
    EXPECT_EQ(got.ids, c["ids"].get<std::vector<int64_t>>()) << label;
    EXPECT_EQ(got.type_ids, c["type_ids"].get<std::vector<int64_t>>()) << label;
    EXPECT_EQ(got.attention_mask.size(), got.ids.size());
  }
}

} // namespace

TEST(SentencePieceTokenizer, MatchesHuggingFaceWithTheFoldersTokenizerJson) {
  expect_hf_ids(tokenizer::from_sentencepiece(folder + "spm.model", folder + "tokenizer.json"),
                "spm.model + tokenizer.json");
}

TEST(SentencePieceTokenizer, MatchesHuggingFaceFromSpmModelAlone) {
  // DeBERTa's defaults: control pieces special, [MASK] after the last piece, its template.
  expect_hf_ids(tokenizer::from_sentencepiece(folder + "spm.model"), "spm.model alone");
}

TEST(SentencePieceTokenizer, SpecialTokensAndDecode) {
  const auto tok = tokenizer::from_sentencepiece(folder + "spm.model");
  EXPECT_EQ(tok.token_id("[CLS]"), 1);
  EXPECT_EQ(tok.token_id("[SEP]"), 2);
  EXPECT_EQ(tok.token_id("[MASK]"), 220);
  EXPECT_EQ(tok.token_id("no-such-piece"), std::nullopt);
  EXPECT_EQ(tok.added_special_tokens(false), 2u);
  EXPECT_EQ(tok.added_special_tokens(true), 3u);
  const auto enc = tok.encode("The cat sat on the mat.");
  EXPECT_EQ(tok.decode(enc.ids), "The cat sat on the mat.");
  EXPECT_EQ(tok.decode(enc.ids, false), "[CLS]The cat sat on the mat.[SEP]");
  EXPECT_THROW(tok.encode("too long for two", 1), std::invalid_argument);
}

TEST(SentencePieceTokenizer, ErrorsNameTheFile) {
  try {
    (void)tokenizer::from_sentencepiece(folder + "missing.model");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("missing.model"), std::string::npos) << e.what();
  }
  try {
    // A file that is not a SentencePiece model.
    (void)tokenizer::from_sentencepiece(folder + "config.json");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string{e.what()}.find("config.json"), std::string::npos) << e.what();
  }
}
