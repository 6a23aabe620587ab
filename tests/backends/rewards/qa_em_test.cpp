#include "backends/rewards/qa_em.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace arbiter::backends::rewards;

namespace {

/// A Search-R1 style chat prompt (system and user turns, then the assistant's opening), with
/// the instructions' own <information>, <answer> and example answer tags, as the decoded
/// rollouts carry them.
std::string search_prompt(const std::string& question) {
  return "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
         "<|im_start|>user\nAnswer the given question. Think inside <think> and </think> "
         "whenever you get new information. When you lack some knowledge, call a search engine "
         "with <search> query </search>; it returns the top results between <information> and "
         "</information>. Search as many times as you want. When no more knowledge is needed, "
         "give the answer inside <answer> and </answer>, without detailed illustrations. For "
         "example, <answer> Beijing </answer>. Question: "
         + question + "\n<|im_end|>\n<|im_start|>assistant\n";
}

const std::string doc_one =
  "Doc 1(Title: \"Super Monsters\") Super Monsters is an animated series about the children\n"
  " of famous monsters who attend preschool.";
const std::string doc_two =
  "Doc 1(Title: \"Zoe Walker\") Zoe Walker is a young witch in the Super Monsters series.\n"
  " Doc 2(Title: \"Witchcraft\") A witch practises magic.";

/// A rollout with two searches and a final answer.
std::string full_rollout() {
  return search_prompt("what type of monster is zoe from super monsters?")
         + "<think> I need to find out who Zoe is. </think>\n"
           "<search> Zoe Super Monsters </search>\n\n"
           "<information>"
         + doc_one
         + "</information>\n\n"
           "<think> Not enough yet. </think>\n"
           "<search> Zoe Walker monster type </search>\n"
           "<information>\n "
         + doc_two
         + "\n</information>\n"
           "<think> Zoe is a witch. </think>\n"
           "<answer> a witch </answer><|im_end|>";
}

} // namespace

// ---- whole rollouts -----------------------------------------------------------------------

TEST(SearchRollout, ParsesAFullRollout) {
  auto rollout = parse_search_rollout(full_rollout());
  EXPECT_EQ(rollout.question, "what type of monster is zoe from super monsters?");
  // The prompt's "<information> and </information>" is dropped; the blocks are stripped.
  EXPECT_EQ(rollout.information, (std::vector<std::string>{doc_one, doc_two}));
  EXPECT_EQ(rollout.answer, "a witch");
  EXPECT_EQ(join_information(rollout.information), doc_one + "\n" + doc_two);
}

TEST(SearchRollout, WithoutAnAnswerTheLastTaggedTextIsThePromptsExample) {
  // InfoReasoner takes the last <answer> match, and the prompt's instructions hold two.
  auto rollout = parse_search_rollout(search_prompt("who wrote hamlet?")
                                      + "<think> Let me search. </think>\n"
                                        "<search> hamlet author </search>\n"
                                        "<information>Doc 1 Hamlet, by Shakespeare.</information>"
                                        "\n<think> The answer is Shakespeare.");
  EXPECT_EQ(rollout.answer, "Beijing");
  EXPECT_EQ(rollout.information, (std::vector<std::string>{"Doc 1 Hamlet, by Shakespeare."}));
}

TEST(SearchRollout, NoAnswerTagsAtAll) {
  auto rollout = parse_search_rollout("Question: who wrote hamlet?\nShakespeare, I think.");
  EXPECT_EQ(rollout.answer, std::nullopt);
  EXPECT_EQ(rollout.question, "who wrote hamlet?");
  EXPECT_TRUE(rollout.information.empty());
}

TEST(SearchRollout, NoInformationBlocks) {
  auto rollout = parse_search_rollout(search_prompt("capital of france?")
                                      + "<think> I know this. </think>\n<answer> Paris </answer>");
  EXPECT_TRUE(rollout.information.empty());
  EXPECT_EQ(join_information(rollout.information), "");
  EXPECT_EQ(rollout.answer, "Paris");
  EXPECT_EQ(rollout.question, "capital of france?");
}

// ---- the answer ---------------------------------------------------------------------------

TEST(SearchRollout, TakesTheLastClosedAnswerStripped) {
  auto rollout = parse_search_rollout("<answer>first</answer> text <answer>\n  second\n line \t"
                                      "</answer> <answer> unclosed");
  EXPECT_EQ(rollout.answer, "second\n line");
  // The first closing tag ends a match, even after another opening tag.
  EXPECT_EQ(parse_search_rollout("<answer>a <answer> b</answer>").answer, "a <answer> b");
  EXPECT_EQ(parse_search_rollout("<answer></answer>").answer, "");
  // Tags are case-sensitive.
  EXPECT_EQ(parse_search_rollout("<Answer>x</Answer>").answer, std::nullopt);
}

// ---- the question -------------------------------------------------------------------------

TEST(SearchRollout, QuestionRunsToTheEndOfItsLine) {
  auto rollout = parse_search_rollout(
    "<|im_start|>user\nContext first.\nquestion:   When was it built?  \nMore text.<|im_end|>");
  EXPECT_EQ(rollout.question, "When was it built?");
}

TEST(SearchRollout, QuestionAfterNewlinesAndAtTheEndOfTheBlock) {
  // \s* after the label skips newlines too.
  EXPECT_EQ(parse_search_rollout("<|im_start|>user Question:\n\n  Who? <|im_end|>").question,
            "Who?");
  EXPECT_EQ(parse_search_rollout("<|im_start|>user Question:<|im_end|>").question, "");
}

TEST(SearchRollout, TagsAndLabelIgnoreAsciiCase) {
  EXPECT_EQ(parse_search_rollout("<|IM_START|>User QUESTION: loud?\n<|Im_End|>").question,
            "loud?");
}

TEST(SearchRollout, UserBlockWithoutQuestionGivesNone) {
  // The first user block is the only place searched when there is one.
  auto rollout = parse_search_rollout(
    "<|im_start|>user\nNo label here.<|im_end|>\n<|im_start|>assistant\nQuestion: later?\n");
  EXPECT_EQ(rollout.question, std::nullopt);
  // Only the first user block counts.
  EXPECT_EQ(parse_search_rollout("<|im_start|>user a<|im_end|><|im_start|>user Question: b"
                                 "<|im_end|>")
              .question,
            std::nullopt);
}

TEST(SearchRollout, WithoutAUserBlockTheFirstQuestionAnywhere) {
  EXPECT_EQ(parse_search_rollout("Instructions.\nQuestion: first one?\nQuestion: second?")
              .question,
            "first one?");
  // Here the question also ends at <|im_end|>.
  EXPECT_EQ(parse_search_rollout("Question: who?<|im_end|> trailing").question, "who?");
  // An opening user tag without a closing one is no user block.
  EXPECT_EQ(parse_search_rollout("<|im_start|>user\nQuestion: open turn?").question,
            "open turn?");
  EXPECT_EQ(parse_search_rollout("nothing to see").question, std::nullopt);
}

// ---- information blocks -------------------------------------------------------------------

TEST(SearchRollout, InformationBlocksDropEmptyAndAnd) {
  auto rollout = parse_search_rollout(
    "<information> and </information><information>\n\n</information><information>AND"
    "</information><information>andrew</information><information> two\nlines </information>"
    "<information>unclosed");
  EXPECT_EQ(rollout.information, (std::vector<std::string>{"andrew", "two\nlines"}));
  EXPECT_EQ(join_information(rollout.information), "andrew\ntwo\nlines");
}

// ---- unicode ------------------------------------------------------------------------------

TEST(SearchRollout, UnicodeTextAndWhitespace) {
  const std::string nbsp = "\xC2\xA0";
  const std::string ideographic_space = "\xE3\x80\x80";
  auto rollout = parse_search_rollout(
    search_prompt("Qui a créé « Zoé Kézako » ?" + nbsp)
    + "<information>" + ideographic_space + "Doc 1 Zoé Kézako est une série — 東京" + nbsp
    + "</information>\n<answer>" + nbsp + "Véronique Saüquère" + ideographic_space
    + "</answer>");
  EXPECT_EQ(rollout.question, "Qui a créé « Zoé Kézako » ?");
  EXPECT_EQ(rollout.information,
            (std::vector<std::string>{"Doc 1 Zoé Kézako est une série — 東京"}));
  EXPECT_EQ(rollout.answer, "Véronique Saüquère");
}

TEST(JoinInformation, JoinsWithNewlines) {
  EXPECT_EQ(join_information({}), "");
  EXPECT_EQ(join_information({"one"}), "one");
  EXPECT_EQ(join_information({"one", "two", "three"}), "one\ntwo\nthree");
}
