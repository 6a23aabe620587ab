// libFuzzer target: the tokenizers (backends/tokenizers/tokenizer.hpp). Two modes:
//
// - Selector byte < 0xF0: one operation on the rest of the input (any bytes: the tokenizer
//   must not trust its input to be valid UTF-8) with one of the committed tokenizer.json
//   fixtures (WordPiece: all-MiniLM-L6-v2's and a tiny one; byte-level BPE: GPT-2-, Llama-3-
//   and BERT-style tiny ones). The selector picks the fixture (selector % 5), the operation
//   ((selector / 5) % 4: encode, encode cut to a length, encode as a pair split at the middle,
//   encode_plain) and the length. One operation per execution keeps each one cheap, so the
//   fuzzer runs several times faster than when every input went through all four.
// - Selector byte >= 0xF0: load the rest as a tokenizer.json (`from_json`), and if it loads,
//   encode a fixed text with it.
//
// Invariants: loading and encoding either succeed or throw a std::exception; an encoding's
// ids, type ids and mask have one length, the mask is all ones, every id is one the tokenizer
// knows (`decode` of them does not fail), and a max_length is kept.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "backends/tokenizers/tokenizer.hpp"

using arbiter::backends::tokenizers::encoding;
using arbiter::backends::tokenizers::tokenizer;

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

std::vector<tokenizer> load_fixtures() {
  std::vector<tokenizer> out;
  for (const char* name : {"minilm", "tiny_wordpiece", "tiny_bpe_gpt2", "tiny_bpe_llama3",
                           "tiny_bpe_bert"}) {
    out.push_back(tokenizer::from_file(std::string{ARBITER_SOURCE_DIR}
                                       + "/tests/backends/tokenizers/fixtures/" + name
                                       + "/tokenizer.json"));
  }
  return out;
}

void check_encoding(const tokenizer& tok, const encoding& e, size_t max_length) {
  check(e.ids.size() == e.type_ids.size() && e.ids.size() == e.attention_mask.size(),
        "ids, type ids and mask differ in length");
  for (const auto m : e.attention_mask) {
    check(m == 1, "a mask entry that is not 1");
  }
  if (max_length > 0) {
    check(e.ids.size() <= max_length, "an encoding longer than max_length");
  }
  for (const auto id : e.ids) {
    check(id >= 0, "a negative id");
  }
  (void)tok.decode(e.ids, false);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<tokenizer> fixtures = load_fixtures();
  if (size < 1) {
    return 0;
  }
  const uint8_t selector = data[0];
  const std::string_view rest{reinterpret_cast<const char*>(data + 1), size - 1};
  if (selector >= 0xF0) {
    try {
      const auto tok = tokenizer::from_json(rest, "fuzz/tokenizer.json");
      const auto e = tok.encode("Hello world, it's 2 + 2 = 4!");
      check_encoding(tok, e, 0);
    } catch (const std::exception&) {
    }
    return 0;
  }
  const auto& tok = fixtures[selector % fixtures.size()];
  const unsigned operation = (selector / fixtures.size()) % 4;
  const size_t max_length = 4 + (selector / (fixtures.size() * 4)) % 29;
  try {
    switch (operation) {
      case 0:
        check_encoding(tok, tok.encode(rest), 0);
        break;
      case 1:
        check_encoding(tok, tok.encode(rest, max_length), max_length);
        break;
      case 2: {
        const auto cut = rest.size() / 2;
        const size_t pair_max = selector % 3 == 0 ? 0 : max_length;  // 0: no cut
        check_encoding(tok, tok.encode_pair(rest.substr(0, cut), rest.substr(cut), pair_max),
                       pair_max);
        break;
      }
      default:
        (void)tok.encode_plain(rest);
        break;
    }
  } catch (const std::exception&) {
    // Said, not a crash: a max_length below the special tokens' count, or bytes that are
    // not UTF-8 (the ingress refuses those before a tokenizer sees them).
  }
  return 0;
}
