#!/usr/bin/env bash
# Builds the `gdn` CLI and runs `gdn bench` (the README's main command). With a GPU it times the
# default arm at T = 32768 (qwen3.5-27b geometry); without one it runs the CPU arm at a size that
# finishes in under a minute on 2 cores, and says so. Arguments go to `gdn bench`
# (e.g. scripts/bench.sh --preset qwen3-next-80b --tokens 8192 --json out.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh gdn_cli
exec "${GDN_BUILD_DIR:-build}/gdn" bench "$@"
