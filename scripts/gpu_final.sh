#!/usr/bin/env bash
# On the GPU machine, inside a prebuilt snapshot (scripts/gpu_prebuild.sh), in priority order so
# that a call cut short still returns the most important records: every GPU test; the benchmark
# cases; the sanitizers; the layer stack; the PyTorch extension (built from source there, or
# linking the prebuilt libgdn.a with GDN_PY_HYBRID=1) and its tests. Returns at most 8 files in $OUT: summary.txt,
# results.jsonl, pytest.txt, layer.txt, logs.tgz (+ compare.* when GDN_COMPARE=1).
set -uo pipefail
cd "$(dirname "$0")/.."
export GDN_COMMIT=$(cat COMMIT) GDN_PREBUILT=1
ln -sfn ../../.deps .deps 2>/dev/null; ln -sfn ../../.whl .whl 2>/dev/null
L=$OUT/logs; mkdir -p "$L"
pack() { tar -czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null; }
run_stage() { OUT=$L GDN_CTEST_JOBS=${GDN_CTEST_JOBS:-12} bash scripts/gpu_run.sh "$@" >> "$L/gpu_run.log" 2>&1
              cp "$L/summary.txt" "$OUT/summary.txt" 2>/dev/null; cp "$L/results.jsonl" "$OUT/" 2>/dev/null
              pack; }
run_stage test
if [[ ${GDN_PROFILE:-0} == 1 ]]; then
  mkdir -p "$L/profile"; OUT=$L/profile timeout 400 bash scripts/gpu_profile.sh > "$L/profile.log" 2>&1; pack
fi
if [[ -x scripts/gpu_decode_sweep.sh && ${GDN_DECODE_SWEEP:-1} == 1 ]]; then
  OUT=$L timeout 90 bash scripts/gpu_decode_sweep.sh > "$L/decode_sweep.log" 2>&1
  cp "$L/decode_sweep.jsonl" "$OUT/" 2>/dev/null; pack
fi
GDN_BENCH_CASES=${GDN_BENCH_CASES:-"--arm wy-tc --tokens 32768;--arm wy-tc --tokens 131072 --no-check;--arm wy-tc --tokens 4096 --no-check;--arm wy-tc --tokens 32768 --seqs 8 --no-check;--arm wy-tc --preset qwen3-next-80b --tokens 32768 --no-check;--arm wy-fp32 --tokens 32768;--decode --seqs 256;--decode --seqs 1;--decode --seqs 64 --verify-tokens 4"} \
  run_stage bench
GDN_SANITIZE_FILTER=${GDN_SANITIZE_FILTER:-'DecodeGpu.N5*:DecodeGpu.VerifyT4*:wy_tc/WyTcFixture.*T65*:Fixtures/WyFp32Parity.*T65*:WyFp32.VariantsEqualV3_L129*:WyTcState.WgmmaMatches*:WyTcState.V9EqualsV6*:WyTcState.OverlappedSegments*:WyTcState.VarlenGroups*:WyTcState.PairedSlices*:WyTcState.FlagPipeline*:WyTcState.UnalignedOutput*:wy_tc.ChunkV7PassesOracleAndRepeats*:wy_tc.Varlen*:CpGpuWyTc*'} run_stage sanitize
timeout 60 build-gpu/gdn prefill --preset qwen3.5-27b --tokens 32768 --layers 1 --iters 5 \
  --json "$OUT/results.jsonl" > "$OUT/layer.txt" 2>&1
# The extension is built the way users build it (every source compiled there by one toolchain)
# unless GDN_PY_HYBRID=1 links the libgdn.a prebuilt here (faster, but a second compiler and C++
# runtime in one binary: the native Layer error path crashed that way at 288b22a).
PY_LIB=""; [[ ${GDN_PY_HYBRID:-0} == 1 ]] && PY_LIB=$PWD/build-gpu/libgdn.a
OUT=$L GDN_PY_PREBUILT=0 GDN_LIBGDN=$PY_LIB \
  GDN_CUDA_ARCH_FLAGS="-gencode=arch=compute_90a,code=sm_90a" GDN_SKIP_COMPARE=$((1 - ${GDN_COMPARE:-0})) \
  timeout "${GDN_PY_TIMEOUT:-150}" bash scripts/gpu_python.sh > "$L/python_run.log" 2>&1
{ tail -25 "$L/pytest.log"; echo "== test_layer.py"; tail -25 "$L/pytest_layer.log"; } > "$OUT/pytest.txt" 2>/dev/null
[[ ${GDN_LAYER_CRASH:-0} == 1 ]] && OUT=$L timeout 200 bash scripts/gpu_layer_crash.sh
pack
for f in compare.jsonl compare.png; do [[ -f $L/$f ]] && mv "$L/$f" "$OUT/"; done
if [[ ${GDN_TUNE:-0} == 1 ]]; then
  timeout 100 build-gpu/gdn tune --max-len 32768 --max-tokens 65536 --budget-ms 50 --out "$L/tune.json" > "$L/tune.txt" 2>&1
  cp "$L/tune.txt" "$OUT/" 2>/dev/null; pack
fi
cat "$OUT/summary.txt"; cat "$OUT/pytest.txt"; grep -vE "\[#" "$OUT/layer.txt" | tail -14
