"""Python API over the ``torch.ops.gdn`` custom ops: fla-compatible argument handling and the
fake (meta) kernels that let torch.compile trace the ops without running them."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _C

_ARMS = ("auto", "cpu", "serial", "wy-fp32", "wy-tc", "wy_fp32", "wy_tc")
_HEAD_MAPS = ("grouped", "tiled")
_IO_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# Read once at import: the wrappers below are traced by torch.compile (Dynamo), which cannot call
# into a pybind11 function such as _C.cuda_built(); a call there is a graph break, i.e. an error
# under fullgraph=True (on CUDA inputs only, where the `q.is_cuda and ...` test reaches it).
_CUDA_BUILT = bool(_C.cuda_built())


@torch.library.register_fake("gdn::chunk_gated_delta_rule")
def _chunk_gated_delta_rule_fake(q, k, v, g, beta, scale, initial_state, output_final_state,
                                 cu_seqlens, cu_seqlens_cpu, use_qk_l2norm, head_map,
                                 state_v_first, arm, workspace=None):
    B, T, _, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else B
    o = q.new_empty((B, T, HV, V))
    if output_final_state:
        shape = (N, HV, V, K) if state_v_first else (N, HV, K, V)
        hT = q.new_empty(shape, dtype=torch.float32)
    else:
        hT = q.new_empty((0,), dtype=torch.float32)
    return o, hT


@torch.library.register_fake("gdn::decode_step")
def _decode_step_fake(q, k, v, g, beta, state, state_indices, state_indices_cpu, scale,
                      use_qk_l2norm, head_map, state_v_first, A_log=None, a=None, dt_bias=None,
                      beta_sigmoid=False):
    return q.new_empty((q.shape[0], v.shape[1], v.shape[2]))


@torch.library.register_fake("gdn::verify_step")
def _verify_step_fake(q, k, v, g, beta, state, state_indices, state_indices_cpu, num_accepted,
                      num_accepted_cpu, state_cache, scale, use_qk_l2norm, head_map,
                      state_v_first, A_log, a, dt_bias, beta_sigmoid):
    return q.new_empty((q.shape[0], q.shape[1], v.shape[2], v.shape[3]))


def _shape_error(name: str, want: str, t: torch.Tensor) -> ValueError:
    return ValueError(f"gdn: {name} must have shape {want}, got {tuple(t.shape)}")


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
    head_map: str = "grouped",
    arm: str = "auto",
    state_v_first: bool = False,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    workspace: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    r"""Gated delta rule prefill, fla's ``chunk_gated_delta_rule`` semantics (forward only).

    Per sequence and value head h, state S [K, V] fp32, for each token t (DESIGN.md §1)::

        S = exp(g_t) S;  u_t = beta_t (v_t - S^T k_t);  S += k_t u_t^T;  o_t = scale S^T q_t

    Args:
        q, k: ``[B, T, H, K]``, bf16 | fp16 | fp32 (one dtype for q, k, v).
        v: ``[B, T, HV, V]``; HV a multiple of H (GVA).
        g: ``[B, T, HV]`` log-decay (<= 0), any float dtype (read as fp32).
        beta: ``[B, T, HV]`` in [0, 1], fp32 or bf16 (other float dtypes are read as fp32).
        scale: output scale; ``None`` means ``K ** -0.5`` (fla's default).
        initial_state: ``[N, HV, K, V]`` (``[N, HV, V, K]`` with ``state_v_first``), any float
            dtype, read as fp32. N = B, or the number of sequences with ``cu_seqlens``.
        output_final_state: return the final state ``[N, HV, K, V]`` in fp32.

    Keyword-only (fla 0.5 and 0.6 order these differently; by keyword both calls work):
        cu_seqlens: ``[N+1]`` int32/int64 offsets of packed sequences (B must be 1); zero-length
            sequences are allowed. A CUDA tensor is copied to the host (one device sync, which
            CUDA-graph capture forbids: a ValueError there) unless ``cu_seqlens_cpu`` (a CPU
            copy, as fla 0.6 takes it) is given as well. A CPU tensor needs no sync and no
            host-to-device copy on CUDA inputs (the library passes it by value to the GPU).
        use_qk_l2norm_in_kernel: normalize q and k per head as ``x * rsqrt(sum(x^2) + 1e-6)``.
        head_map: value head h reads key head ``h // (HV // H)`` ("grouped": fla, HF) or
            ``h % H`` ("tiled").
        arm: "auto" | "cpu" | "serial" | "wy-fp32" | "wy-tc"; an arm that cannot run falls back
            and says why once on stderr (``gdn_torch.last_arm()`` names the arm that ran).
        state_v_first: state layout ``[..., V, K]`` (fla 0.6's ``state_v_first``).
        workspace: CUDA inputs only: a ``torch.uint8`` tensor on q's device, contiguous, of at
            least ``prefill_workspace_bytes(...)`` bytes (same arguments) and 256-byte aligned
            (a fresh allocation is), that the call uses as its scratch instead of the library's
            memory pool (an engine's allocator, CUDA graphs with a static buffer). Its contents
            are overwritten; it must not be used by another call running concurrently. ``None``:
            the pool.

    Returns:
        ``(o, final_state)``: o ``[B, T, HV, V]`` in q's dtype; final_state fp32 or ``None``.

    Raises ValueError for bad shapes, dtypes, devices or options (the library's message),
    NotImplementedError for a geometry no arm implements, RuntimeError for a CUDA failure.
    """
    scale = _check_prefill(q, k, v, g, beta, scale, initial_state, cu_seqlens, head_map, arm,
                           state_v_first, cu_seqlens_cpu)
    if workspace is not None:
        if not isinstance(workspace, torch.Tensor):
            raise TypeError(f"gdn: workspace must be a torch.Tensor, got {type(workspace).__name__}")
        if workspace.dtype != torch.uint8:
            raise ValueError(f"gdn: workspace must be a uint8 tensor, got {workspace.dtype}")
        if workspace.device != q.device:
            raise ValueError(f"gdn: workspace is on {workspace.device} but q is on {q.device}")
    o, hT = torch.ops.gdn.chunk_gated_delta_rule(
        q, k, v, g, beta, scale, initial_state, bool(output_final_state), cu_seqlens,
        cu_seqlens_cpu, bool(use_qk_l2norm_in_kernel), head_map, bool(state_v_first), arm,
        workspace)
    return o, (hT if output_final_state else None)


def prefill_workspace_bytes(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
    head_map: str = "grouped",
    arm: str = "auto",
    state_v_first: bool = False,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
) -> int:
    """Bytes of ``workspace`` that ``chunk_gated_delta_rule`` with the same arguments needs (the
    library's ``gdn::prefill_workspace_bytes``: the arm that call would run, sized by the same
    code as its launch); 0 on CPU tensors. Runs no kernel (it allocates o and the final state as
    the call does, through the caching allocator). With a CUDA ``cu_seqlens`` and no
    ``cu_seqlens_cpu`` it reads the offsets back (a device sync), as the call does.

    Example::

        n = gdn_torch.prefill_workspace_bytes(q, k, v, g, beta, cu_seqlens=cu, cu_seqlens_cpu=cpu)
        ws = torch.empty(n, dtype=torch.uint8, device=q.device)
        o, hT = gdn_torch.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu,
                                                 cu_seqlens_cpu=cpu, workspace=ws)
    """
    scale = _check_prefill(q, k, v, g, beta, scale, initial_state, cu_seqlens, head_map, arm,
                           state_v_first, cu_seqlens_cpu)
    return int(_C.prefill_workspace_bytes(
        q, k, v, g, beta, scale, initial_state, bool(output_final_state), cu_seqlens,
        cu_seqlens_cpu, bool(use_qk_l2norm_in_kernel), head_map, bool(state_v_first), arm))


def _check_prefill(q, k, v, g, beta, scale, initial_state, cu_seqlens, head_map, arm,
                   state_v_first, cu_seqlens_cpu):
    """Argument checks shared by chunk_gated_delta_rule and prefill_workspace_bytes; returns
    scale as a float (or None)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"gdn: {name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4:
        raise _shape_error("q", "[B, T, H, K]", q)
    if k.shape != q.shape:
        raise ValueError(f"gdn: k must have q's shape {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise _shape_error("v", f"[{q.shape[0]}, {q.shape[1]}, HV, V]", v)
    B, T, H, K = q.shape
    HV = v.shape[2]
    for name, t in (("g", g), ("beta", beta)):
        if tuple(t.shape) != (B, T, HV):
            raise _shape_error(name, f"[B, T, HV] = [{B}, {T}, {HV}]", t)
    if H == 0 or HV % H != 0:
        raise ValueError(f"gdn: HV={HV} value heads must be a positive multiple of H={H}")
    if q.dtype not in _IO_DTYPES:
        raise ValueError(f"gdn: q dtype {q.dtype} not supported (bfloat16, float16, float32)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"gdn: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    for name, t in (("g", g), ("beta", beta)):
        if not t.is_floating_point():
            raise ValueError(f"gdn: {name} must be a floating-point tensor, got {t.dtype}")
    for name, t in (("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state)):
        if t is not None and t.device != q.device:
            raise ValueError(f"gdn: {name} is on {t.device} but q is on {q.device}")
    if q.is_cuda and not _CUDA_BUILT:
        raise RuntimeError("gdn: this gdn_torch build has no CUDA arms (no nvcc at build time, or "
                           "GDN_FORCE_CPU=1); rebuild with nvcc on PATH or pass CPU tensors")
    if head_map not in _HEAD_MAPS:
        raise ValueError(f"gdn: head_map must be one of {_HEAD_MAPS}, got {head_map!r}")
    if arm not in _ARMS:
        raise ValueError(f"gdn: arm must be one of {_ARMS[:5]}, got {arm!r}")
    N = B
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"gdn: the batch size must be 1 with cu_seqlens (packed tokens), "
                             f"got B={B}; flatten the inputs to [1, total_T, ...]")
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
            raise ValueError(f"gdn: cu_seqlens must be 1-D with N+1 >= 2 entries, got shape "
                             f"{tuple(cu_seqlens.shape)}")
        N = cu_seqlens.shape[0] - 1
    elif cu_seqlens_cpu is not None:
        raise ValueError("gdn: cu_seqlens_cpu given without cu_seqlens")
    if initial_state is not None:
        V = v.shape[3]
        want = (N, HV, V, K) if state_v_first else (N, HV, K, V)
        if tuple(initial_state.shape) != want:
            raise ValueError(f"gdn: initial_state must have shape {list(want)} (N={N} sequences), "
                             f"got {tuple(initial_state.shape)}")
        if not initial_state.is_floating_point():
            raise ValueError(f"gdn: initial_state must be floating-point, got {initial_state.dtype}")
    if scale is not None:
        scale = float(scale)
    return scale


def _check_gate(g, A_log, a, dt_bias, lead, HV):
    """The gate is g (log-decay) or the fused (A_log, a, dt_bias); shapes and dtypes of the one
    given. ``lead`` is the token shape prefix ((N,) or (N, T)) as a tuple, for messages."""
    fused = [t is not None for t in (A_log, a, dt_bias)]
    dims = ", ".join(map(str, lead + (HV,)))
    names = "[N, HV]" if len(lead) == 1 else "[N, T, HV]"
    if g is None:
        if not all(fused):
            raise ValueError("gdn: gate: give g, or all of A_log, a and dt_bias (fused gate "
                             "g = -exp(A_log) * softplus(a + dt_bias))")
        for name, t, want in (("A_log", A_log, (HV,)), ("dt_bias", dt_bias, (HV,)),
                              ("a", a, lead + (HV,))):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"gdn: {name} must be a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != want:
                shape = "[HV]" if name != "a" else names
                raise ValueError(f"gdn: {name} must have shape {shape} = "
                                 f"[{', '.join(map(str, want))}], got {tuple(t.shape)}")
            if not t.is_floating_point():
                raise ValueError(f"gdn: {name} must be a floating-point tensor, got {t.dtype}")
        return (("A_log", A_log), ("a", a), ("dt_bias", dt_bias))
    if any(fused):
        raise ValueError("gdn: gate: give either g or the fused gate (A_log, a, dt_bias), not both")
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"gdn: g must be a torch.Tensor, got {type(g).__name__}")
    if tuple(g.shape) != lead + (HV,):
        raise _shape_error("g", f"{names} = [{dims}]", g)
    if not g.is_floating_point():
        raise ValueError(f"gdn: g must be a floating-point tensor, got {g.dtype}")
    return (("g", g),)


def _check_pool(state, HV, K, V, state_v_first):
    if state.dim() != 4:
        raise _shape_error("state", "[S, HV, K, V]", state)
    want = (HV, V, K) if state_v_first else (HV, K, V)
    if tuple(state.shape[1:]) != want:
        raise ValueError(f"gdn: state must have shape [S, {', '.join(map(str, want))}], got "
                         f"{tuple(state.shape)}")
    if state.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"gdn: state must be float32 or bfloat16 (updated in place), got "
                         f"{state.dtype}")
    if not state.is_contiguous():
        raise ValueError("gdn: state must be contiguous (it is updated in place)")


def _check_index(name, t, N, device):
    """An [N] int32/int64 index tensor on ``device`` (q's; the host for the ``*_cpu`` copies)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"gdn: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 1 or t.shape[0] != N:
        raise _shape_error(name, f"[N] = [{N}]", t)
    if t.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"gdn: {name} must be int32 or int64, got {t.dtype}")
    if name.endswith("_cpu"):
        if t.device.type != "cpu":
            raise ValueError(f"gdn: {name} must be a CPU tensor (a host copy), got {t.device}")
    elif t.device != device:
        raise ValueError(f"gdn: {name} is on {t.device} but q is on {device}"
                         + (" (on CUDA give the host copy as " + name + "_cpu as well)"
                            if device.type == "cuda" else ""))


def decode_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: Optional[torch.Tensor],
    beta: torch.Tensor,
    state: torch.Tensor,
    state_indices: torch.Tensor,
    *,
    scale: Optional[float] = None,
    use_qk_l2norm_in_kernel: bool = False,
    head_map: str = "grouped",
    state_v_first: bool = False,
    state_indices_cpu: Optional[torch.Tensor] = None,
    A_log: Optional[torch.Tensor] = None,
    a: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    beta_is_logit: bool = False,
) -> torch.Tensor:
    r"""One decode step (one token per sequence) over a pool of recurrent states, in place.

    For each sequence n with slot s = state_indices[n] >= 0 and value head h (the recurrence of
    ``chunk_gated_delta_rule`` with T = 1 and initial state ``state[s]``)::

        S = exp(g) state[s, h];  u = beta (v - S^T k);  S += k u^T;  o = scale S^T q;
        state[s, h] = S

    Args:
        q, k: ``[N, H, K]`` or ``[N, 1, H, K]``, bf16 | fp16 | fp32 (one dtype for q, k, v).
        v: ``[N, HV, V]`` or ``[N, 1, HV, V]``.
        g: ``[N, HV]`` (or ``[N, 1, HV]``) log-decay <= 0, any float dtype (read as fp32); or
            ``None`` with the fused gate (``A_log``, ``a``, ``dt_bias``) given instead.
        beta: ``[N, HV]`` (or ``[N, 1, HV]``) in [0, 1] (the logit with ``beta_is_logit``),
            fp32 or bf16 (others read as fp32).
        state: the state pool ``[S, HV, K, V]`` (``[S, HV, V, K]`` with ``state_v_first``), fp32
            or bf16, contiguous; **updated in place** for the live slots.
        state_indices: ``[N]`` int32/int64 slot of each sequence; a negative index is a padding
            row (its state is not read or written, its o row is zero). On CUDA it must be a CUDA
            tensor (a host-to-device copy inside the op would break CUDA-graph capture).

    Keyword-only:
        scale: ``None`` means ``K ** -0.5``.
        use_qk_l2norm_in_kernel, head_map, state_v_first: as for ``chunk_gated_delta_rule``.
        state_indices_cpu: on CUDA, a host copy of ``state_indices``: live indices are then
            checked (in [0, S), distinct) and a bad one raises ValueError before anything is
            written. Without it the kernel skips a live index >= S (o row zero, state untouched)
            and duplicates are not detected. CPU calls always check.
        A_log, a, dt_bias: the fused gate, in place of ``g``:
            ``g = -exp(A_log[h]) * softplus(a[n, h] + dt_bias[h])`` (softplus as torch's, linear
            above 20). A_log, dt_bias ``[HV]`` (read as fp32); a shaped like g, fp32 | bf16 |
            fp16 (others read as fp32).
        beta_is_logit: ``beta`` holds the logit b and ``beta = sigmoid(b)`` is taken in the
            kernel.

    Returns:
        o, shaped like v (``[N, HV, V]`` or ``[N, 1, HV, V]``), in q's dtype.

    The op (``torch.ops.gdn.decode_step``) declares its mutation of ``state`` in its schema, has a
    fake kernel (torch.compile traces it) and on CUDA does no host synchronisation and no
    host-to-device copy (CUDA graphs capture it).
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("beta", beta), ("state", state),
                    ("state_indices", state_indices)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"gdn: {name} must be a torch.Tensor, got {type(t).__name__}")
    four = q.dim() == 4
    if four:  # fla's [B, T=1, H, K] convention
        if q.shape[1] != 1 or v.dim() != 4 or v.shape[1] != 1 or k.shape != q.shape:
            raise ValueError(f"gdn: decode_step takes one token per sequence: q [N, 1, H, K] "
                             f"and v [N, 1, HV, V], got q {tuple(q.shape)}, v {tuple(v.shape)}; "
                             f"for several draft tokens use verify_step")
        q, k, v = q.squeeze(1), k.squeeze(1), v.squeeze(1)
        g, beta, a = (t.squeeze(1) if isinstance(t, torch.Tensor) and t.dim() == 3 else t
                      for t in (g, beta, a))
    if q.dim() != 3:
        raise _shape_error("q", "[N, H, K]", q)
    if k.shape != q.shape:
        raise ValueError(f"gdn: k must have q's shape {tuple(q.shape)}, got {tuple(k.shape)}")
    N, H, K = q.shape
    if v.dim() != 3 or v.shape[0] != N:
        raise _shape_error("v", f"[{N}, HV, V]", v)
    HV, V = v.shape[1], v.shape[2]
    gate = _check_gate(g, A_log, a, dt_bias, (N,), HV)
    _check_common(q, k, v, beta, gate, state, (N,), H, HV, K, V, state_v_first, head_map)
    _check_index("state_indices", state_indices, N, q.device)
    if state_indices_cpu is not None:
        _check_index("state_indices_cpu", state_indices_cpu, N, None)
    if scale is not None:
        scale = float(scale)
    o = torch.ops.gdn.decode_step(q, k, v, g, beta, state, state_indices, state_indices_cpu,
                                  scale, bool(use_qk_l2norm_in_kernel), head_map,
                                  bool(state_v_first), A_log, a, dt_bias, bool(beta_is_logit))
    return o.unsqueeze(1) if four else o


def verify_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: Optional[torch.Tensor],
    beta: torch.Tensor,
    state: torch.Tensor,
    state_indices: torch.Tensor,
    *,
    num_accepted: Optional[torch.Tensor] = None,
    state_cache: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    use_qk_l2norm_in_kernel: bool = False,
    head_map: str = "grouped",
    state_v_first: bool = False,
    state_indices_cpu: Optional[torch.Tensor] = None,
    num_accepted_cpu: Optional[torch.Tensor] = None,
    A_log: Optional[torch.Tensor] = None,
    a: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    beta_is_logit: bool = False,
) -> torch.Tensor:
    r"""Speculative verify: T (1..16) draft tokens per sequence over a state pool, in place.

    For each sequence n with slot s = state_indices[n] >= 0 and value head h, starting from
    ``S = state[s, h]``, for t < T::

        S = exp(g_t) S;  u_t = beta_t (v_t - S^T k_t);  S += k_t u_t^T;  o_t = scale S^T q_t

    then ``state[s, h]`` = S after the first ``num_accepted[n]`` tokens (0: unchanged; all T
    when ``num_accepted`` is None). o is computed for every token regardless.

    Args:
        q, k: ``[N, T, H, K]``, bf16 | fp16 | fp32 (one dtype for q, k, v); T in 1..16.
        v: ``[N, T, HV, V]``.
        g: ``[N, T, HV]`` log-decay <= 0 (read as fp32), or ``None`` with the fused gate.
        beta: ``[N, T, HV]`` in [0, 1] (the logit with ``beta_is_logit``), fp32 or bf16.
        state: the pool ``[S, HV, K, V]`` (``[S, HV, V, K]`` with ``state_v_first``), fp32 or
            bf16, contiguous; **updated in place** for the live slots.
        state_indices: ``[N]`` int32/int64 slots on q's device; negative = padding row (state
            and state_cache rows untouched, o rows zero).

    Keyword-only:
        num_accepted: ``[N]`` int32/int64 on q's device, values in [0, T]: how many draft tokens
            to commit to the pool. None: all T.
        state_cache: ``[N, T, HV, K, V]`` (``[N, T, HV, V, K]`` with ``state_v_first``), the
            pool's dtype, contiguous; **written in place** with the state after every token t
            (independent of ``num_accepted``), so a rollback to any accepted prefix is a copy.
        scale, use_qk_l2norm_in_kernel, head_map, state_v_first: as for ``decode_step``.
        state_indices_cpu, num_accepted_cpu: on CUDA, host copies: indices in [0, S) and
            distinct, counts in [0, T], checked before anything is written (ValueError).
            Without them the kernel skips a sequence with a bad index or count (its o rows zero,
            pool untouched) and duplicate indices are not detected. CPU calls always check.
        A_log, a, dt_bias, beta_is_logit: the fused gate and sigmoid beta as for
            ``decode_step``, with ``a`` shaped ``[N, T, HV]``.

    Returns:
        o ``[N, T, HV, V]`` in q's dtype.

    The op (``torch.ops.gdn.verify_step``) declares its mutation of ``state`` and
    ``state_cache`` in its schema, has a fake kernel (torch.compile traces it) and on CUDA runs
    on the current stream with no host synchronisation and no host-to-device copy.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("beta", beta), ("state", state),
                    ("state_indices", state_indices)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"gdn: {name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4:
        raise _shape_error("q", "[N, T, H, K]", q)
    if k.shape != q.shape:
        raise ValueError(f"gdn: k must have q's shape {tuple(q.shape)}, got {tuple(k.shape)}")
    N, T, H, K = q.shape
    if not 1 <= T <= 16:
        raise ValueError(f"gdn: verify_step takes T = 1..16 draft tokens per sequence, got T={T} "
                         f"(q {tuple(q.shape)})")
    if v.dim() != 4 or tuple(v.shape[:2]) != (N, T):
        raise _shape_error("v", f"[{N}, {T}, HV, V]", v)
    HV, V = v.shape[2], v.shape[3]
    gate = _check_gate(g, A_log, a, dt_bias, (N, T), HV)
    _check_common(q, k, v, beta, gate, state, (N, T), H, HV, K, V, state_v_first, head_map)
    _check_index("state_indices", state_indices, N, q.device)
    if state_indices_cpu is not None:
        _check_index("state_indices_cpu", state_indices_cpu, N, None)
    if num_accepted is not None:
        _check_index("num_accepted", num_accepted, N, q.device)
    if num_accepted_cpu is not None:
        if num_accepted is None:
            raise ValueError("gdn: num_accepted_cpu given without num_accepted")
        _check_index("num_accepted_cpu", num_accepted_cpu, N, None)
    if state_cache is not None:
        if not isinstance(state_cache, torch.Tensor):
            raise TypeError(f"gdn: state_cache must be a torch.Tensor, got "
                            f"{type(state_cache).__name__}")
        want = (N, T, HV, V, K) if state_v_first else (N, T, HV, K, V)
        if tuple(state_cache.shape) != want:
            raise ValueError(f"gdn: state_cache must have shape "
                             f"{'[N, T, HV, V, K]' if state_v_first else '[N, T, HV, K, V]'} = "
                             f"{list(want)}, got {tuple(state_cache.shape)}")
        if state_cache.dtype != state.dtype:
            raise ValueError(f"gdn: state_cache must have the pool's dtype {state.dtype}, got "
                             f"{state_cache.dtype}")
        if state_cache.device != q.device:
            raise ValueError(f"gdn: state_cache is on {state_cache.device} but q is on {q.device}")
        if not state_cache.is_contiguous():
            raise ValueError("gdn: state_cache must be contiguous (it is written in place)")
    if scale is not None:
        scale = float(scale)
    return torch.ops.gdn.verify_step(q, k, v, g, beta, state, state_indices, state_indices_cpu,
                                     num_accepted, num_accepted_cpu, state_cache, scale,
                                     bool(use_qk_l2norm_in_kernel), head_map,
                                     bool(state_v_first), A_log, a, dt_bias, bool(beta_is_logit))


def _check_common(q, k, v, beta, gate, state, lead, H, HV, K, V, state_v_first, head_map):
    """Checks shared by decode_step and verify_step (lead: (N,) or (N, T))."""
    if tuple(beta.shape) != lead + (HV,):
        names = "[N, HV]" if len(lead) == 1 else "[N, T, HV]"
        raise _shape_error("beta", f"{names} = [{', '.join(map(str, lead + (HV,)))}]", beta)
    if H == 0 or HV % H != 0:
        raise ValueError(f"gdn: HV={HV} value heads must be a positive multiple of H={H}")
    if q.dtype not in _IO_DTYPES:
        raise ValueError(f"gdn: q dtype {q.dtype} not supported (bfloat16, float16, float32)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"gdn: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not beta.is_floating_point():
        raise ValueError(f"gdn: beta must be a floating-point tensor, got {beta.dtype}")
    for name, t in (("k", k), ("v", v), ("beta", beta), ("state", state)) + tuple(gate):
        if t.device != q.device:
            raise ValueError(f"gdn: {name} is on {t.device} but q is on {q.device}")
    if q.is_cuda and not _CUDA_BUILT:
        raise RuntimeError("gdn: this gdn_torch build has no CUDA arms (no nvcc at build time, or "
                           "GDN_FORCE_CPU=1); rebuild with nvcc on PATH or pass CPU tensors")
    _check_pool(state, HV, K, V, state_v_first)
    if head_map not in _HEAD_MAPS:
        raise ValueError(f"gdn: head_map must be one of {_HEAD_MAPS}, got {head_map!r}")


def device_info() -> dict:
    """What libgdn sees: CUDA build, device count, compute capability, name, runtime."""
    return _C.device_info()


def arm_available(arm: str) -> Tuple[bool, str]:
    """(True, "") if ``arm`` can run on this build and machine, else (False, why)."""
    return _C.arm_available(arm)


def last_arm() -> str:
    """The arm that ran in this thread's last ``chunk_gated_delta_rule`` call."""
    return _C.last_arm()


def version() -> str:
    return _C.version()
