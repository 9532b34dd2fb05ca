"""The whole Gated DeltaNet layer of Qwen3.5 / Qwen3-Next (include/gdn/layer.hpp) on the GPU:
projections, causal conv + SiLU, gates, the recurrence, gated RMSNorm, output projection, with a
pool of per-sequence conv and recurrent states. A stateful object (not a torch.library op)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from . import _C

_CUDA_BUILT = bool(_C.cuda_built())


def layer_config(config: str) -> dict:
    """Geometry of a layer config: a preset ("qwen3.5-27b", "qwen3-next-80b", "tiny") or the path
    of an HF config.json. Raises ValueError for an unknown name or unreadable file."""
    return _C.layer_config(config)


def layer_weights(config: str, seed: int = 0) -> dict:
    """Deterministic synthetic weights of ``config`` as CPU tensors (the names and shapes
    ``Layer(weights=...)`` takes): w_qkv [conv_dim, hidden], w_z [value_dim, hidden], w_b and w_a
    [HV, hidden], w_out [hidden, value_dim] in bf16; conv_w [conv_dim, conv_kernel] (tap
    conv_kernel-1 is the current token), A_log and dt_bias [HV], norm_w [V] in fp32."""
    return _C.layer_weights(config, int(seed))


if _CUDA_BUILT:
    class Layer(_C.Layer):
        """One GDN layer on a GPU with ``slots`` sequence-state slots (zeroed at creation).

        ``Layer(config, weights=None, seed=0, slots=1, device=0)``: ``config`` as for
        ``layer_config``; ``weights`` a dict as returned by ``layer_weights`` (any float dtype,
        any device; converted), or None for ``layer_weights(config, seed)``.

        - ``prefill(x, cu_seqlens, slots, arm="auto") -> y``: x ``[T, hidden]`` bf16 contiguous
          on the layer's device; ``cu_seqlens`` (N+1 ints) and ``slots`` (N distinct ints) are
          host sequences. Initial conv/recurrent states are read from the slots and the final
          ones written back. Runs on the current stream; no host sync inside (the offsets and
          slots reach the GPU by value), but the workspace grows (allocates) on the first call of
          a larger size.
        - ``decode(x, slots) -> y``: one token per sequence, x ``[N, hidden]``.
        - ``zero_slots()``, ``get_state(slot) -> (conv [conv_kernel-1, conv_dim], ssm [HV, K,
          V])`` as fp32 CPU tensors, ``set_state(slot, conv, ssm)`` (these synchronize).
        """

        def prefill(self, x: torch.Tensor, cu_seqlens: Sequence[int], slots: Sequence[int],
                    arm: str = "auto") -> torch.Tensor:
            return super().prefill(x, [int(c) for c in cu_seqlens], [int(s) for s in slots], arm)

        def decode(self, x: torch.Tensor, slots: Sequence[int]) -> torch.Tensor:
            return super().decode(x, [int(s) for s in slots])
else:
    class Layer:  # type: ignore[no-redef]
        """Placeholder: this gdn_torch build has no CUDA arms; the layer runs on the GPU only."""

        def __init__(self, *args, **kwargs):
            raise RuntimeError("gdn: gdn_torch.Layer needs a CUDA build of gdn_torch (nvcc at "
                               "build time, GDN_FORCE_CPU unset)")


__all__ = ["Layer", "layer_config", "layer_weights"]
