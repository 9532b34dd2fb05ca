"""fp64 reference for the tests: the naive per-token recurrence of DESIGN.md §1, written in torch,
plus the error metric and the bounds the tests hold every arm to."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

# Unit roundoff of each storage precision (round to nearest): 2^-p for p significand bits.
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def reference(q, k, v, g, beta, *, scale: Optional[float] = None, h0=None,
              cu_seqlens: Optional[Sequence[int]] = None, head_map: str = "grouped",
              l2norm: bool = False):
    """o [B, T, HV, V] and final state [N, HV, K, V], both fp64, from fla-shaped inputs.

    With cu_seqlens, B must be 1 and the tokens are packed; otherwise each batch row is a sequence.
    """
    B, T, HK, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = K**-0.5 if scale is None else scale
    q, k, v = (x.double().reshape(B * T, x.shape[2], x.shape[3]) for x in (q, k, v))
    g, beta = (x.double().reshape(B * T, HV) for x in (g, beta))
    if l2norm:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    heads = torch.arange(HV)
    kh = heads // (HV // HK) if head_map == "grouped" else heads % HK
    q, k = q[:, kh], k[:, kh]  # [T, HV, K]
    cu = list(cu_seqlens) if cu_seqlens is not None else [n * T for n in range(B + 1)]
    N = len(cu) - 1
    o = torch.zeros(B * T, HV, V, dtype=torch.float64)
    hT = torch.zeros(N, HV, K, V, dtype=torch.float64)
    for n in range(N):
        S = h0[n].double().clone() if h0 is not None else torch.zeros(HV, K, V, dtype=torch.float64)
        for t in range(cu[n], cu[n + 1]):
            S = S * torch.exp(g[t])[:, None, None]
            u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
            S = S + k[t][:, :, None] * u[:, None, :]
            o[t] = scale * torch.einsum("hkv,hk->hv", S, q[t])
        hT[n] = S
    return o.reshape(B, T, HV, V), hT


def rel_rms(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| in fp64; inf when x has a NaN/Inf where ref is finite."""
    x = x.detach().double().cpu()
    ref = ref.double().cpu()
    if (~torch.isfinite(x) & torch.isfinite(ref)).any():
        return math.inf
    den = ref.norm().item()
    num = (x - ref).norm().item()
    return num / den if den > 0 else num


def bound(io_dtype: torch.dtype, arm: str) -> float:
    """Relative RMS bound for o and the final state against the fp64 reference.

    Two terms: rounding the output to the io dtype (<= u_io per element, relative), and the
    folds. fp32 folds (cpu, serial, wy-fp32) over a 64-token chunk and a few hundred tokens
    accumulate ~sqrt(n) u32 per element: 1e-5 covers n up to 10^5 with margin. Tensor-core folds
    (wy-tc) round their operands to 16 bits (bf16: u = 2^-8) once per product: relative RMS
    ~u_op, so 4 u_op. A wrong head map or a missed decay gives errors of order 1.
    """
    u_io = UNIT_ROUNDOFF[io_dtype]
    fold = 4 * 2.0**-8 if arm == "wy-tc" else 1e-5
    return 4 * u_io + fold


def make_inputs(B, T, HK, HV, K, V, *, dtype=torch.float32, device="cpu", decay="slow",
                h0=False, N=None, l2norm_in_kernel=False, seed=0):
    """fla-shaped random inputs: unit-norm keys (unless the kernel normalizes them), beta in
    [0, 1], g <= 0 with the given decay speed."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, HK, K, generator=gen)
    k = torch.randn(B, T, HK, K, generator=gen)
    if not l2norm_in_kernel:
        k = torch.nn.functional.normalize(k, dim=-1)
    else:
        k = 3.0 * k  # the kernel must normalize these
        q = 2.0 * q
    v = torch.randn(B, T, HV, V, generator=gen)
    beta = torch.rand(B, T, HV, generator=gen)
    lo = {"none": 0.0, "slow": -0.05, "fast": -2.0, "extreme": -20.0}[decay]
    g = lo * torch.rand(B, T, HV, generator=gen) if decay != "extreme" else torch.full(
        (B, T, HV), lo)
    state = None
    if h0:
        state = 0.5 * torch.randn(N if N is not None else B, HV, K, V, generator=gen)
    cast = lambda x: x.to(device=device, dtype=dtype)  # noqa: E731
    return dict(q=cast(q), k=cast(k), v=cast(v), g=g.to(device), beta=beta.to(device),
                initial_state=state.to(device) if state is not None else None)


def split_case(case: dict):
    """A state-pool test case (decode / verify) split into the generator's keyword arguments and
    the call options (head_map, l2norm, vk, scale), with their defaults."""
    c = dict(case)
    opts = dict(head_map=c.pop("head_map", "grouped"), l2norm=c.pop("l2norm", False),
                vk=c.pop("vk", False), scale=c.pop("scale", None))
    return c, opts


def rejects_vk_on_cuda(call, x, opts, device) -> bool:
    """The GPU decode implements the [K, V] state layout only: on CUDA a [V, K] case must raise
    NotImplementedError and leave the state pool untouched. Returns True when that was checked (the
    case ends there)."""
    if not (opts["vk"] and device == "cuda"):
        return False
    import pytest
    before = x["state"].clone()
    with pytest.raises(NotImplementedError, match="layout"):
        call(x, scale=opts["scale"], state_v_first=True)
    assert torch.equal(x["state"], before)
    return True

