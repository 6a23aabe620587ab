// libFuzzer target: verl's rule rewards (backends/cpu/verl_rules.hpp) on any model output and
// ground truth, as /v1/score hands them over (valid UTF-8: the ingress refuses the rest).
//
// Input: byte 0 picks the function and its options; the rest is solution_str, then a NUL,
// then the ground truth (one reference; a second NUL starts another).
//
// Invariants: nothing throws but PCRE2's match limit (std::runtime_error); each score is one
// of the values its function can return; math_dapo's pred is valid UTF-8 (it is written into
// JSON); Python-slicing helpers return a suffix of at most n code points.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <utf8proc.h>

#include "backends/cpu/python_str.hpp"
#include "backends/cpu/verl_rules.hpp"

namespace verl = arbiter::backends::cpu::verl;
namespace py = arbiter::backends::cpu::py;

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

bool valid_utf8(std::string_view s) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    utf8proc_int32_t c = 0;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos),
                              static_cast<utf8proc_ssize_t>(s.size() - pos), &c);
    if (n <= 0) {
      return false;
    }
    pos += static_cast<std::size_t>(n);
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) {
    return 0;
  }
  const uint8_t pick = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!valid_utf8(rest)) {
    return 0;
  }
  auto cut = rest.find('\0');
  std::string_view solution = rest.substr(0, cut);
  std::vector<std::string> truths;
  if (cut != std::string_view::npos) {
    for (auto part : py::split(rest.substr(cut + 1), std::string_view("\0", 1))) {
      truths.emplace_back(part);
    }
  } else {
    truths.emplace_back();
  }

  auto tail = py::last(solution, pick % 7);
  check(solution.substr(solution.size() - tail.size()) == tail, "py::last is a suffix");
  check(py::len(tail) <= pick % 7u, "py::last keeps at most n code points");
  check(py::strip(solution).size() <= solution.size(), "strip shortens");

  try {
    switch (pick % 4) {
      case 0: {
        verl::gsm8k_options o{(pick & 4) != 0, 0.25, 2.0};
        double s = verl::gsm8k(solution, truths, o);
        check(s == 0.0 || s == 0.25 || s == 2.0, "gsm8k score");
        break;
      }
      case 1: {
        double s = verl::math(solution, truths);
        check(s == 0.0 || s == 1.0, "math score");
        (void)verl::math_strip_string(solution);
        break;
      }
      case 2: {
        auto r = verl::math_dapo(solution, truths, (pick & 4) != 0);
        check(r.score == (r.acc ? 1.0 : -1.0), "math_dapo score follows acc");
        check(!r.pred || valid_utf8(*r.pred), "math_dapo pred is UTF-8");
        check(valid_utf8(verl::normalize_final_answer(solution)), "normalized is UTF-8");
        break;
      }
      default: {
        verl::search_r1_options o{0.5, 2.0};
        double s = verl::search_r1_qa_em(solution, truths, o);
        // 0 (no answer), format_score, score, or score / 4 (which is 0.5 too here)
        check(s == 0.0 || s == 0.5 || s == 2.0, "search_r1 score");
        break;
      }
    }
  } catch (const std::runtime_error&) {
    // PCRE2's match limit: the item fails with the reason, as in cpu::evaluate.
  }
  return 0;
}
