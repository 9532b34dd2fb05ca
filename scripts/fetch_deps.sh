#!/usr/bin/env bash
# Run HERE (a Debian machine with network) before a GPU run: downloads the header/config
# packages the build needs and extracts them under .deps/root (git-ignored), so that the GPU
# machine — which has no network and none of these packages — configures with
#   cmake -DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr ...
# and the device tool carries `.deps` along. scripts/gpu_run.sh does that configure.
#   libfmt9: fmt's CMake config checks that the shared library it names exists (only the
#            header-only target is linked).  googletest: libgtest-dev's dependency (sources).
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libgtest-dev googletest)
rm -rf .deps
mkdir -p .deps/debs .deps/root
(cd .deps/debs && apt-get download "${PKGS[@]}")
for d in .deps/debs/*.deb; do dpkg -x "$d" .deps/root; done
# What find_package needs, present or the script fails.
for f in usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
         usr/share/cmake/CLI11/CLI11Config.cmake \
         usr/lib/x86_64-linux-gnu/cmake/fmt/fmt-config.cmake \
         usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake \
         usr/lib/x86_64-linux-gnu/libgtest.a usr/include/gtest/gtest.h \
         usr/include/nlohmann/json.hpp usr/include/CLI/CLI.hpp usr/include/fmt/format.h; do
  [[ -e .deps/root/$f ]] || { echo "fetch_deps: missing .deps/root/$f" >&2; exit 1; }
done
rm -rf .deps/root/usr/src  # googletest sources: not needed to build, keeps the carry small
echo "fetch_deps: $(du -sh .deps | cut -f1) in .deps ($(ls .deps/debs | tr '\n' ' '))"
