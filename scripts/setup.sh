#!/usr/bin/env bash
# Installs everything Arbiter needs on a fresh Debian 12 machine and builds it into build/.
# Safe to run again: apt and pip skip what is there, CMake rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

DEBIAN_PACKAGES=(
  build-essential cmake pkg-config git python3 python3-pip
  libcaf-dev                 # actors (CAF 0.17.6, with its OpenSSL module for the cluster)
  libboost-dev               # Beast and Asio (header-only)
  libssl-dev                 # TLS for remote backends
  libsimdjson-dev            # JSON in
  nlohmann-json3-dev         # JSON out (/info)
  prometheus-cpp-dev         # metrics
  libtomlplusplus-dev        # configuration files
  libcli11-dev               # command line
  libutf8proc-dev            # Unicode for the CPU rewards
  libpcre2-dev               # regular expressions of verl's rule rewards (PCRE2)
  libsentencepiece-dev       # DeBERTa's spm.model tokenizer (native NLI models)
  libjemalloc-dev            # the server's allocator (exe/CMakeLists.txt)
  libgtest-dev libgmock-dev  # unit tests
  openssl iproute2           # cluster tests: certificates, network namespaces
  clang libclang-rt-14-dev   # sanitizer and libFuzzer builds (scripts/sanitizers.sh)
  llvm                       # llvm-symbolizer: sanitizer reports with file and line
)
# libtorch is not a Debian package here: the native models build against the one inside the
# PyTorch 2.x wheel of requirements-dev.txt (CPU and CUDA in one build; CMakeLists.txt finds
# it through python3), which the golden tests need anyway.

echo "== installing Debian packages (${#DEBIAN_PACKAGES[@]})"
missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
else
  echo "   all present"
fi

echo "== installing Python test dependencies (requirements-dev.txt) and clients/python"
PYTHON="$(command -v python3)"
# pip skips what is already installed. Debian's Python refuses system-wide installs without
# --break-system-packages (PEP 668), so each step falls back to it.
pip_install() {
  "$PYTHON" -m pip install --quiet "$@" \
    || "$PYTHON" -m pip install --quiet --break-system-packages "$@"
}
pip_install -r requirements-dev.txt
pip_install ./clients/python

echo "== configuring and building (build/, $(nproc) jobs)"
cmake -S . -B build -DCMAKE_BUILD_TYPE="${ARBITER_BUILD_TYPE:-RelWithDebInfo}" \
  -DPython3_EXECUTABLE="$PYTHON" > build-configure.log 2>&1 \
  || { cat build-configure.log; exit 1; }
rm -f build-configure.log
cmake --build build -j "$(nproc)"
echo "== done: build/arbiter"
