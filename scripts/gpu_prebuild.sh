#!/usr/bin/env bash
# HERE (no GPU needed), before a device-tool run: snapshot the committed HEAD into .gpu/head and
# build it for sm_90a there — libgdn, the CLI and the tests (CTest lists the GPU tests by running
# the binary with --gtest_list_tests, which needs no device) — so the GPU machine spends its time
# running, not compiling. The PyTorch extension is built there (its Python is 3.12) but compiles
# only its binding, linking this libgdn.a (GDN_LIBGDN; gpu_final.sh does it).
# The device copy of the repo lives at the same absolute path, so CTest's paths hold there.
# Object files are deleted afterwards to keep the carried tree small (gpu_run.sh with
# GDN_PREBUILT=1 never rebuilds).
#   then: run(command="cd .gpu/head && bash scripts/gpu_final.sh", carry=[".deps", ".gpu/head", ".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh  # a fresh machine lacks the Debian packages the configure step needs
scripts/gpu_snapshot.sh
cd .gpu/head
ln -sfn ../../.deps .deps
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGDN_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" > prebuild.log
cmake --build build-gpu -j "${GDN_JOBS:-2}" >> prebuild.log
# Keep the carry small (the device tool takes 64 MiB): no objects, no compiler-id scratch, no CPU
# test binaries (the GPU machine runs only `ctest -L gpu`).
find build-gpu -name '*.o' -delete
rm -rf build-gpu/CMakeFiles/3.*/CompilerId* build-gpu/CMakeFiles/CheckCUDA \
  build-gpu/tests/gdn_tests_cpu build-gpu/tests/gdn_capi_c
echo "prebuilt $(cat COMMIT) in .gpu/head ($(du -sh . | cut -f1))"
