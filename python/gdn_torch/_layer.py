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
            cu = [int(c) for c in cu_seqlens]
            sl = [int(s) for s in slots]
            self._check_x(x, "[T, hidden]")
            if len(cu) < 2 or len(sl) != len(cu) - 1:
                raise ValueError(f"gdn: Layer.prefill needs cu_seqlens of N+1 >= 2 entries and N "
                                 f"slots, got {len(cu)} and {len(sl)}")
            if cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])) or cu[-1] != x.shape[0]:
                raise ValueError(f"gdn: cu_seqlens must rise from 0 to the {x.shape[0]} tokens of "
                                 f"x, got {cu}")
            self._check_slots(sl)
            return super().prefill(x, cu, sl, arm)

        def decode(self, x: torch.Tensor, slots: Sequence[int]) -> torch.Tensor:
            sl = [int(s) for s in slots]
            self._check_x(x, "[N, hidden]")
            if len(sl) != x.shape[0] or not sl:
                raise ValueError(f"gdn: Layer.decode needs one slot per row of x ({x.shape[0]}), "
                                 f"got {len(sl)}")
            self._check_slots(sl)
            return super().decode(x, sl)

        # The checks the C++ side makes too, made here first so that bad input is reported as a
        # ValueError before any native code runs.
        def _check_x(self, x: torch.Tensor, shape: str) -> None:
            hidden = self.config["hidden"]
            if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != hidden:
                raise ValueError(f"gdn: x must have shape {shape} with hidden = {hidden}, got "
                                 f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x)}")
            if x.dtype != torch.bfloat16:
                raise ValueError(f"gdn: x must be bfloat16, got {x.dtype}")
            if not x.is_cuda or not x.is_contiguous():
                raise ValueError(f"gdn: x must be a contiguous CUDA tensor, got {x.device}")

        def _check_slots(self, sl: Sequence[int]) -> None:
            n = self.slots
            bad = [s for s in sl if s < 0 or s >= n]
            if bad:
                raise ValueError(f"gdn: slot {bad[0]} out of range 0..{n - 1}")
            if len(set(sl)) != len(sl):
                raise ValueError(f"gdn: slots must be distinct, got {list(sl)}")
else:
    class Layer:  # type: ignore[no-redef]
        """Placeholder: this gdn_torch build has no CUDA arms; the layer runs on the GPU only."""

        def __init__(self, *args, **kwargs):
            raise RuntimeError("gdn: gdn_torch.Layer needs a CUDA build of gdn_torch (nvcc at "
                               "build time, GDN_FORCE_CPU unset)")


__all__ = ["Layer", "layer_config", "layer_weights"]
