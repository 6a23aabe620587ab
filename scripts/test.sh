#!/usr/bin/env bash
# Runs the whole test suite (unit tests and end-to-end tests) from build/.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
