#!/usr/bin/env bash
# Builds the `gdn` CLI and runs `gdn bench` (the README's main command). With a GPU it times the
# default arm at T = 32768 (qwen3.5-27b geometry); without one it runs the CPU arm at a size that
# finishes in under a minute on 2 cores, and says so. Arguments go to `gdn bench`
# (e.g. scripts/bench.sh --preset qwen3-next-80b --tokens 8192 --json out.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD=${GDN_BUILD_DIR:-build}
JOBS=${GDN_JOBS:-$(nproc)}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" -G Ninja ${GDN_CMAKE_ARGS:-}
cmake --build "$BUILD" -j "$JOBS" --target gdn_cli
exec "$BUILD/gdn" bench "$@"
