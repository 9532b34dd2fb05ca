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
  # Why the clock is where it is (a second sampler: an unknown field must not stop the first).
  nvidia-smi --query-gpu=clocks.sm,clocks_event_reasons.active,temperature.gpu --format=csv,noheader,nounits \
    -lms 50 > "$OUT/reasons_$tag.csv" 2>&1 &
  local smi2=$!
  sleep 0.3
  "$@" > "$OUT/run_$tag.txt" 2>&1
  sleep 0.2
  kill "$smi" "$smi2" 2>/dev/null; wait "$smi" "$smi2" 2>/dev/null
  # clocks_event_reasons.active bit mask (nvidia-smi -q names): 0x1 idle, 0x2 application clocks
  # setting, 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power
  # brake. Printed: samples and mean SM clock per mask, and the temperature range of the run.
  echo "$tag clock-event reasons (mask: samples, SM clock mean; temperature range):"
  awk -F', ' 'NF >= 3 && $1 ~ /^[0-9]+$/ {n[$2]++; c[$2] += $1; if (tmin == "" || $3 < tmin) tmin = $3; if ($3 > tmax) tmax = $3}
    END {for (m in n) printf "  %s: %d, %.0f MHz\n", m, n[m], c[m] / n[m]; printf "  temperature %s-%s C\n", tmin, tmax}' \
    "$OUT/reasons_$tag.csv"
  head -c 300 "$OUT/reasons_$tag.csv" | grep -iv "^[0-9]" | head -2  # nvidia-smi's error, if any
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
