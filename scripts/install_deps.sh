#!/usr/bin/env bash
# Installs the build dependencies (Debian/Ubuntu packages) when any is missing. As root it runs
# apt-get; otherwise it prints the command to run. The CUDA toolkit is optional: with nvcc on
# PATH (or in /usr/local/cuda/bin) the CUDA arms build too.
set -euo pipefail
PKGS=(cmake ninja-build g++ git nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi
echo "gdn: installing ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "gdn: run as root: apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
