#!/usr/bin/env bash
# On the GPU machine, inside a prebuilt snapshot (scripts/gpu_prebuild.sh): every GPU test, the
# sanitizers, the benchmark cases, the layer stack, and the Python tests and peer comparison.
# Returns at most 8 files in $OUT: summary.txt, results.jsonl, compare.jsonl, compare.png,
# layer.txt and logs.tgz (every log).
set -uo pipefail
cd "$(dirname "$0")/.."
export GDN_COMMIT=$(cat COMMIT) GDN_PREBUILT=1
ln -sfn ../../.deps .deps 2>/dev/null; ln -sfn ../../.whl .whl 2>/dev/null
L=$OUT/logs; mkdir -p "$L"
OUT=$L GDN_DEADLINE_S=${GDN_DEADLINE_S:-330} bash scripts/gpu_run.sh test sanitize bench > "$L/gpu_run.log" 2>&1
cp "$L/summary.txt" "$OUT/summary.txt"; [[ -f $L/results.jsonl ]] && mv "$L/results.jsonl" "$OUT/"
timeout 90 build-gpu/gdn prefill --preset qwen3.5-27b --tokens 32768 --layers 2 \
  --json "$OUT/results.jsonl" > "$OUT/layer.txt" 2>&1
OUT=$L GDN_PY_PREBUILT=1 COMPARE_ARGS=${COMPARE_ARGS:-} timeout "${GDN_PY_TIMEOUT:-200}" \
  bash scripts/gpu_python.sh > "$L/python_run.log" 2>&1
for f in compare.jsonl compare.png; do [[ -f $L/$f ]] && mv "$L/$f" "$OUT/"; done
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
cat "$OUT/summary.txt"; grep -vE "\[#" "$OUT/layer.txt" | tail -14
