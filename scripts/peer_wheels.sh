#!/usr/bin/env bash
# Run HERE (network, PyPI) before a GPU run that times the peers of bench/compare.py: downloads the
# exact wheels FlashQLA and FlashInfer's sm90 GDN prefill need on the GPU machine (Python 3.12,
# torch 2.11.0+cu130, no network), strips what that path cannot use, and lays them out in
# git-ignored folders .peer/p1, .peer/p2, ... of at most ~58 MiB each, so that each travels in one
# device call (64 MiB a call, the working tree included). Files over 55 MiB are cut with
# `split -b 55M`; every part holds the same MANIFEST.tsv (sha256 of each wheel and each piece).
# There: all parts copied in, `bash scripts/peer_install.sh` (see that script).
#
# The set (pip --no-deps; everything else they import is already on the GPU machine's image):
#   FlashQLA   flash-qla 0.1.3, tilelang 0.1.15, apache-tvm-ffi 0.1.12 (tilelang: <0.1.13;
#              FlashInfer: >=0.1.11,<0.2), z3-solver 4.15.4.0 (libtilelang.so links libz3.so.4.15).
#   FlashInfer flashinfer-python 0.7.2.post1 without flashinfer/data/{csrc,cutlass,cccl} (C++
#              sources of the JIT/AOT and Cake paths; the sm90 GDN prefill is a CuTe-DSL kernel and
#              its import and call chain never reads flashinfer/data), nvidia-cutlass-dsl 4.8.1 with
#              -libs-base, -libs-core and the cu13 flavour -libs-cu13 only (driver 580 = CUDA 13.0:
#              the DSL loads the newest flavour the driver supports, so cu12 would be dead weight).
#   Not needed: torch-c-dlpack-ext (torch 2.11 has __dlpack_c_exchange_api__ itself), cuda-python,
#   cuda-tile, nccl4py, nccl-extensions, nvidia-cudnn-frontend (imports guarded or lazy).
# Parts, in order (FlashQLA first: after p1 and p2 it is complete):
#   p1 tilelang, apache-tvm-ffi, flash-qla      p2 z3-solver, flashinfer (stripped), cutlass-dsl
#   p3 libs-cu13 piece 00                       p4 libs-cu13 piece 01
# Usage: bash scripts/peer_wheels.sh            (PEER_CACHE=dir keeps the downloads; default
#                                                /tmp/gdn-peer-wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${PEER_CACHE:-/tmp/gdn-peer-wheels}
PART_CAP=$((58 * 1024 * 1024))   # bytes a part may hold
PIECE=55M                        # split size for larger files
PY=${PYTHON:-python3}

# name==version  group  sha256 of the PyPI file (checked after download)
WHEELS=(
  "tilelang==0.1.15 flashqla ca021a3450ad84b8fe7deb1b659c8d3d2e4b0855fdb59e2992a5349acf019881"
  "apache-tvm-ffi==0.1.12 common dc0acd7eeb0e451d5e3f686af3ba0b495fdbf97b5b54cf9a0f770cdafe0e691a"
  "flash-qla==0.1.3 flashqla 4a76f76edfc98e0f161c2f0fee73f7d7267276d954339dec4fb5d2e077aff061"
  "z3-solver==4.15.4.0 flashqla 7e103a6f203f505b8b8b8e5c931cc407c95b61556512d4921c1ddc0b3f41b08e"
  "flashinfer-python==0.7.2.post1 flashinfer bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"
  "nvidia-cutlass-dsl==4.8.1 flashinfer 43ed46b21d151aa643c6765457c7310827b938c1cf45d5109a0152de4ef06227"
  "nvidia-cutlass-dsl-libs-base==4.8.1 flashinfer ac2fd8c7fa3d6ded00917fa7cba8686061005da8c4703c6a29e03c1504543909"
  "nvidia-cutlass-dsl-libs-core==4.8.1 flashinfer bacc6760e3286db447d45720d32ae58ac2e6cecade1152345ef784b2d5e44431"
  "nvidia-cutlass-dsl-libs-cu13==4.8.1 flashinfer 50191a381d8cc1393373ae0bc879b0aefa9a256c23c22d4fa1c2fe3dfe57bc90"
)
PLAT=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
  PLAT+=(--platform "$p")
done

mkdir -p "$CACHE/dl"
REQ="$CACHE/requirements.txt"
: > "$REQ"
for w in "${WHEELS[@]}"; do
  read -r spec _group sha <<< "$w"
  echo "$spec --hash=sha256:$sha" >> "$REQ"
done
# --require-hashes: every file pip keeps must match the sha256 above.
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLAT[@]}" --require-hashes -r "$REQ" -d "$CACHE/dl"

# Strip flashinfer and lay out the parts (python: zip rewrite with its RECORD, next-fit packing).
rm -rf .peer "$CACHE/out"
mkdir -p "$CACHE/out" .peer
$PY - "$CACHE" "${WHEELS[@]}" <<'EOF'
import glob, os, re, shutil, sys, zipfile
cache, specs = sys.argv[1], sys.argv[2:]
STRIP = ("flashinfer/data/csrc/", "flashinfer/data/cutlass/", "flashinfer/data/cccl/")

def find(spec):
    name, ver = spec.split("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()
    hits = [p for p in glob.glob(os.path.join(cache, "dl", "*.whl"))
            if os.path.basename(p).lower().startswith(f"{stem}-{ver}-")]
    if len(hits) != 1:
        sys.exit(f"peer_wheels: expected one wheel for {spec}, found {hits}")
    return hits[0]

def strip_wheel(src, dst):
    """Copy the wheel without STRIP, dropping their RECORD lines (a valid wheel still)."""
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zo:
        dropped = 0
        for info in zi.infolist():
            if info.filename.startswith(STRIP):
                dropped += 1
                continue
            data = zi.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(l for l in lines if not l.startswith(STRIP)).encode()
            zo.writestr(info, data)
    print(f"peer_wheels: stripped {dropped} files of {', '.join(STRIP)} from {os.path.basename(src)}")

files = []  # (path in out/, group)
for entry in specs:
    spec, group, _ = entry.split()
    src = find(spec)
    dst = os.path.join(cache, "out", os.path.basename(src))
    if spec.startswith("flashinfer-python=="):
        strip_wheel(src, dst)
    else:
        shutil.copyfile(src, dst)
    files.append((dst, group))
with open(os.path.join(cache, "files.tsv"), "w") as f:
    for path, group in files:
        f.write(f"{path}\t{group}\n")
EOF

# Cut files larger than the piece size; pieces are NAME.00, NAME.01, ...
: > "$CACHE/pieces.tsv"
while IFS=$'\t' read -r path group; do
  name=$(basename "$path")
  if (( $(stat -c %s "$path") > 55 * 1024 * 1024 )); then
    split -b "$PIECE" -d -a 2 "$path" "$path."
    for piece in "$path".[0-9][0-9]; do printf '%s\t%s\t%s\n' "$piece" "$name" "$group" >> "$CACHE/pieces.tsv"; done
  else
    printf '%s\t%s\t%s\n' "$path" "$name" "$group" >> "$CACHE/pieces.tsv"
  fi
done < "$CACHE/files.tsv"

# Next-fit packing in the order above, and the manifest:
#   file  NAME  SHA256  BYTES  GROUP  NPIECES
#   piece PART  PIECE   SHA256  BYTES  NAME
$PY - "$CACHE" "$PART_CAP" <<'EOF'
import hashlib, os, shutil, sys
cache, cap = sys.argv[1], int(sys.argv[2])
def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()
pieces = [l.rstrip("\n").split("\t") for l in open(os.path.join(cache, "pieces.tsv"))]
files = [l.rstrip("\n").split("\t") for l in open(os.path.join(cache, "files.tsv"))]
parts, used = [[]], [0]
for path, name, group in pieces:
    size = os.path.getsize(path)
    if size > cap:
        sys.exit(f"peer_wheels: {path} ({size} B) is larger than a part")
    if used[-1] + size > cap:
        parts.append([]); used.append(0)
    parts[-1].append((path, name)); used[-1] += size
lines = [f"parts\t{len(parts)}"]
for path, group in files:
    n = sum(1 for _, nm, _ in pieces if nm == os.path.basename(path))
    lines.append(f"file\t{os.path.basename(path)}\t{sha(path)}\t{os.path.getsize(path)}\t{group}\t{n}")
for i, part in enumerate(parts, 1):
    d = os.path.join(".peer", f"p{i}")
    os.makedirs(d)
    for path, name in part:
        shutil.copyfile(path, os.path.join(d, os.path.basename(path)))
        lines.append(f"piece\tp{i}\t{os.path.basename(path)}\t{sha(path)}\t{os.path.getsize(path)}\t{name}")
for i in range(1, len(parts) + 1):
    with open(os.path.join(".peer", f"p{i}", "MANIFEST.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
for i, part in enumerate(parts, 1):
    print(f"peer_wheels: .peer/p{i}  {used[i - 1] / 2**20:5.1f} MiB  "
          + ", ".join(os.path.basename(p) for p, _ in part))
EOF
echo "peer_wheels: $(du -sh .peer | cut -f1) in .peer; send each .peer/pN in its own device call" \
     "(carry [\".peer/pN\"]), then run: bash scripts/peer_install.sh"
