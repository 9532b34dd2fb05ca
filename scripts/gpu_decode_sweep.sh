#!/usr/bin/env bash
# On the GPU machine, inside the prebuilt snapshot (scripts/gpu_prebuild.sh; binary build-gpu/gdn):
# the three decode bench cases of issue #7 for every decode kernel variant (GDN_DECODE_VARIANT,
# src/cuda/decode/decode_variants.hpp), one JSON line per case (with a "variant" field) appended to
# $OUT/decode_sweep.jsonl, text to $OUT/decode_sweep.txt. Also a SASS census of the decode
# kernels (16-byte global loads/stores, local memory) when cuobjdump is on the machine.
#   standalone: run(command="cd .gpu/head && OUT=$OUT bash scripts/gpu_decode_sweep.sh",
#                   carry=[".deps", ".gpu/head"])
#   gpu_final.sh calls it after the GPU tests (GDN_DECODE_SWEEP=0 skips it).
# Env: GDN_DECODE_SWEEP_VARIANTS (default "v2 v3 v4"), GDN_DECODE_SWEEP_ITERS (default 50
# launches per graph; 21 replays, median). Budget: ~8-12 s per variant (fixture + fp64 check
# dominate at N = 256), well under 60 s for four.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT}"
BIN=${GDN_BIN:-build-gpu/gdn}
[[ -f COMMIT ]] && export GDN_COMMIT=${GDN_COMMIT:-$(cat COMMIT)}
VARIANTS=${GDN_DECODE_SWEEP_VARIANTS:-"v2 v3 v4"}
ITERS=${GDN_DECODE_SWEEP_ITERS:-50}
J=$OUT/decode_sweep.jsonl
TXT=$OUT/decode_sweep.txt
mkdir -p "$OUT"
start=$SECONDS
for v in $VARIANTS; do
  for args in "--seqs 256" "--seqs 1" "--seqs 64 --verify-tokens 4"; do
    # shellcheck disable=SC2086  # args is a list of flags
    GDN_DECODE_VARIANT=$v timeout 30 "$BIN" bench --decode $args --iters "$ITERS" --json "$J" \
      >> "$TXT" 2>&1 || echo "variant $v '$args': exit $?" >> "$TXT"
  done
  echo "# variant $v done at $((SECONDS - start)) s" >> "$TXT"
done
if command -v cuobjdump > /dev/null; then
  LIB=build-gpu/libgdn.a
  [[ -f $LIB ]] || LIB=$BIN
  cuobjdump -sass "$LIB" 2> /dev/null | awk '
    /Function :/ { f = $3; keep = (f ~ /decode|v1_kernel|v3_kernel|v4_kernel/) }
    keep && /LDG|STG|LDS|STS|LDL|STL|UBLKCP|SYNCS/ {
      for (i = 1; i <= NF; ++i) if ($i ~ /^(LDG|STG|LDL|STL|UBLKCP)/) { sub(/;$/, "", $i); c[f " " $i]++ } }
    END { for (k in c) print c[k], k }' | sort -k2 > "$OUT/decode_sass.txt"
fi
grep -E "^(decode|verify|  *vs)" "$TXT" | head -40
echo "decode sweep: $((SECONDS - start)) s"
