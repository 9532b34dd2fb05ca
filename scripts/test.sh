#!/usr/bin/env bash
# Builds gdn and runs every test with CTest (the README's test command; .ci/run calls it).
# Installs missing Debian packages first (as root). GPU tests (label `gpu`) skip with code 77
# where there is no GPU. Env: GDN_BUILD_DIR (default build), GDN_JOBS (default nproc),
# GDN_CMAKE_ARGS (extra configure flags, e.g. -DGDN_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
BUILD=${GDN_BUILD_DIR:-build}
JOBS=${GDN_JOBS:-$(nproc)}
cd "$BUILD"
ctest --output-on-failure -j "$JOBS"
