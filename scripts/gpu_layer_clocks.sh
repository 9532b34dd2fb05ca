#!/usr/bin/env bash
# On the GPU machine, inside a prebuilt snapshot: the layer stack (qwen3.5-27b, 32768 tokens,
# one layer) while nvidia-smi samples the SM clock and power every 20 ms, then the bare wy-tc
# bench at the same size under the same sampling. Question it answers (issue #6): does the
# recurrence stage run at a lower clock inside the layer (after the projection GEMMs) than in
# the bare benchmark? Writes $OUT/clocks.txt (both runs' samples summarised) and the raw logs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.gpu/out}; mkdir -p "$OUT"
G=build-gpu
sample() {  # $1: tag; runs "${@:2}" while sampling
  local tag=$1; shift
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 \
    > "$OUT/clocks_$tag.csv" 2>/dev/null &
  local smi=$!
  sleep 0.3
  "$@" > "$OUT/run_$tag.txt" 2>&1
  sleep 0.2
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  awk -F', ' -v tag="$tag" '$3 > 200 {n++; c += $2; p += $3; if (min == "" || $2 < min) min = $2}
    END {if (n) printf "%-8s %4d busy samples (power > 200 W): SM clock mean %.0f MHz min %d, power mean %.0f W\n", tag, n, c / n, min, p / n}' \
    "$OUT/clocks_$tag.csv"
}
{
  echo "commit $(cat COMMIT 2>/dev/null)  $(date -u +%FT%TZ)"
  sample layer timeout 120 "$G/gdn" prefill --preset qwen3.5-27b --tokens 32768 --layers 1 --iters 5
  grep -E "recurrence|^layer|GEMMs alone|non-GEMM" "$OUT/run_layer.txt"
  sample bare timeout 120 "$G/gdn" bench --arm wy-tc --tokens 32768 --no-check --iters 200
  tail -2 "$OUT/run_bare.txt"
} > "$OUT/clocks.txt" 2>&1
cat "$OUT/clocks.txt"
