#!/usr/bin/env bash
# HERE, before a device-tool run: exports the committed HEAD (not the working tree) into .gpu/head
# with its sha in .gpu/head/COMMIT, so every GPU figure comes from committed code. Then:
#   run(command="cd .gpu/head && ln -sfn ../../.deps .deps && bash scripts/gpu_run.sh",
#       carry=[".deps", ".gpu/head"])
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d .deps/root/usr ]] || scripts/fetch_deps.sh
rm -rf .gpu/head && mkdir -p .gpu/head
git archive HEAD | tar -x -C .gpu/head
git rev-parse HEAD > .gpu/head/COMMIT
echo "snapshot of $(cat .gpu/head/COMMIT) in .gpu/head ($(du -sh .gpu/head | cut -f1))"
