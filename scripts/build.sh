#!/usr/bin/env bash
# Installs what is missing, configures and builds gdn (the targets given, default all). Shared by
# the README's two commands (scripts/bench.sh, scripts/test.sh). Env: GDN_BUILD_DIR (default
# build), GDN_JOBS (default nproc), GDN_CMAKE_ARGS (extra configure flags, e.g. -DGDN_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD=${GDN_BUILD_DIR:-build}
# shellcheck disable=SC2086  # GDN_CMAKE_ARGS is a list of flags
cmake -S . -B "$BUILD" -G Ninja ${GDN_CMAKE_ARGS:-}
if (($#)); then
  cmake --build "$BUILD" -j "${GDN_JOBS:-$(nproc)}" --target "$@"
else
  cmake --build "$BUILD" -j "${GDN_JOBS:-$(nproc)}"
fi
