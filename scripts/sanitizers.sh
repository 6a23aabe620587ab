#!/usr/bin/env bash
# Sanitizer and fuzz builds (docs/testing.md), with clang:
#   asan  build-asan/: every target with AddressSanitizer + UndefinedBehaviorSanitizer and the
#         libFuzzer targets; runs the whole ctest suite there (unit tests, e2e, Python client)
#   tsan  build-tsan/: scheduler_tests and actors_tests with ThreadSanitizer, and net_tests'
#         scheduler-shard tests (a split request's parts answered on two threads), run
#   fuzz  each libFuzzer target of build-asan/fuzz/ for ARBITER_FUZZ_SECONDS (default 20) from
#         its seed corpus and dictionary (tests/fuzz/)
# With no argument it runs all three, in that order; name stages to run only those. A finding
# of any sanitizer in any process (the tests, the arbiter and fake-provider processes the e2e
# tests start) fails the run: reports are written to build-*/sanitizer-logs/ and printed.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS="${ARBITER_SANITIZER_JOBS:-$(nproc)}"
FUZZ_SECONDS="${ARBITER_FUZZ_SECONDS:-20}"
SUPP="$PWD/tests/sanitizers"
STAGES=("$@")
if [ "${#STAGES[@]}" -eq 0 ]; then STAGES=(asan tsan fuzz); fi
FUZZ_TARGETS=(score_codec trainer_codec openai_codec info_gain_codec remote_codec http_head config
  safetensors tokenizer verl_rules)

stamp() { echo "== $(date +%H:%M:%S) $*"; }

# configure DIR CMAKE_ARGS...: a clang tree at -O1 with line tables (stack traces, quick
# builds); -Werror stays with the gcc build that CI runs first.
configure() {
  local dir="$1"
  shift
  CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DARBITER_WERROR=OFF \
    -DPython3_EXECUTABLE="$(command -v python3)" "$@" > "$dir-configure.log" 2>&1 \
    || { cat "$dir-configure.log"; exit 1; }
  rm -f "$dir-configure.log"
}

# fail_on_reports DIR: prints and fails on every report a sanitizer wrote under DIR.
fail_on_reports() {
  local dir="$1"
  if compgen -G "$dir/*" > /dev/null; then
    echo "sanitizer reports in $dir:"
    for f in "$dir"/*; do
      echo "--- $f"
      cat "$f"
    done
    exit 1
  fi
}

run_asan() {
  stamp "asan: configure and build build-asan/"
  mkdir -p build-asan
  configure build-asan -DARBITER_SANITIZE=address,undefined -DARBITER_FUZZ=ON
  nice -n 5 cmake --build build-asan -j "$JOBS"
  local logs="$PWD/build-asan/sanitizer-logs"
  rm -rf "$logs" && mkdir -p "$logs"
  stamp "asan: ctest (unit tests, e2e, Python client)"
  # Leaks are checked at every exit of every instrumented process; lsan.supp names the
  # third-party frames that are exempt, each with why.
  local status=0
  ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=$logs/asan" \
  LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan" \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS" --timeout 1800 || status=$?
  fail_on_reports "$logs"
  return "$status"
}

run_tsan() {
  stamp "tsan: configure and build scheduler_tests, actors_tests, net_tests in build-tsan/"
  mkdir -p build-tsan
  configure build-tsan -DARBITER_SANITIZE=thread
  nice -n 5 cmake --build build-tsan -j "$JOBS" --target scheduler_tests actors_tests net_tests
  local logs="$PWD/build-tsan/sanitizer-logs"
  rm -rf "$logs" && mkdir -p "$logs"
  local status=0
  for t in scheduler_tests actors_tests; do
    stamp "tsan: $t"
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$SUPP/tsan.supp:log_path=$logs/tsan" \
      "build-tsan/tests/$t" --gtest_brief=1 || status=$?
  done
  stamp "tsan: net_tests (the shards' tests)"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$SUPP/tsan.supp:log_path=$logs/tsan" \
    build-tsan/tests/net_tests --gtest_brief=1 --gtest_filter='PlanShards.*:SplitRequest.*:Merge*' \
    || status=$?
  fail_on_reports "$logs"
  return "$status"
}

run_fuzz() {
  if [ ! -x build-asan/fuzz/score_codec_fuzz ]; then
    configure build-asan -DARBITER_SANITIZE=address,undefined -DARBITER_FUZZ=ON
    nice -n 5 cmake --build build-asan -j "$JOBS" --target "${FUZZ_TARGETS[@]/%/_fuzz}"
  fi
  for t in "${FUZZ_TARGETS[@]}"; do
    stamp "fuzz: $t for ${FUZZ_SECONDS}s"
    # New inputs go to the tree's own corpus; the committed seeds are only read.
    mkdir -p "build-asan/fuzz/corpus/$t" "build-asan/fuzz/crashes"
    ASAN_OPTIONS="detect_leaks=1" \
      "build-asan/fuzz/${t}_fuzz" -max_total_time="$FUZZ_SECONDS" -timeout=10 \
      -dict="tests/fuzz/$t.dict" -artifact_prefix="build-asan/fuzz/crashes/$t-" \
      -print_final_stats=1 "build-asan/fuzz/corpus/$t" "tests/fuzz/corpus/$t" \
      2> "build-asan/fuzz/$t.log" \
      || { tail -60 "build-asan/fuzz/$t.log"; exit 1; }
    grep -E "^stat::number_of_executed_units|^Done" "build-asan/fuzz/$t.log" || true
  done
}

for stage in "${STAGES[@]}"; do
  case "$stage" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    fuzz) run_fuzz ;;
    *) echo "unknown stage '$stage' (asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
done
stamp "sanitizers: done (${STAGES[*]})"
