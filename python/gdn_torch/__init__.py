"""gdn_torch: the gated delta rule (Gated DeltaNet) prefill, decode step and speculative verify
of libgdn for PyTorch.

A drop-in for ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (flash-linear-attention 0.6):
same shapes ([B, T, H, K] q/k, [B, T, HV, V] v, [B, T, HV] g/beta), same defaults
(scale = K^-1/2), same returns ((o in q's dtype, final state [N, HV, K, V] fp32 or None)).
Forward only (no autograd).
"""
import torch  # noqa: F401  (first: loads libc10/libtorch, which _C links against)

from . import _C  # noqa: F401  (loads libgdn and registers the torch.ops.gdn ops)
from ._layer import Layer, layer_config, layer_weights
from ._ops import (arm_available, chunk_gated_delta_rule, decode_step, device_info, last_arm,
                   prefill_workspace_bytes, verify_step, version)

__all__ = ["chunk_gated_delta_rule", "decode_step", "verify_step", "Layer", "layer_config", "layer_weights",
           "arm_available", "device_info", "last_arm", "prefill_workspace_bytes", "version"]
