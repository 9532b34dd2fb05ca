#!/usr/bin/env bash
# THE GPU script: on a machine with an NVIDIA GPU (no network needed), builds gdn for sm_90a,
# runs the GPU tests (CTest label `gpu`), the compute-sanitizer memcheck/racecheck on a test
# filter, and the benchmark cases, each `gdn bench ... --json results.jsonl` (DESIGN.md §7 lines).
# Stages never abort the later ones; every failure is recorded and the summary table comes last.
#
#   usage: scripts/gpu_run.sh [build] [test] [sanitize] [bench]     (default: all four, in order)
#
# Before a run, HERE (with network):  scripts/fetch_deps.sh   (headers/configs into .deps/)
# Device-tool call from the repo root:
#   run(command="bash scripts/gpu_run.sh", carry=[".deps"], timeout_s=600)
# Stages can be split over calls (the build dir build-gpu is kept between calls), e.g.
#   "bash scripts/gpu_run.sh build test"   then   "bash scripts/gpu_run.sh bench"
#
# Env:
#   OUT                  where logs/results go (the device tool sets it; default .gpu/out)
#   GDN_BENCH_CASES      ';'-separated `gdn bench` argument lists (default: the list below)
#   GDN_SANITIZE_FILTER  gtest filter for the sanitizers (default '*T65*:*ZeroLength*')
#   GDN_JOBS             build jobs (16);   GDN_CTEST_JOBS  parallel GPU test processes (4)
#   GDN_PREBUILT=1       use a carried, already built $GDN_BUILD_DIR as is (no build here)
#   GDN_DEADLINE_S       seconds after start by which the last stage must be done (570): work that
#                        would start later is skipped and recorded, so the summary is never lost
#
# Output files in $OUT (the device tool returns at most 8): env.txt build.log ctest_gpu.log
# sanitize.log bench.log results.jsonl summary.txt. Commit results.jsonl as
# bench/results/<date>-h200.jsonl; its "commit" field is HEAD (with -dirty if the tree was not
# clean at run time).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
OUT=${OUT:-$ROOT/.gpu/out}
mkdir -p "$OUT"
BUILD=${GDN_BUILD_DIR:-build-gpu}
JOBS=${GDN_JOBS:-16}
CTEST_JOBS=${GDN_CTEST_JOBS:-4}
DEADLINE=${GDN_DEADLINE_S:-570}
SANITIZE_FILTER=${GDN_SANITIZE_FILTER:-*T65*:*ZeroLength*}
GENCODE="-gencode=arch=compute_90a,code=sm_90a"
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH

STAGES=("$@")
((${#STAGES[@]})) || STAGES=(build test sanitize bench)
SUMMARY=()
record() { SUMMARY+=("$(printf '%-9s %-7s %s' "$1" "$2" "$3")"); echo "== $1: $2 $3"; }
elapsed() { echo $(($(date +%s) - START)); }
time_left() { echo $((DEADLINE - $(elapsed))); }

# ---- environment and the commit the record will carry
GIT=(git -c safe.directory='*' -c core.fileMode=false)
# The device tool's copy of the repo has a .git without commits: scripts/gpu_snapshot.sh exports
# the committed HEAD into .gpu/head with its sha in COMMIT, and that file wins when present.
if [[ -f COMMIT ]]; then
  SHA=$(cat COMMIT); DIRTY=""
else
  SHA=$("${GIT[@]}" rev-parse HEAD 2>/dev/null || echo unknown)
  DIRTY=$("${GIT[@]}" status --porcelain 2>/dev/null)
fi
[[ -n $DIRTY ]] && SHA="$SHA-dirty"
export GDN_COMMIT=$SHA
{
  echo "date: $(date -u +%FT%TZ)   commit: $SHA   stages: ${STAGES[*]}"
  [[ -n $DIRTY ]] && { echo "uncommitted changes:"; echo "$DIRTY"; }
  nvidia-smi 2>&1
  nvcc --version 2>&1 | tail -2
  cmake --version 2>&1 | head -1
  g++ --version 2>&1 | head -1
  nproc
} > "$OUT/env.txt"
head -1 "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
nvcc --version 2>&1 | tail -1

configure() {
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$ROOT/.deps/root/usr" -DGDN_CUDA_GENCODE="$GENCODE" >> "$OUT/build.log" 2>&1
}
ensure_built() {  # configures if needed, then builds the given targets (no-op when up to date)
  # GDN_PREBUILT=1: $BUILD was built elsewhere from the same snapshot (same absolute path) and
  # carried without its object files; never rebuild it here.
  [[ ${GDN_PREBUILT:-0} == 1 ]] && return 0
  [[ -f $BUILD/CMakeCache.txt ]] || configure
  cmake --build "$BUILD" -j "$JOBS" --target "$@" >> "$OUT/build.log" 2>&1
}

stage_build() {
  local t0 rc
  t0=$(date +%s)
  if [[ ! -d .deps/root/usr ]]; then
    echo "no .deps/root/usr: relying on system packages (run scripts/fetch_deps.sh and carry .deps)" \
      | tee -a "$OUT/build.log"
  fi
  : > "$OUT/build.log"
  configure
  rc=$?
  if ((rc != 0)); then record build FAIL "configure (rc $rc), see build.log"; return; fi
  # -k 0: build everything that can be built, so one broken file does not block the rest.
  cmake --build "$BUILD" -j "$JOBS" -- -k 0 >> "$OUT/build.log" 2>&1
  rc=$?
  local spills warns
  spills=$(grep -c -i "bytes spill" "$OUT/build.log")
  warns=$(grep -c -i "warning" "$OUT/build.log")
  local have=""
  for t in gdn tests/gdn_tests_gpu; do [[ -x $BUILD/$t ]] && have+="$t "; done
  if ((rc == 0)); then
    record build OK "$(($(date +%s) - t0)) s, $warns warning lines, $spills spill lines"
  else
    record build FAIL "rc $rc ($(grep -c 'FAILED:' "$OUT/build.log") targets failed; built: ${have:-nothing}), see build.log"
  fi
}

stage_test() {
  ensure_built gdn_tests_gpu
  if [[ ! -x $BUILD/tests/gdn_tests_gpu ]]; then record test FAIL "gdn_tests_gpu not built"; return; fi
  local left=$(($(time_left) - 10))
  if ((left < 30)); then record test SKIP "out of time ($(elapsed) s elapsed)"; return; fi
  (cd "$BUILD" && timeout "$left" ctest -L gpu --output-on-failure -j "$CTEST_JOBS" --timeout 300) \
    > "$OUT/ctest_gpu.log" 2>&1
  local rc=$? line
  line=$(grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log" | tail -1)
  local skipped
  skipped=$(grep -c "\*\*\*Skipped\|Not Run" "$OUT/ctest_gpu.log")
  local total
  total=$(grep -oE "out of [0-9]+" <<< "$line" | grep -oE "[0-9]+")
  if ((rc == 0)) && [[ -n $total && $skipped -ge $total ]]; then
    record test FAIL "all $total GPU tests skipped (exit 77): no GPU visible to the tests"
  elif ((rc == 0)); then record test OK "${line:-no summary line} ($skipped skipped)"
  elif ((rc == 124)); then record test FAIL "timed out after ${left} s; ${line}"
  else record test FAIL "rc $rc: ${line:-no summary line}, see ctest_gpu.log"; fi
}

stage_sanitize() {
  ensure_built gdn_tests_gpu
  if [[ ! -x $BUILD/tests/gdn_tests_gpu ]]; then record sanitize FAIL "gdn_tests_gpu not built"; return; fi
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [[ ! -x $cs ]]; then record sanitize FAIL "compute-sanitizer not found"; return; fi
  : > "$OUT/sanitize.log"
  for tool in memcheck racecheck; do
    local left=$(($(time_left) - 10))
    if ((left < 30)); then record "$tool" SKIP "out of time ($(elapsed) s elapsed)"; continue; fi
    echo "==== compute-sanitizer --tool $tool, filter '$SANITIZE_FILTER'" >> "$OUT/sanitize.log"
    # No --kernel-name-exclude: with it racecheck stops at an "Internal Sanitizer Error" on the
    # layer tests (r30/r31). Racecheck flags cuBLAS's nvjet splitK GEMM kernel (r28), so the
    # filter keeps layer tests to shapes where cuBLAS does not pick it.
    timeout "$left" "$cs" --tool "$tool" --error-exitcode 99 \
      "$BUILD/tests/gdn_tests_gpu" --gtest_filter="$SANITIZE_FILTER" >> "$OUT/sanitize.log" 2>&1
    local rc=$? passed
    passed=$(grep -E "^\[  PASSED  \] [0-9]+ test" "$OUT/sanitize.log" | tail -1 | grep -oE "[0-9]+" | head -1)
    local summary
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize.log" | tail -1)
    if ((rc == 0)) && [[ ${passed:-0} -gt 0 ]]; then record "$tool" OK "$passed tests; $summary"
    elif ((rc == 0)); then record "$tool" EMPTY "filter '$SANITIZE_FILTER' matched no test"
    elif ((rc == 124)); then record "$tool" FAIL "timed out; $summary"
    else record "$tool" FAIL "rc $rc; $summary, see sanitize.log"; fi
  done
}

default_cases() {
  local arm
  for arm in serial wy-fp32 wy-tc; do
    echo "--arm $arm --preset qwen3.5-27b --tokens 4096"
    echo "--arm $arm --preset qwen3.5-27b --tokens 32768"
    echo "--arm $arm --preset qwen3.5-27b --tokens 32768 --seqs 8"
    echo "--arm $arm --preset qwen3-next-80b --tokens 32768"
    [[ $arm != serial ]] && echo "--arm $arm --preset qwen3.5-27b --tokens 131072"
  done
  echo "--decode --seqs 256"
  echo "--decode --seqs 1"
  echo "--decode --seqs 64 --verify-tokens 4"
}

stage_bench() {
  ensure_built gdn_cli
  if [[ ! -x $BUILD/gdn ]]; then record bench FAIL "gdn CLI not built"; return; fi
  local cases=()
  if [[ -n ${GDN_BENCH_CASES:-} ]]; then
    IFS=';' read -r -a cases <<< "$GDN_BENCH_CASES"
  else
    mapfile -t cases < <(default_cases)
  fi
  local c rc arm skip_arms=" " n_ok=0 n_fail=0 n_skip=0
  for c in "${cases[@]}"; do
    c=$(echo "$c" | xargs)  # trim
    [[ -z $c ]] && continue
    arm=$(sed -nE 's/.*--arm[ =]([^ ]+).*/\1/p' <<< "$c")
    if [[ -n $arm && $skip_arms == *" $arm "* ]]; then
      record bench SKIP "$c (arm $arm unsupported in an earlier case)"; ((n_skip++)); continue
    fi
    local left=$(($(time_left) - 5))
    if ((left < 20)); then record bench SKIP "$c (out of time)"; ((n_skip++)); continue; fi
    echo "==== gdn bench $c" >> "$OUT/bench.log"
    # shellcheck disable=SC2086  # $c is an argument list
    timeout "$((left < 240 ? left : 240))" "$BUILD/gdn" bench $c --json "$OUT/results.jsonl" \
      >> "$OUT/bench.log" 2>&1
    rc=$?
    if ((rc == 0)); then
      # prefill cases print "  ms ...", decode/verify cases "... us/call ..."
      record bench OK "$c: $(grep -E '^  ms |us/call' "$OUT/bench.log" | tail -1 | xargs)"; ((n_ok++))
    elif ((rc == 2)); then
      record bench UNSUPP "$c: $(tail -1 "$OUT/bench.log")"; ((n_fail++))
      [[ -n $arm ]] && skip_arms+="$arm "
    else
      record bench FAIL "$c: rc $rc, $(tail -1 "$OUT/bench.log")"; ((n_fail++))
    fi
  done
  record bench DONE "$n_ok ok, $n_fail failed, $n_skip skipped"
}

for s in "${STAGES[@]}"; do
  case $s in
    build) stage_build ;;
    test) stage_test ;;
    sanitize) stage_sanitize ;;
    bench) stage_bench ;;
    *) record "$s" FAIL "unknown stage (build|test|sanitize|bench)" ;;
  esac
done

{
  echo "gdn gpu_run: commit $SHA, $(elapsed) s, stages: ${STAGES[*]}"
  printf '%s\n' "${SUMMARY[@]}"
  if [[ -s $OUT/results.jsonl ]]; then
    echo
    python3 - "$OUT/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
f = lambda x, p: "-" if x is None else format(x, p)
print(f"{'arm':8} {'preset':16} {'tokens':>7} {'seqs':>4} {'ms':>9} {'TB/s':>6} {'TFLOP/s':>8} "
      f"{'floor ms':>8} {'o_err':>8} {'state_err':>9}")
for r in rows:
    print(f"{r['arm']:8} {r['preset']:16} {r['tokens']:>7} {r['seqs']:>4} {f(r['ms'], '9.4f')} "
          f"{f(r.get('tbps'), '6.2f')} {f(r.get('tflops'), '8.1f')} {f(r.get('floor_ms'), '8.4f')} "
          f"{f(r['o_err'], '8.2e')} {f(r['state_err'], '9.2e')}")
PY
  fi
} > "$OUT/summary.txt" 2>&1
echo
cat "$OUT/summary.txt"
