#!/usr/bin/env bash
# On the GPU machine, inside a prebuilt snapshot (scripts/gpu_prebuild.sh): a focused run for
# kernel work, shorter than gpu_final.sh. Runs the GPU tests matching GDN_AB_FILTER, then every
# `gdn bench` case of GDN_AB_CASES under every environment of GDN_AB_ENVS (A/B of run-time kernel
# variants in one process image), then optional ncu profiles (GDN_PROFILE_CASES, gpu_profile.sh).
#   GDN_AB_FILTER  gtest filter            (default '*wy_tc*:*WyTc*')
#   GDN_AB_CASES   ';'-separated bench argument lists
#   GDN_AB_ENVS    ';'-separated "VAR=value ..." sets; '-' is the default environment
# Writes to $OUT: ab.txt (test tail, one line per bench case and environment), results.jsonl,
# logs.tgz (gtest log, ncu reports as text and SASS csv).
set -uo pipefail
cd "$(dirname "$0")/.."
export GDN_COMMIT=$(cat COMMIT 2>/dev/null || echo unknown)
OUT=${OUT:-$PWD/.gpu/out}; mkdir -p "$OUT/logs"
G=build-gpu
FILTER=${GDN_AB_FILTER:-'*wy_tc*:*WyTc*'}
CASES=${GDN_AB_CASES:-"--arm wy-tc --tokens 32768;--arm wy-tc --tokens 4096 --no-check;--arm wy-tc --tokens 32768 --seqs 8 --no-check;--arm wy-tc --preset qwen3-next-80b --tokens 32768 --no-check"}
ENVS=${GDN_AB_ENVS:-"-"}
{
  echo "commit $GDN_COMMIT  $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
} > "$OUT/ab.txt"
if [[ -n $FILTER ]]; then
  timeout 300 "$G/tests/gdn_tests_gpu" --gtest_filter="$FILTER" > "$OUT/logs/gtest.txt" 2>&1
  echo "gtest rc=$? filter=$FILTER" >> "$OUT/ab.txt"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|wy-tc v6|Failure|Expected|Which is|actual" \
    "$OUT/logs/gtest.txt" | head -60 >> "$OUT/ab.txt"
fi
IFS=';' read -ra CL <<< "$CASES"
IFS=';' read -ra EL <<< "$ENVS"
for e in "${EL[@]}"; do
  for c in "${CL[@]}"; do
    # shellcheck disable=SC2086
    if [[ $e == - ]]; then out=$(timeout 120 "$G/gdn" bench $c --json "$OUT/results.jsonl" 2>&1)
    else out=$(env $e timeout 120 "$G/gdn" bench $c --json "$OUT/results.jsonl" 2>&1); fi
    ms=$(tail -1 "$OUT/results.jsonl" 2>/dev/null | grep -o '"ms":[0-9.]*' | cut -d: -f2)
    echo "[$e] $c :: ${ms:-?} ms :: $(echo "$out" | tail -2 | tr "\n" " ")" >> "$OUT/ab.txt"
  done
done
if [[ -n ${GDN_PROFILE_CASES:-} ]]; then
  mkdir -p "$OUT/logs/profile"
  OUT=$OUT/logs/profile timeout 300 bash scripts/gpu_profile.sh > "$OUT/logs/profile.log" 2>&1
  grep -E "^== |Duration|Registers Per|Achieved Occupancy|Throughput|Executed Ipc A|Executed Instructions  " \
    "$OUT/logs/profile.log" >> "$OUT/ab.txt"
fi
# Everything else travels in logs.tgz (the device tool returns at most 8 files).
tar -czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null && rm -rf "$OUT/logs"
cat "$OUT/ab.txt"
