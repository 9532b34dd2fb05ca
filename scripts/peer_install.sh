#!/usr/bin/env bash
# Run THERE (the GPU machine, no network), from the repo root, once the parts that
# scripts/peer_wheels.sh laid out in .peer/p1, .peer/p2, ... have been carried in (one device call
# each). Checks the parts against .peer/*/MANIFEST.tsv (a clear list of what is missing), rejoins
# split wheels, verifies every sha256, and installs with pip --no-index --no-deps into DIR (default
# /tmp/site-peers). A group (FlashQLA; FlashInfer) whose wheels are all here is installed even when
# the other one's parts are missing: FlashQLA's are in p1+p2, FlashInfer's in p2-p4. Idempotent: a
# group whose wheels' sha256 are all recorded in DIR/.peer-installed is not installed again.
# Prints the line to use:  export PYTHONPATH=DIR:DIR/nvidia_cutlass_dsl/dsl_packages:...
# (pip --target does not run the cutlass DSL's .pth file, so its dsl_packages folder is named here).
# Usage: bash scripts/peer_install.sh [--check] [DIR]
#   --check  afterwards import flash_qla and flashinfer.gdn_prefill (needs the GPU) and say whether
#            FlashInfer's sm90 kernel module loaded.
# Exit: 0 all installed; 2 some parts missing (what could be installed was); 1 error.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK=0
if [[ ${1:-} == --check ]]; then CHECK=1; shift; fi
DIR=${1:-${PEER_SITE:-/tmp/site-peers}}
STAGE=${PEER_STAGE:-/tmp/peer-wheels}
PY=${PYTHON:-python3}

manifest=$(ls .peer/p*/MANIFEST.tsv 2>/dev/null | head -1 || true)
if [[ -z $manifest ]]; then
  echo "peer_install: no .peer/pN/MANIFEST.tsv here: carry the .peer/pN folders in first" >&2
  exit 1
fi
for m in .peer/p*/MANIFEST.tsv; do
  cmp -s "$m" "$manifest" || { echo "peer_install: $m differs from $manifest (parts of two runs of peer_wheels.sh?)" >&2; exit 1; }
done
nparts=$(awk -F'\t' '$1 == "parts" {print $2}' "$manifest")

# Rejoin and verify each wheel whose pieces are all here.
mkdir -p "$STAGE" "$DIR"
declare -A have=()
while IFS=$'\t' read -r _ name sha _bytes group _n; do
  out=$STAGE/$name
  if [[ -f $out ]] && [[ $(sha256sum "$out" | cut -d' ' -f1) == "$sha" ]]; then have[$name]=$group; continue; fi
  mapfile -t pieces < <(awk -F'\t' -v n="$name" '$1 == "piece" && $6 == n {print ".peer/" $2 "/" $3}' "$manifest")
  complete=1
  for p in "${pieces[@]}"; do [[ -f $p ]] || complete=0; done
  (( complete )) || continue
  (( ${#pieces[@]} )) || continue
  cat "${pieces[@]}" > "$out.tmp"
  got=$(sha256sum "$out.tmp" | cut -d' ' -f1)
  if [[ $got != "$sha" ]]; then
    rm -f "$out.tmp"
    echo "peer_install: sha256 mismatch for $name (got $got, manifest $sha):" \
         "re-carry ${pieces[*]%/*}" >&2
    exit 1
  fi
  mv "$out.tmp" "$out"
  have[$name]=$group
done < <(awk -F'\t' '$1 == "file"' "$manifest")

# Which parts are missing or incomplete (a piece absent or of the wrong size).
missing=()
for i in $(seq 1 "$nparts"); do
  ok=1
  while IFS=$'\t' read -r _ part piece _sha bytes name; do
    f=.peer/$part/$piece
    # absent or short, and its wheel not already rejoined by an earlier run
    if { [[ ! -f $f ]] || [[ $(stat -c %s "$f") != "$bytes" ]]; } && [[ -z ${have[$name]:-} ]]; then
      ok=0
    fi
  done < <(awk -F'\t' -v p="p$i" '$1 == "piece" && $2 == p' "$manifest")
  (( ok )) || missing+=("p$i")
done
if (( ${#missing[@]} )); then
  echo "peer_install: MISSING parts: ${missing[*]} (of p1..p$nparts): carry .peer/<part> in a device call" >&2
fi

# Groups: install one when all its wheels and the common ones are here.
to_install=()
declare -A group_ok=()
for group in flashqla flashinfer; do
  ok=1
  while IFS=$'\t' read -r _ name _sha _bytes g _n; do
    if [[ $g == "$group" || $g == common ]] && [[ -z ${have[$name]:-} ]]; then ok=0; fi
  done < <(awk -F'\t' '$1 == "file"' "$manifest")
  group_ok[$group]=$ok
  if (( ok )); then
    # The whole group again unless all of it is recorded: its wheels share folders
    # (nvidia_cutlass_dsl/), which pip --upgrade replaces whole.
    group_files=()
    all_done=1
    while IFS=$'\t' read -r _ name sha _bytes g _n; do
      [[ $g == "$group" || $g == common ]] || continue
      group_files+=("$STAGE/$name")
      grep -qx "$sha" "$DIR/.peer-installed" 2>/dev/null || all_done=0
    done < <(awk -F'\t' '$1 == "file"' "$manifest")
    if (( ! all_done )); then
      for w in "${group_files[@]}"; do
        [[ " ${to_install[*]:-} " == *" $w "* ]] || to_install+=("$w")
      done
    fi
  else
    echo "peer_install: $group NOT installed: its wheels are not all here (missing parts above)" >&2
  fi
done
if (( ${#to_install[@]} )); then
  # --upgrade: replace what an earlier, interrupted run may have left in DIR.
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$DIR" \
    "${to_install[@]}"
  for w in "${to_install[@]}"; do sha256sum "$w" | cut -d' ' -f1 >> "$DIR/.peer-installed"; done
  echo "peer_install: installed $(printf '%s ' "${to_install[@]##*/}")into $DIR"
else
  echo "peer_install: nothing new to install in $DIR"
fi
for group in flashqla flashinfer; do
  if (( ${group_ok[$group]} )); then echo "peer_install: $group ready in $DIR"; fi
done

PP="$DIR:$DIR/nvidia_cutlass_dsl/dsl_packages"
export_line="export PYTHONPATH=$PP\${PYTHONPATH:+:\$PYTHONPATH}"
# TileLang (FlashQLA) compiles with nvcc: it looks at CUDA_HOME, then nvcc on PATH, then
# /usr/local/cuda.
if [[ -z ${CUDA_HOME:-} ]] && ! command -v nvcc > /dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export_line="$export_line CUDA_HOME=/usr/local/cuda"
fi
if (( CHECK )); then
  env PYTHONPATH="$PP${PYTHONPATH:+:$PYTHONPATH}" $PY - <<'EOF' || true
for label, stmt in [("flash_qla", "import flash_qla as m; print('flash_qla', m.__version__)"),
                    ("flashinfer", "from flashinfer.gdn_prefill import chunk_gated_delta_rule\n"
                     "import flashinfer, flashinfer.gdn_kernels as g\n"
                     "print('flashinfer', flashinfer.__version__, 'sm90 kernel:', "
                     "g.chunk_gated_delta_rule_sm90 is not None)\n"
                     "if g.chunk_gated_delta_rule_sm90 is None:\n"
                     "    import flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90")]:
    try:
        exec(stmt, {})
    except Exception as e:  # noqa: BLE001
        print(f"{label}: import FAILED: {type(e).__name__}: {e}")
EOF
fi
echo "$export_line"
(( ${#missing[@]} == 0 )) || exit 2
