#!/usr/bin/env bash
# On the GPU machine (prebuilt snapshot, extension built by gpu_python.sh): the native
# gdn_torch._C.Layer.prefill called directly with cu_seqlens[N] != T (the case that segfaulted in
# test_layer.py::test_layer_bad_input at 128eb09), under cuda-gdb for a backtrace. Output: $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
cat > /tmp/layer_crash.py <<'PY'
import torch, gdn_torch
layer = gdn_torch._C.Layer("tiny", None, 0, 2, 0)
x = torch.zeros(8, layer.config["hidden"], dtype=torch.bfloat16, device="cuda")
for cu, sl in (([0, 7], [0]), ([0, 8], [5])):
    try:
        layer.prefill(x, cu, sl, "auto")
        print("no error for", cu, sl)
    except Exception as e:
        print("raised", type(e).__name__, str(e)[:160])
print("native bad-input calls: done")
PY
timeout 60 python3 /tmp/layer_crash.py > "$OUT/layer_crash.txt" 2>&1
echo "exit $?" >> "$OUT/layer_crash.txt"
if ! grep -q "done" "$OUT/layer_crash.txt"; then
  timeout 120 cuda-gdb -batch -ex run -ex bt -ex "info threads" --args python3 /tmp/layer_crash.py \
    >> "$OUT/layer_crash.txt" 2>&1
fi
