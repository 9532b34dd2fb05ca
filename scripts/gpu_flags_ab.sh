#!/usr/bin/env bash
# The flag pipeline's A/B (sessions 28-29; GDN_WYTC_FLAGS=1, paired slices) against the default,
# in a prebuilt snapshot on the GPU machine: every GPU test, then the #5 cases two rounds
# interleaved, one process per case and environment (27b T = 32768 with the fp64 check, the rest
# --no-check), one-slice flags and GDN_WYTC_FLAGS_ORDER=state once, GDN_WYTC_FLAGS_TRACE=1 summaries
# (paired, one slice, state kernel first), the
# flag kernels' fences and atomics in SASS, then memcheck and racecheck on the flag tests.
# Writes $OUT/$RUN.txt (the record's body) and $OUT/$RUN.jsonl (the bench rows).
# HERE: GDN_JOBS=3 bash scripts/gpu_prebuild.sh; cd .gpu/head; rm -f build-gpu/libgdn.a; find
# build-gpu -name gdn_precision_emu -delete. Device call (~7 min on an H100):
# run(command="cd .gpu/head && RUN=r85 OUT=$OUT bash scripts/gpu_flags_ab.sh", carry=[".gpu/head"]).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
R=$OUT/${RUN:-r84}.txt; J=$OUT/${RUN:-r84}.jsonl
G=build-gpu
{
  echo "commit $(cat COMMIT) $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  nvcc --version | tail -1
} > "$R"
t0=$(date +%s)
(OUT=$OUT/t GDN_PREBUILT=1 timeout 170 bash scripts/gpu_run.sh test > "$OUT/gpu_run_test.txt" 2>&1)
echo "gpu_run.sh test rc=$? ($(( $(date +%s) - t0 )) s)" >> "$R"
tail -3 "$OUT/gpu_run_test.txt" >> "$R"
grep -ah "flag pipeline\|FAILED\|Failure" $G/Testing/Temporary/LastTest*.log "$OUT"/t/*.log 2>/dev/null | sort -u | head -30 >> "$R"
run() {  # env ("-" = default), bench args
  local e=$1; shift
  if [[ $e == - ]]; then out=$(timeout 100 $G/gdn bench "$@" --json "$J" 2>&1)
  else out=$(env $e timeout 100 $G/gdn bench "$@" --json "$J" 2>&1); fi
  ms=$(tail -1 "$J" 2>/dev/null | grep -o '"ms":[0-9.]*' | cut -d: -f2)
  echo "[$e] $* :: ${ms:-?} :: $(echo "$out" | grep -iE 'error|rel|o /' | tail -2 | tr '\n' ' ')" >> "$R"
}
F=GDN_WYTC_FLAGS=1
for round in 1 2; do
  for e in - $F; do run $e --arm wy-tc --tokens 32768 $([[ $round == 2 ]] && echo --no-check); done
  for e in - $F; do run $e --arm wy-tc --preset qwen3-next-80b --tokens 32768 --no-check; done
  for e in - $F; do run $e --arm wy-tc --tokens 4096 --no-check; done
  for e in - $F; do run $e --arm wy-tc --tokens 8192 --no-check; done
  for e in - $F; do run $e --arm wy-tc --tokens 16384 --no-check; done
  for e in - $F; do run $e --arm wy-tc --preset qwen3-next-80b --tokens 4096 --no-check; done
  for e in - $F; do run $e --arm wy-tc --preset qwen3-next-80b --tokens 8192 --no-check; done
  for e in - $F; do run $e --arm wy-tc --tokens 131072 --no-check; done
  for e in - $F; do run $e --arm wy-tc --tokens 1024 --no-check; done
  echo "round $round done ($(( $(date +%s) - t0 )) s)" >> "$R"
done
run $F --arm wy-tc --preset qwen3-next-80b --tokens 32768
for e in "$F GDN_WYTC_PAIR=0"; do run "$e" --arm wy-tc --tokens 32768 --no-check; run "$e" --arm wy-tc --preset qwen3-next-80b --tokens 32768 --no-check; done
O="$F GDN_WYTC_FLAGS_ORDER=state"
run "$O" --arm wy-tc --tokens 32768 --no-check; run "$O" --arm wy-tc --preset qwen3-next-80b --tokens 32768 --no-check
run "$O" --arm wy-tc --tokens 4096 --no-check
for c in "--tokens 32768" "--preset qwen3-next-80b --tokens 32768" "--tokens 4096" "--tokens 131072"; do
  for e in "$F" "$F GDN_WYTC_PAIR=0" "$O"; do
    echo "[trace $e] $c: $(env $e GDN_WYTC_FLAGS_TRACE=1 timeout 60 $G/gdn bench --arm wy-tc $c --no-check --iters 3 2>&1 | grep 'flags trace' | tail -1)" >> "$R"
  done
done
cuobjdump -sass $G/gdn 2>/dev/null | awk '/Function :/{f=$0} /MEMBAR|FENCE|CCTL|RED\.|ATOM|STRONG|ERRBAR|NANOSLEEP/{ if (f ~ /wg9.*Lb1ELb1ELi[12]ELb1ELb1E/ || f ~ /chunk_kernel_v7/) { l=$0; gsub(/\/\*[^*]*\*\//, "", l); gsub(/ +/, " ", l); print f " :: " l } }' | sort | uniq -c | head -80 > "$OUT/sass_fences.txt"
echo "sass: $(wc -l < "$OUT/sass_fences.txt") lines" >> "$R"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  timeout 120 "$cs" --tool $tool --error-exitcode 99 $G/tests/gdn_tests_gpu \
    --gtest_filter='WyTcState.FlagPipeline*:ArmCaptureWyTc.FlagPipeline*' > "$OUT/san_$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/san_$tool.txt" | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)" >> "$R"
done
echo "all done ($(( $(date +%s) - t0 )) s)" >> "$R"
cat "$R"
