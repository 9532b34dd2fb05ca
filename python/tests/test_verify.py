"""gdn_torch.verify_step (T = 1..16 draft tokens per sequence over a state pool, in place, with
num_accepted and the per-token state cache) against T sequential steps of the fp64 recurrence
(DESIGN.md §1); the fused gate (A_log, a, dt_bias) and sigmoid beta of decode_step and
verify_step against precomputed g and beta; errors, opcheck, torch.compile and CUDA-graph
capture. CPU cases always run; CUDA cases skip without a GPU and a CUDA build."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gdn_torch
from gdn_reference import reference, rejects_vk_on_cuda, rel_rms, split_case

HAS_CUDA = torch.cuda.is_available() and gdn_torch._C.cuda_built()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="needs a CUDA device and build"))]
CACHE_SENTINEL = 7.0  # what the padding rows of state_cache must still hold after a call


def make_verify(N, T, S, HK, HV, K, V, *, dtype=torch.float32, state_dtype=torch.float32,
                device="cpu", indices=None, accepted=None, vk=False, cache=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(N, T, HK, K, generator=gen)
    k = torch.randn(N, T, HK, K, generator=gen) / K**0.5
    v = torch.randn(N, T, HV, V, generator=gen)
    g = -0.1 * torch.rand(N, T, HV, generator=gen)
    beta = torch.rand(N, T, HV, generator=gen)
    shape = (S, HV, V, K) if vk else (S, HV, K, V)
    state = 0.1 * torch.randn(*shape, generator=gen)
    if indices is None:
        indices = torch.randperm(S, generator=gen)[:N]
    cast = lambda x: x.to(device=device, dtype=dtype)  # noqa: E731
    x = dict(q=cast(q), k=cast(k), v=cast(v), g=g.to(device), beta=beta.to(device),
             state=state.to(device=device, dtype=state_dtype),
             state_indices=torch.as_tensor(indices, dtype=torch.int32).to(device))
    x["num_accepted"] = (None if accepted is None
                         else torch.as_tensor(accepted, dtype=torch.int32).to(device))
    cshape = (N, T, HV, V, K) if vk else (N, T, HV, K, V)
    x["state_cache"] = (torch.full(cshape, CACHE_SENTINEL, dtype=state_dtype, device=device)
                        if cache else None)
    return x


def fused_gate_inputs(N_T, HV, *, seed=1, a_dtype=torch.float32, device="cpu"):
    """(A_log [HV], a [*N_T, HV], dt_bias [HV]) with some a + dt_bias above softplus's 20."""
    gen = torch.Generator().manual_seed(seed)
    A_log = torch.randn(HV, generator=gen) - 2.0
    dt_bias = torch.randn(HV, generator=gen)
    a = 2.0 * torch.randn(*N_T, HV, generator=gen)
    a.view(-1)[::7] = 25.0  # the linear branch (x > 20)
    return A_log.to(device), a.to(device=device, dtype=a_dtype), dt_bias.to(device)


def fused_g(A_log, a, dt_bias):
    """The fused gate in fp64: g = -exp(A_log) * softplus(a + dt_bias) (torch's softplus)."""
    return -torch.exp(A_log.double().cpu()) * F.softplus(a.double().cpu() + dt_bias.double().cpu())


def verify_reference(x, *, scale=None, head_map="grouped", l2norm=False, vk=False):
    """(o [N, T, HV, V], new pool, cache [N, T, HV, ...]) in fp64, by T sequential steps.

    The pool gets the state after num_accepted[n] tokens (all T when None); padding rows: o zero,
    pool and cache untouched (the cache is returned as the sentinel there)."""
    q, k, v, g, beta = (x[n].cpu() for n in ("q", "k", "v", "g", "beta"))
    state = x["state"].cpu().double()
    idx = x["state_indices"].cpu().long()
    N, T, HV, V = v.shape
    K = q.shape[3]
    acc = (torch.full((N,), T, dtype=torch.long) if x.get("num_accepted") is None
           else x["num_accepted"].cpu().long())
    o = torch.zeros(N, T, HV, V, dtype=torch.float64)
    cshape = (N, T, HV, V, K) if vk else (N, T, HV, K, V)
    cache = torch.full(cshape, CACHE_SENTINEL, dtype=torch.float64)
    new = state.clone()
    for n in range(N):
        if idx[n] < 0:
            continue
        S = state[idx[n]][None]
        if vk:
            S = S.transpose(-1, -2)
        if acc[n] == 0:
            new[idx[n]] = state[idx[n]]
        for t in range(T):
            sl = slice(t, t + 1)
            o_t, S = reference(q[n:n + 1, sl], k[n:n + 1, sl], v[n:n + 1, sl], g[n:n + 1, sl],
                               beta[n:n + 1, sl], scale=scale, h0=S, head_map=head_map,
                               l2norm=l2norm)
            o[n, t] = o_t[0, 0]
            stored = S[0].transpose(-1, -2) if vk else S[0]
            cache[n, t] = stored
            if t + 1 == acc[n]:
                new[idx[n]] = stored
    return o, new, cache


def call(x, **kw):
    return gdn_torch.verify_step(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"],
                                 x["state_indices"], num_accepted=x.get("num_accepted"),
                                 state_cache=x.get("state_cache"), **kw)


CASES = {
    "N5_T4_S8_HK2_HV4_K64_acc": dict(N=5, T=4, S=8, HK=2, HV=4, K=64, V=64,
                                     indices=[3, -1, 0, 7, 5], accepted=[4, 2, 0, 1, 3]),
    "N3_T16_S3_HK1_HV2_K128_tiled": dict(N=3, T=16, S=3, HK=1, HV=2, K=128, V=128,
                                         head_map="tiled", accepted=[16, 9, 0]),
    "N4_T3_S6_HK2_HV4_K64_V128_l2norm_all": dict(N=4, T=3, S=6, HK=2, HV=4, K=64, V=128,
                                                 l2norm=True, indices=[5, 1, -1, 2]),
    "N2_T1_S4_HK2_HV2_K64_vk_scale": dict(N=2, T=1, S=4, HK=2, HV=2, K=64, V=64, vk=True,
                                          scale=0.3, accepted=[1, 0]),
    "N3_T5_S4_HK2_HV2_K64_vk_acc": dict(N=3, T=5, S=4, HK=2, HV=2, K=64, V=64, vk=True,
                                        indices=[-1, 3, 1], accepted=[5, 2, 5]),
}


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16], ids=["s32", "sbf16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_verify_matches_fp64_steps(device, case, dtype, state_dtype):
    c, opts = split_case(CASES[case])
    head_map, l2norm, vk, scale = opts["head_map"], opts["l2norm"], opts["vk"], opts["scale"]
    x = make_verify(**c, dtype=dtype, state_dtype=state_dtype, device=device, vk=vk)
    before = x["state"].clone()
    if rejects_vk_on_cuda(call, x, opts, device):
        return
    o_ref, s_ref, c_ref = verify_reference(x, scale=scale, head_map=head_map, l2norm=l2norm,
                                           vk=vk)
    o = call(x, scale=scale, use_qk_l2norm_in_kernel=l2norm, head_map=head_map,
             state_v_first=vk)
    assert o.dtype == dtype and o.shape == o_ref.shape and o.device.type == device
    # as test_decode.py, with T steps of bf16 state rounding (cache and pool rounded on store)
    tol = (8e-3 if dtype == torch.bfloat16 else 1e-5) + (1e-2 if state_dtype == torch.bfloat16
                                                         else 0.0)
    ctx = f"{case} {dtype} state {state_dtype} {device}"
    idx = x["state_indices"].cpu().long()
    live = idx >= 0
    lv = live.to(o.device)
    assert rel_rms(o[lv], o_ref[live]) <= tol, ctx
    assert rel_rms(x["state"], s_ref) <= tol, ctx
    assert rel_rms(x["state_cache"][lv], c_ref[live]) <= tol, ctx
    # padding rows: o zero, cache rows untouched; slots not indexed (or with 0 accepted): as before
    assert torch.equal(o[~lv].cpu(), torch.zeros_like(o[~lv].cpu())), ctx
    pad_cache = x["state_cache"][~lv].cpu()
    assert torch.equal(pad_cache, torch.full_like(pad_cache, CACHE_SENTINEL)), ctx
    untouched = torch.ones(x["state"].shape[0], dtype=torch.bool)
    acc = x["num_accepted"]
    for n in range(len(idx)):
        if idx[n] >= 0 and (acc is None or int(acc[n]) > 0):
            untouched[idx[n]] = False
    u = untouched.to(x["state"].device)
    assert torch.equal(x["state"][u].cpu(), before[u].cpu()), ctx


@pytest.mark.parametrize("device", DEVICES)
def test_verify_equals_sequential_decode_steps(device):
    """verify over T tokens with all accepted == T decode_step calls (fp32 pool)."""
    x = make_verify(4, 6, 7, 2, 4, 64, 64, device=device, indices=[6, 0, -1, 3], cache=False)
    y = {n: (t.clone() if t is not None else None) for n, t in x.items()}
    o = call(x)
    for t in range(6):
        o_t = gdn_torch.decode_step(y["q"][:, t], y["k"][:, t], y["v"][:, t], y["g"][:, t],
                                    y["beta"][:, t], y["state"], y["state_indices"])
        assert rel_rms(o[:, t], o_t) <= 1e-6
    assert rel_rms(x["state"], y["state"]) <= 1e-6
    # num_accepted = j commits what j decode steps commit; the cache holds every step's state
    z = make_verify(4, 6, 7, 2, 4, 64, 64, device=device, indices=[6, 0, -1, 3],
                    accepted=[2, 6, 3, 0])
    w = {n: (t.clone() if t is not None else None) for n, t in z.items()}
    call(z)
    for t in range(6):
        gdn_torch.decode_step(w["q"][:, t], w["k"][:, t], w["v"][:, t], w["g"][:, t],
                              w["beta"][:, t], w["state"], w["state_indices"])
        for n, (slot, acc) in enumerate(zip([6, 0, -1, 3], [2, 6, 3, 0])):
            if slot < 0:
                continue
            assert rel_rms(z["state_cache"][n, t], w["state"][slot]) <= 1e-6
            if t + 1 == acc:
                assert rel_rms(z["state"][slot], w["state"][slot]) <= 1e-6


@pytest.mark.parametrize("a_dtype", [torch.float32, torch.bfloat16], ids=["a32", "abf16"])
@pytest.mark.parametrize("op", ["decode", "verify"])
@pytest.mark.parametrize("device", DEVICES)
def test_fused_gate_and_sigmoid_beta(device, op, a_dtype):
    """A_log/a/dt_bias and beta logits give what precomputed g and sigmoid(beta) give, and both
    match the fp64 recurrence with the fp64 gate."""
    N, HV = 4, 4
    T = 3 if op == "verify" else 1
    mk = lambda: make_verify(N, T, 6, 2, HV, 64, 64, device=device,  # noqa: E731
                             indices=[5, -1, 0, 2], cache=op == "verify",
                             accepted=[3, 1, 2, 0] if op == "verify" else None)
    x, y, z = mk(), mk(), mk()  # fused, precomputed, reference (pre-call pool)
    lead = (N, T) if op == "verify" else (N,)
    A_log, a, dt_bias = fused_gate_inputs(lead, HV, a_dtype=a_dtype, device=device)
    logits = 4.0 * torch.randn(*lead, HV, generator=torch.Generator().manual_seed(5))
    g_pre = fused_g(A_log, a, dt_bias).float().to(device)
    beta_pre = torch.sigmoid(logits).to(device)
    tok = (lambda t: t) if op == "verify" else (lambda t: t[:, 0])  # noqa: E731
    if op == "verify":
        fn = gdn_torch.verify_step
        kx = dict(num_accepted=x["num_accepted"], state_cache=x["state_cache"])
        ky = dict(num_accepted=y["num_accepted"], state_cache=y["state_cache"])
    else:
        fn, kx, ky = gdn_torch.decode_step, {}, {}
    o_f = fn(tok(x["q"]), tok(x["k"]), tok(x["v"]), None, logits.to(device), x["state"],
             x["state_indices"], A_log=A_log, a=a, dt_bias=dt_bias, beta_is_logit=True, **kx)
    o_p = fn(tok(y["q"]), tok(y["k"]), tok(y["v"]), g_pre, beta_pre, y["state"],
             y["state_indices"], **ky)
    ctx = f"{op} {a_dtype} {device}"
    assert rel_rms(o_f, o_p) <= 1e-5, ctx
    assert rel_rms(x["state"], y["state"]) <= 1e-5, ctx
    if op == "verify":
        assert rel_rms(x["state_cache"], y["state_cache"]) <= 1e-5, ctx
    # against fp64 with the fp64 gate (a wrong gate or beta would not pass this)
    z["g"] = fused_g(A_log, a, dt_bias).reshape(N, T, HV)
    z["beta"] = torch.sigmoid(logits.double()).reshape(N, T, HV)
    o_ref, s_ref, c_ref = verify_reference(z)
    live = torch.tensor([True, False, True, True])
    o_cmp = o_f if op == "verify" else o_f[:, None]
    assert rel_rms(o_cmp[live.to(o_f.device)], o_ref[live]) <= 1e-5, ctx
    assert rel_rms(x["state"], s_ref) <= 1e-5, ctx
    if op == "verify":
        assert rel_rms(x["state_cache"][live.to(o_f.device)], c_ref[live]) <= 1e-5, ctx


def _vargs(**over):
    x = make_verify(3, 4, 4, 2, 4, 64, 64, indices=[0, 1, 2], accepted=[4, 0, 2])
    x.update(over)
    return x


@pytest.mark.parametrize("case,over,match", [
    ("T0", dict(q=torch.zeros(3, 0, 2, 64), k=torch.zeros(3, 0, 2, 64)), "T = 1..16"),
    ("T17", dict(q=torch.zeros(3, 17, 2, 64), k=torch.zeros(3, 17, 2, 64)), "T = 1..16"),
    ("q_rank", dict(q=torch.zeros(3, 2, 64), k=torch.zeros(3, 2, 64)), "q must have shape"),
    ("v_T", dict(v=torch.zeros(3, 3, 4, 64)), "v must have shape"),
    ("g_shape", dict(g=torch.zeros(3, 4, 3)), "g must have shape"),
    ("beta_shape", dict(beta=torch.zeros(3, 4)), "beta must have shape"),
    ("dtype_mix", dict(v=torch.zeros(3, 4, 4, 64, dtype=torch.bfloat16)), "share one dtype"),
    ("idx_range", dict(state_indices=torch.tensor([0, 4, 1], dtype=torch.int32)), "state_indices"),
    ("idx_dup", dict(state_indices=torch.tensor([1, 1, 2], dtype=torch.int32)), "state_indices"),
    ("idx_float", dict(state_indices=torch.tensor([0., 1., 2.])), "int32 or int64"),
    ("acc_range", dict(num_accepted=torch.tensor([4, 5, 0], dtype=torch.int32)), "num_accepted"),
    ("acc_negative", dict(num_accepted=torch.tensor([-1, 1, 0])), "num_accepted"),
    ("acc_shape", dict(num_accepted=torch.tensor([1, 1], dtype=torch.int32)), "num_accepted"),
    ("acc_float", dict(num_accepted=torch.tensor([1., 1., 1.])), "int32 or int64"),
    ("state_dtype", dict(state=torch.zeros(4, 4, 64, 64, dtype=torch.float16),
                         state_cache=None), "float32 or bf"),
    ("state_noncontig", dict(state=torch.zeros(4, 4, 64, 64).transpose(2, 3)), "contiguous"),
    ("cache_shape", dict(state_cache=torch.zeros(3, 3, 4, 64, 64)), "state_cache must have shape"),
    ("cache_dtype", dict(state_cache=torch.zeros(3, 4, 4, 64, 64, dtype=torch.bfloat16)),
     "pool's dtype"),
    ("cache_noncontig", dict(state_cache=torch.zeros(3, 4, 4, 64, 64).transpose(3, 4)),
     "contiguous"),
    ("cache_is_state", dict(state=torch.zeros(12, 4, 64, 64),
                            state_indices=torch.tensor([0, 5, 10], dtype=torch.int32)), "overlaps"),
])
def test_verify_bad_input_raises_value_error(case, over, match):
    x = _vargs(**over)
    if case == "cache_is_state":  # the cache aliases the pool: rejected by the library
        x["state_cache"] = x["state"].view(3, 4, 4, 64, 64)
    before = x["state"].clone()
    cache_before = x["state_cache"].clone() if x["state_cache"] is not None else None
    with pytest.raises(ValueError, match=match):
        call(x)
    assert torch.equal(x["state"], before), "state written despite the error"
    if cache_before is not None:
        assert torch.equal(x["state_cache"], cache_before), "cache written despite the error"


def test_gate_errors():
    x = _vargs()
    A_log, a, dt_bias = fused_gate_inputs((3, 4), 4)
    before = x["state"].clone()
    args = lambda g: (x["q"], x["k"], x["v"], g, x["beta"], x["state"], x["state_indices"])  # noqa: E731
    cases = [
        (dict(), None, "give g, or all of A_log"),
        (dict(A_log=A_log, a=a), None, "give g, or all of A_log"),
        (dict(A_log=A_log, a=a, dt_bias=dt_bias), x["g"], "not both"),
        (dict(dt_bias=dt_bias), x["g"], "not both"),
        (dict(A_log=A_log[:3], a=a, dt_bias=dt_bias), None, "A_log must have shape"),
        (dict(A_log=A_log, a=a[:, :2], dt_bias=dt_bias), None, "a must have shape"),
        (dict(A_log=A_log, a=a.int(), dt_bias=dt_bias), None, "floating-point"),
    ]
    for kw, g, match in cases:
        with pytest.raises(ValueError, match=match):
            gdn_torch.verify_step(*args(g), **kw)
    # decode_step: the same rules, a shaped [N, HV]
    d = {n: (t[:, 0] if t is not None and n in ("q", "k", "v", "g", "beta") else t)
         for n, t in x.items()}
    with pytest.raises(ValueError, match="a must have shape"):
        gdn_torch.decode_step(d["q"], d["k"], d["v"], None, d["beta"], d["state"],
                              d["state_indices"], A_log=A_log, a=a, dt_bias=dt_bias)
    with pytest.raises(ValueError, match="give g, or all"):
        gdn_torch.decode_step(d["q"], d["k"], d["v"], None, d["beta"], d["state"],
                              d["state_indices"])
    # the native op checks the same without the Python wrapper
    with pytest.raises(ValueError, match="give g, or all"):
        torch.ops.gdn.verify_step(*args(None), None, None, None, None, None, False,
                                  "grouped", False, None, None, None, False)
    with pytest.raises(ValueError, match="num_accepted_cpu given without"):
        gdn_torch.verify_step(*args(x["g"]), num_accepted_cpu=torch.tensor([1, 1, 1]))
    assert torch.equal(x["state"], before)


def test_verify_opcheck():
    x = make_verify(3, 4, 5, 2, 4, 64, 64, indices=[4, -1, 0], accepted=[2, 1, 4])
    A_log, a, dt_bias = fused_gate_inputs((3, 4), 4)
    base = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], x["state_indices"], None)
    tail = (None, False, "grouped", False)
    # with num_accepted and the cache (both mutated args), then with neither
    torch.library.opcheck(torch.ops.gdn.verify_step.default,
                          base + (x["num_accepted"], None, x["state_cache"]) + tail
                          + (None, None, None, False))
    torch.library.opcheck(torch.ops.gdn.verify_step.default,
                          base + (None, None, None) + tail + (None, None, None, False))
    # fused gate and sigmoid beta (g = None)
    fused = (x["q"], x["k"], x["v"], None) + base[4:]
    torch.library.opcheck(torch.ops.gdn.verify_step.default,
                          fused + (x["num_accepted"], None, x["state_cache"]) + tail
                          + (A_log, a, dt_bias, True))
    d = {n: (t[:, 0] if t is not None and n in ("q", "k", "v", "g", "beta") else t)
         for n, t in x.items()}
    torch.library.opcheck(torch.ops.gdn.decode_step.default,
                          (d["q"], d["k"], d["v"], None, d["beta"], d["state"],
                           d["state_indices"], None, None, False, "grouped", False,
                           A_log, a[:, 0], dt_bias, True))


@pytest.mark.parametrize("device", DEVICES)
def test_verify_torch_compile_fullgraph(device):
    x = make_verify(3, 4, 5, 2, 4, 64, 64, device=device, indices=[4, -1, 0], accepted=[2, 1, 4])
    y = {n: (t.clone() if t is not None else None) for n, t in x.items()}
    A_log, a, dt_bias = fused_gate_inputs((3, 4), 4, device=device)

    def step(q, k, v, beta, state, idx, acc, cache):
        o = gdn_torch.verify_step(q, k, v, None, beta, state, idx, num_accepted=acc,
                                  state_cache=cache, use_qk_l2norm_in_kernel=True, A_log=A_log,
                                  a=a, dt_bias=dt_bias, beta_is_logit=True)
        return o.float() * 2.0

    names = ("q", "k", "v", "beta", "state", "state_indices", "num_accepted", "state_cache")
    backend = "inductor" if device == "cuda" else "aot_eager"
    o_c = torch.compile(step, fullgraph=True, backend=backend)(*(x[n] for n in names))
    o_e = step(*(y[n] for n in names))
    assert torch.equal(o_c, o_e)
    assert torch.equal(x["state"], y["state"]), "the compiled call must mutate the pool in place"
    assert torch.equal(x["state_cache"], y["state_cache"]), "... and the state cache"


@pytest.mark.parametrize("device", DEVICES)
def test_decode_fused_gate_torch_compile_fullgraph(device):
    x = make_verify(3, 1, 5, 2, 4, 64, 64, device=device, indices=[4, -1, 0], cache=False)
    x = {n: (t[:, 0] if t is not None and n in ("q", "k", "v", "g", "beta") else t)
         for n, t in x.items()}
    y = {n: (t.clone() if t is not None else None) for n, t in x.items()}
    A_log, a, dt_bias = fused_gate_inputs((3,), 4, device=device)

    def step(q, k, v, beta, state, idx):
        return gdn_torch.decode_step(q, k, v, None, beta, state, idx, A_log=A_log, a=a,
                                     dt_bias=dt_bias, beta_is_logit=True)

    names = ("q", "k", "v", "beta", "state", "state_indices")
    backend = "inductor" if device == "cuda" else "aot_eager"
    o_c = torch.compile(step, fullgraph=True, backend=backend)(*(x[n] for n in names))
    o_e = step(*(y[n] for n in names))
    assert torch.equal(o_c, o_e) and torch.equal(x["state"], y["state"])


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
def test_verify_cuda_graph_capture():
    kw = dict(dtype=torch.bfloat16, device="cuda", indices=[9, -1, 0, 4, -1, 2],
              accepted=[3, 0, 4, 1, 2, 0])
    x = make_verify(6, 4, 10, 2, 4, 128, 128, **kw)
    pool0 = x["state"].clone()
    names = ("q", "k", "v", "g", "beta", "num_accepted")

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call(x)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_g = call(x)
    y = make_verify(6, 4, 10, 2, 4, 128, 128, seed=3, **kw)
    for n in names:
        x[n].copy_(y[n])
    x["state"].copy_(pool0)
    x["state_cache"].fill_(CACHE_SENTINEL)
    graph.replay()
    torch.cuda.synchronize()
    z = {n: x[n].clone() for n in names}
    z["state"], z["state_indices"] = pool0.clone(), x["state_indices"].clone()
    z["state_cache"] = torch.full_like(x["state_cache"], CACHE_SENTINEL)
    o_e = call(z)
    assert torch.equal(o_g, o_e) and torch.equal(x["state"], z["state"]), "replay differs"
    assert torch.equal(x["state_cache"], z["state_cache"]), "replay differs (cache)"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
def test_verify_cuda_index_checks():
    x = make_verify(3, 4, 4, 2, 4, 64, 64, device="cuda", indices=[0, 2, 1],
                    accepted=[1, 5, 2])
    before = x["state"].clone()
    cache0 = x["state_cache"].clone()
    # with host copies: a bad count is a ValueError before anything is written
    with pytest.raises(ValueError, match="num_accepted"):
        call(x, state_indices_cpu=x["state_indices"].cpu(),
             num_accepted_cpu=x["num_accepted"].cpu())
    assert torch.equal(x["state"], before) and torch.equal(x["state_cache"], cache0)
    # without: the kernel skips the sequence with the bad count (o zero, its slot untouched)
    o = call(x)
    torch.cuda.synchronize()
    assert torch.equal(o[1], torch.zeros_like(o[1]))
    assert torch.equal(x["state"][2], before[2])
    with pytest.raises(ValueError, match="num_accepted"):
        call(dict(x, num_accepted=x["num_accepted"].cpu()))  # must be on q's device


def test_verify_empty_batch():
    x = make_verify(0, 2, 3, 2, 4, 64, 64, indices=[])
    before = x["state"].clone()
    o = call(x)
    assert o.shape == (0, 2, 4, 64) and torch.equal(x["state"], before)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
def test_verify_current_stream_is_used():
    kw = dict(dtype=torch.bfloat16, device="cuda", indices=[3, -1, 0], accepted=[2, 0, 4])
    x, y = make_verify(3, 4, 5, 2, 4, 128, 128, **kw), make_verify(3, 4, 5, 2, 4, 128, 128, **kw)
    o_ref = call(y)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o = call(x)
        o2 = o * 1.0  # ordered after the op on the same stream
        c2 = x["state_cache"] * 1.0
    s.synchronize()
    assert torch.equal(o2, o_ref) and torch.equal(x["state"], y["state"])
    assert torch.equal(c2, y["state_cache"])
