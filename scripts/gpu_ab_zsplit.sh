#!/usr/bin/env bash
# Layer A/B of GDN_LAYER_ZSPLIT (written in session 27, when no GPU was lent; first run pending):
# every GPU test; the layer with GDN_LAYER_ZSPLIT = 0 / 1 / 2 / 3 / 4 interleaved (27b two rounds,
# qwen3-next one); ncu's view of the cuBLAS kernels (grid: persistent or not); the #5 cases once.
# HERE: GDN_JOBS=2 bash scripts/gpu_prebuild.sh; cd .gpu/head; rm -f build-gpu/libgdn.a; find build-gpu
# -name gdn_precision_emu -delete. Device call: run(command="cd .gpu/head && OUT=$OUT bash
# scripts/gpu_ab_zsplit.sh", carry=[".gpu/head"]) (~60 MB; about 5 min of device time).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
R=$OUT/zsplit.txt; J=$OUT/zsplit.jsonl
G=build-gpu
{
  echo "commit $(cat COMMIT) $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  nvcc --version | tail -1
} > "$R"
t0=$(date +%s)
(OUT=$OUT/t GDN_PREBUILT=1 timeout 150 bash scripts/gpu_run.sh test > "$OUT/gpu_run_test.txt" 2>&1)
echo "gpu_run.sh test rc=$? ($(( $(date +%s) - t0 )) s)" >> "$R"
tail -3 "$OUT/gpu_run_test.txt" >> "$R"
grep -ah "zsplit case\|FAILED" $G/Testing/Temporary/LastTest*.log "$OUT"/t/ctest_gpu.log 2>/dev/null | head -20 >> "$R"
lay() {  # zsplit, preset
  out=$(env GDN_LAYER_ZSPLIT=$1 timeout 120 $G/gdn prefill --preset $2 --tokens 32768 --layers 2 --iters 5 --json "$J" 2>&1)
  echo "[ZSPLIT=$1] $2 :: $(echo "$out" | grep -E '^layer |^GEMMs alone|^non-GEMM|^layer beyond|^passes' | tr '\n' '|')" >> "$R"
  [[ $1 == 0 ]] && echo "$out" | grep -E '^(projections|conv|gates|recurrence|norm|out-proj|sum) ' >> "$R"
}
for round in 1 2; do
  for v in 0 1 2 3 4; do lay $v qwen3.5-27b; done
  echo "round $round done ($(( $(date +%s) - t0 )) s)" >> "$R"
done
for v in 0 1 2 3 4; do lay $v qwen3-next-80b; done
echo "layers done ($(( $(date +%s) - t0 )) s)" >> "$R"
# Which kernels cuBLAS runs for the three GEMMs, and their grids (persistent = one block per SM).
GDN_LAYER_ZSPLIT=1 timeout 90 ncu --clock-control none --metrics launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,gpu__time_duration.sum \
  -k regex:'gemm|Gemm|sm90|cutlass|nvjet' -c 8 $G/gdn prefill --preset qwen3.5-27b --tokens 32768 --layers 1 --iters 1 > "$OUT/ncu_gemms.txt" 2>&1
grep -E '^  [a-zA-Z_].*\(|launch__|gpu__time' "$OUT/ncu_gemms.txt" | head -60 >> "$R"
echo "ncu done ($(( $(date +%s) - t0 )) s)" >> "$R"
run() {  # args
  out=$(timeout 120 $G/gdn bench "$@" --json "$J" 2>&1)
  ms=$(tail -1 "$J" 2>/dev/null | grep -o '"ms":[0-9.]*' | cut -d: -f2)
  echo "$* :: ${ms:-?} :: $(echo "$out" | grep -i 'error' | tail -1)" >> "$R"
}
run --arm wy-tc --tokens 32768
for c in "--tokens 4096" "--tokens 32768 --seqs 8" "--preset qwen3-next-80b --tokens 32768" "--tokens 131072"; do
  run --arm wy-tc $c --no-check
done
echo "all done ($(( $(date +%s) - t0 )) s)" >> "$R"
cat "$R"
