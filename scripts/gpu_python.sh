#!/usr/bin/env bash
# On the GPU machine (no network): install the carried peer wheels, build gdn_torch against the
# machine's torch, run its tests, then the side-by-side comparison. Logs and records go to $OUT
# (default ./out-python).
#
# Device-tool call (from the repo root here; .whl holds the peer wheels, see python/README.md):
#   run(command="bash scripts/gpu_python.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-python}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $*" | tee -a "$OUT/python.log"; }

log "python $(python3 --version 2>&1), torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')"
if ls .whl/*.whl >/dev/null 2>&1; then
  log "installing carried wheels: $(ls .whl | tr '\n' ' ')"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | tee -a "$OUT/python.log"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  log "no .whl/ carried: peers that are not installed will be recorded as not run"
fi

if [[ ${GDN_PY_PREBUILT:-0} == 1 ]]; then
  # Built elsewhere from the same snapshot (scripts/gpu_prebuild.sh: setup.py build_ext --inplace
  # against the same torch version); import it from the source tree.
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
  log "using the prebuilt extension: $(ls python/gdn_torch/_C*.so)"
else
# Build in place (pip builds a local directory in place; ../src is compiled from where it is).
log "building gdn_torch (MAX_JOBS=${MAX_JOBS:=16}, GDN_CUDA_ARCH_FLAGS=${GDN_CUDA_ARCH_FLAGS:-default sm_90a+sm_80})"
export MAX_JOBS
start=$(date +%s)
if ! python3 -m pip install -v --no-build-isolation --no-deps --no-cache-dir ./python \
    > "$OUT/python_build.log" 2>&1; then
  log "BUILD FAILED (tail of python_build.log):"; tail -40 "$OUT/python_build.log" | tee -a "$OUT/python.log"
  exit 1
fi
log "built in $(( $(date +%s) - start )) s"
grep -E "warning|spill" "$OUT/python_build.log" | grep -v "^\s*$" | head -40 | tee -a "$OUT/python.log"
fi

run_compare() {
  log "bench/compare.py"
  python3 bench/compare.py --json "$OUT/compare.jsonl" --png "$OUT/compare.png" \
    ${COMPARE_ARGS:-} 2>&1 | tee "$OUT/compare.log"
  bench_rc=${PIPESTATUS[0]}
  log "compare exit $bench_rc"
}
bench_rc=0
# GDN_COMPARE_FIRST=1: the side-by-side comparison before the tests (a call that runs out of time
# in pytest still returns it).
[[ ${GDN_COMPARE_FIRST:-0} == 1 && ${GDN_SKIP_COMPARE:-0} != 1 ]] && run_compare

log "pytest python/tests"
# The layer binding's tests run in their own process: a native crash there (128eb09: a segfault
# in test_layer_bad_input) must not hide the results of the others.
( cd python/tests && python3 -m pytest -q -rs --timeout=300 -p no:cacheprovider . \
    --ignore=test_layer.py ) 2>&1 | tee "$OUT/pytest.log" | tail -60
test_rc=${PIPESTATUS[0]}
( cd python/tests && python3 -m pytest -q -rs --timeout=300 -p no:cacheprovider test_layer.py ) \
  2>&1 | tee "$OUT/pytest_layer.log" | tail -30
layer_rc=${PIPESTATUS[0]}
log "pytest (layer) exit $layer_rc"
test_rc=$(( test_rc != 0 || layer_rc != 0 ))
log "pytest exit $test_rc"

if [[ ${GDN_SKIP_COMPARE:-0} == 1 ]]; then
  log "bench/compare.py skipped (GDN_SKIP_COMPARE=1)"
elif [[ ${GDN_COMPARE_FIRST:-0} != 1 ]]; then
  run_compare
fi
exit $(( test_rc != 0 || bench_rc != 0 ))
