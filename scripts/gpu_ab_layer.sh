#!/usr/bin/env bash
# On the GPU machine, inside a prebuilt snapshot, after gpu_final.sh: A/B runs of run-time kernel
# variants of the layer (conv, norm) and of the wy-tc overlap, each with the committed binary.
#   1. the layer (qwen3.5-27b, 32768 tokens, 1 layer) under each env set of GDN_LAYER_ENVS
#   2. ncu (--section SpeedOfLight + Occupancy) of the kernels matching GDN_LAYER_NCU_KERNELS
#      (default the conv and norm kernels) at T = 8192 under each env set of GDN_LAYER_NCU_ENVS
#      (default v3, then v2)
#   3. gpu_ab.sh bench cases under GDN_AB_ENVS (default: the wy-tc overlap on qwen3.5-27b)
#   4. gpu_layer_clocks.sh
# Writes $OUT/ab_layer.txt (+ gpu_ab.sh's ab.txt and results.jsonl, clocks.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.gpu/out}; mkdir -p "$OUT"
G=build-gpu
R=$OUT/ab_layer.txt
echo "commit $(cat COMMIT 2>/dev/null)  $(date -u +%FT%TZ)" > "$R"
IFS=';' read -ra EL <<< "${GDN_LAYER_ENVS:-"-;GDN_LAYER_CONV=v2 GDN_LAYER_NORM=v2;-;GDN_LAYER_CONV=v2 GDN_LAYER_NORM=v2"}"
for e in "${EL[@]}"; do
  [[ $e == - ]] && e=GDN_NOTHING=1
  echo "== layer [$e]" >> "$R"
  env $e timeout 90 "$G/gdn" prefill --preset qwen3.5-27b --tokens 32768 --layers 1 --iters 3 2>&1 \
    | grep -E "^(projections|conv|norm|recurrence|gates|out-proj|sum) |^layer|GEMMs alone|non-GEMM" >> "$R"
done
if command -v ncu > /dev/null; then
  KN=${GDN_LAYER_NCU_KERNELS:-"conv_silu|gated_norm"}
  IFS=';' read -ra NL <<< "${GDN_LAYER_NCU_ENVS:-"GDN_NOTHING=1;GDN_LAYER_CONV=v2 GDN_LAYER_NORM=v2"}"
  for e in "${NL[@]}"; do
    echo "== ncu T = 8192 [$e]" >> "$R"
    env $e timeout 120 ncu --kernel-name regex:"$KN" --section SpeedOfLight --section Occupancy \
      --section LaunchStats -c 4 "$G/gdn" prefill --preset qwen3.5-27b --tokens 8192 --layers 1 \
      --iters 1 2>&1 | grep -E "$KN|Duration|DRAM Throughput|Registers|Achieved Occ|Compute \(SM\)|SM Frequency" >> "$R"
  done
fi
GDN_AB_FILTER="" GDN_AB_CASES=${GDN_AB_CASES:-"--arm wy-tc --tokens 32768 --no-check;--arm wy-tc --tokens 131072 --no-check;--arm wy-tc --tokens 16384 --no-check"} \
  GDN_AB_ENVS=${GDN_AB_ENVS:-"-;GDN_WYTC_OVERLAP=all;GDN_WYTC_OVERLAP=all GDN_WYTC_SEGS=16;GDN_WYTC_OVERLAP=all GDN_WYTC_SEGS=32;-"} \
  bash scripts/gpu_ab.sh > /dev/null 2>&1
bash scripts/gpu_layer_clocks.sh > /dev/null 2>&1
cat "$R" "$OUT/ab.txt" "$OUT/clocks.txt" 2>/dev/null
