#!/usr/bin/env bash
# HERE (no GPU needed), before a device-tool run: snapshot the committed HEAD into .gpu/head and
# build it for sm_90a there — the CMake tree (libgdn, CLI, tests; CTest lists the GPU tests by
# running the binary with --gtest_list_tests, which needs no device) and the PyTorch extension
# linked against that libgdn.a — so the GPU machine spends its time running, not compiling.
# The device copy of the repo lives at the same absolute path, so CTest's paths hold there.
# Object files are deleted afterwards to keep the carried tree small (gpu_run.sh with
# GDN_PREBUILT=1 never rebuilds). PYTHON must have the same torch as the GPU machine (2.11+cu130).
#   then: run(command="cd .gpu/head && bash scripts/gpu_final.sh", carry=[".deps", ".gpu/head", ".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
scripts/gpu_snapshot.sh
cd .gpu/head
ln -sfn ../../.deps .deps
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGDN_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" > prebuild.log
cmake --build build-gpu -j "${GDN_JOBS:-2}" >> prebuild.log
(cd python && GDN_LIBGDN="$PWD/../build-gpu/libgdn.a" \
   GDN_CUDA_ARCH_FLAGS="-gencode=arch=compute_90a,code=sm_90a" \
   "$PYTHON" setup.py build_ext --inplace >> ../prebuild.log 2>&1)
find build-gpu python/build -name '*.o' -delete 2>/dev/null || true
echo "prebuilt $(cat COMMIT) in .gpu/head ($(du -sh . | cut -f1))"
