#!/usr/bin/env bash
# On the GPU machine, inside a prebuilt snapshot (scripts/gpu_prebuild.sh): Nsight Compute
# profiles of the shipped kernels (full section set, one launch each) at T = 8192, qwen3.5-27b,
# plus per-SASS-instruction stall samples as CSV, and the decode kernel at N = 256. Writes into
# ${OUT}: ncu_<name>.txt (details page) and ncu_<name>_sass.csv (source page, SASS).
#   GDN_PROFILE_CASES  ';'-separated "name|kernel-regex|launches|gdn bench args[|VAR=value ...]"
#                      (default below; the optional fifth field is an environment for that case)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.gpu/out}; mkdir -p "$OUT"
GDN=${GDN_BIN:-build-gpu/gdn}
CASES=${GDN_PROFILE_CASES:-"wytc|regex:wy_tc_|2|--arm wy-tc --tokens 8192;wyfp32|regex:wy_|2|--arm wy-fp32 --tokens 8192;decode|regex:decode|1|--decode --seqs 256"}
IFS=';' read -ra LIST <<< "$CASES"
for c in "${LIST[@]}"; do
  IFS='|' read -r name kern count args envs <<< "$c"
  echo "== ncu $name: $kern x$count: ${envs:+$envs }gdn bench $args"
  # shellcheck disable=SC2086
  env ${envs:-} timeout 150 ncu --clock-control none --set full --import-source no -k "$kern" -c "$count" \
    -f -o "$OUT/ncu_$name" "$GDN" bench $args --iters 1 --warmup 0 --no-check \
    > "$OUT/ncu_${name}_run.txt" 2>&1 || echo "ncu $name failed ($?)"
  ncu -i "$OUT/ncu_$name.ncu-rep" --page details > "$OUT/ncu_$name.txt" 2>&1
  ncu -i "$OUT/ncu_$name.ncu-rep" --page source --print-source sass --csv \
    > "$OUT/ncu_${name}_sass.csv" 2>&1 || echo "source page $name failed"
  rm -f "$OUT/ncu_$name.ncu-rep"
  grep -E "Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|DRAM Throughput|Executed Ipc A|Executed Instructions  " \
    "$OUT/ncu_$name.txt" | head -28
done
