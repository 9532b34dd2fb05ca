"""gdn_torch.decode_step (one token per sequence over a state pool, in place) against the fp64
recurrence with T = 1 (DESIGN.md §1), padding slots, errors, opcheck, torch.compile and CUDA-graph
capture. CPU cases always run; CUDA cases skip without a GPU and a CUDA build."""
from __future__ import annotations

import pytest
import torch

import gdn_torch
from gdn_reference import reference, rejects_vk_on_cuda, rel_rms, split_case

HAS_CUDA = torch.cuda.is_available() and gdn_torch._C.cuda_built()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="needs a CUDA device and build"))]


def make_decode(N, S, HK, HV, K, V, *, dtype=torch.float32, state_dtype=torch.float32,
                device="cpu", indices=None, vk=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(N, HK, K, generator=gen)
    k = torch.randn(N, HK, K, generator=gen) / K**0.5
    v = torch.randn(N, HV, V, generator=gen)
    g = -0.1 * torch.rand(N, HV, generator=gen)
    beta = torch.rand(N, HV, generator=gen)
    shape = (S, HV, V, K) if vk else (S, HV, K, V)
    state = 0.1 * torch.randn(*shape, generator=gen)
    if indices is None:
        indices = torch.randperm(S, generator=gen)[:N]
    idx = torch.as_tensor(indices, dtype=torch.int32)
    cast = lambda x: x.to(device=device, dtype=dtype)  # noqa: E731
    return dict(q=cast(q), k=cast(k), v=cast(v), g=g.to(device), beta=beta.to(device),
                state=state.to(device=device, dtype=state_dtype), state_indices=idx.to(device))


def decode_reference(x, *, scale=None, head_map="grouped", l2norm=False, vk=False):
    """(o [N, HV, V], new state pool [S, ...]) in fp64; padding rows: o zero, state unchanged."""
    q, k, v, g, beta = (x[n].cpu() for n in ("q", "k", "v", "g", "beta"))
    state = x["state"].cpu().double()
    idx = x["state_indices"].cpu().long()
    N, HV, V = v.shape
    K = q.shape[2]
    live = (idx >= 0).nonzero().flatten()
    o = torch.zeros(N, HV, V, dtype=torch.float64)
    new = state.clone()
    if len(live) == 0:
        return o, new
    h0 = state[idx[live]]
    if vk:
        h0 = h0.transpose(-1, -2)
    o_l, hT = reference(q[live][:, None], k[live][:, None], v[live][:, None], g[live][:, None],
                        beta[live][:, None], scale=scale, h0=h0, head_map=head_map,
                        l2norm=l2norm)
    o[live] = o_l[:, 0]
    new[idx[live]] = hT.transpose(-1, -2) if vk else hT
    return o, new


def call(x, **kw):
    return gdn_torch.decode_step(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"],
                                 x["state_indices"], **kw)


CASES = {
    "N5_S8_HK2_HV4_K64": dict(N=5, S=8, HK=2, HV=4, K=64, V=64, indices=[3, -1, 0, 7, -1]),
    "N3_S3_HK1_HV2_K128_tiled": dict(N=3, S=3, HK=1, HV=2, K=128, V=128, head_map="tiled"),
    "N4_S6_HK2_HV4_K64_V128_l2norm": dict(N=4, S=6, HK=2, HV=4, K=64, V=128, l2norm=True,
                                          indices=[5, 1, -1, 2]),
    "N2_S4_HK2_HV2_K64_vk_scale": dict(N=2, S=4, HK=2, HV=2, K=64, V=64, vk=True, scale=0.3),
}


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16], ids=["s32", "sbf16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_matches_fp64_recurrence(device, case, dtype, state_dtype):
    c, opts = split_case(CASES[case])
    head_map, l2norm, vk, scale = opts["head_map"], opts["l2norm"], opts["vk"], opts["scale"]
    x = make_decode(**c, dtype=dtype, state_dtype=state_dtype, device=device, vk=vk)
    before = x["state"].clone()
    if rejects_vk_on_cuda(call, x, opts, device):
        return
    o_ref, s_ref = decode_reference(x, scale=scale, head_map=head_map, l2norm=l2norm, vk=vk)
    o = call(x, scale=scale, use_qk_l2norm_in_kernel=l2norm, head_map=head_map, state_v_first=vk)
    assert o.dtype == dtype and o.shape == o_ref.shape and o.device.type == device
    # bf16 io: q/k/v are exact inputs, o is rounded once (2^-8); bf16 state: rounded on store
    tol = (8e-3 if dtype == torch.bfloat16 else 1e-5) + (8e-3 if state_dtype == torch.bfloat16
                                                         else 0.0)
    ctx = f"{case} {dtype} state {state_dtype} {device}"
    idx = x["state_indices"].cpu().long()
    live = idx >= 0
    assert rel_rms(o[live.to(o.device)], o_ref[live]) <= tol, ctx
    assert rel_rms(x["state"], s_ref) <= tol, ctx
    # padding rows: o zero; slots not indexed: bitwise untouched
    assert torch.equal(o[~live.to(o.device)].cpu(), torch.zeros_like(o[~live.to(o.device)].cpu()))
    untouched = torch.ones(x["state"].shape[0], dtype=torch.bool)
    untouched[idx[live]] = False
    assert torch.equal(x["state"][untouched.to(x["state"].device)].cpu(),
                       before[untouched.to(before.device)].cpu()), ctx


@pytest.mark.parametrize("device", DEVICES)
def test_negative_control_and_rank4(device):
    x = make_decode(4, 6, 2, 4, 64, 64, device=device, indices=[0, 1, 2, 3])
    x_t = {n: t.clone() for n, t in x.items()}
    o_ref, s_ref = decode_reference(x)
    o = call(x)
    assert rel_rms(o, o_ref) <= 1e-5
    # a wrong head map is caught (HK=2, HV=4: grouped and tiled differ)
    o_t = call(x_t, head_map="tiled")
    assert rel_rms(o_t, o_ref) > 1e-5 and rel_rms(x_t["state"], s_ref) > 1e-5
    # fla's [N, 1, H, K] shapes give the same o, shaped [N, 1, HV, V]
    y = make_decode(4, 6, 2, 4, 64, 64, device=device, indices=[0, 1, 2, 3])
    o4 = gdn_torch.decode_step(y["q"][:, None], y["k"][:, None], y["v"][:, None],
                               y["g"][:, None], y["beta"][:, None], y["state"], y["state_indices"])
    assert o4.shape == (4, 1, 4, 64) and torch.equal(o4[:, 0], o)
    assert torch.equal(y["state"], x["state"])


def _dargs(**over):
    x = make_decode(3, 4, 2, 4, 64, 64, indices=[0, 1, 2])
    x.update(over)
    return x


@pytest.mark.parametrize("case,over,match", [
    ("idx_range", dict(state_indices=torch.tensor([0, 4, 1], dtype=torch.int32)), "state_indices"),
    ("idx_dup", dict(state_indices=torch.tensor([1, 1, 2], dtype=torch.int32)), "state_indices"),
    ("idx_shape", dict(state_indices=torch.tensor([0, 1], dtype=torch.int32)), "state_indices"),
    ("idx_float", dict(state_indices=torch.tensor([0., 1., 2.])), "int32 or int64"),
    ("state_dtype", dict(state=torch.zeros(4, 4, 64, 64, dtype=torch.float16)), "float32 or bf"),
    ("state_shape", dict(state=torch.zeros(4, 4, 64, 32)), "state must have shape"),
    ("state_noncontig", dict(state=torch.zeros(4, 4, 64, 64).transpose(2, 3)), "contiguous"),
    ("q_rank", dict(q=torch.zeros(3, 2, 1, 64)), "one token per sequence"),
    ("v_N", dict(v=torch.zeros(2, 4, 64)), "v must have shape"),
    ("g_shape", dict(g=torch.zeros(3, 3)), "g must have shape"),
    ("dtype_mix", dict(v=torch.zeros(3, 4, 64, dtype=torch.bfloat16)), "share one dtype"),
])
def test_decode_bad_input_raises_value_error(case, over, match):
    x = _dargs(**over)
    before = x["state"].clone()
    with pytest.raises(ValueError, match=match):
        call(x)
    assert torch.equal(x["state"], before), "state written despite the error"


def test_decode_opcheck():
    x = make_decode(3, 5, 2, 4, 64, 64, indices=[4, -1, 0])
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], x["state_indices"], None,
            None, False, "grouped", False)
    torch.library.opcheck(torch.ops.gdn.decode_step.default, args)


@pytest.mark.parametrize("device", DEVICES)
def test_decode_torch_compile_fullgraph(device):
    x = make_decode(3, 5, 2, 4, 64, 64, device=device, indices=[4, -1, 0])
    y = {n: t.clone() for n, t in x.items()}

    def step(q, k, v, g, beta, state, idx):
        o = gdn_torch.decode_step(q, k, v, g, beta, state, idx, use_qk_l2norm_in_kernel=True)
        return o.float() * 2.0

    names = ("q", "k", "v", "g", "beta", "state", "state_indices")
    backend = "inductor" if device == "cuda" else "aot_eager"
    o_c = torch.compile(step, fullgraph=True, backend=backend)(*(x[n] for n in names))
    o_e = step(*(y[n] for n in names))
    assert torch.equal(o_c, o_e)
    assert torch.equal(x["state"], y["state"]), "the compiled call must mutate the pool in place"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
def test_decode_cuda_graph_capture():
    x = make_decode(6, 10, 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda",
                    indices=[9, -1, 0, 4, -1, 2])
    pool0 = x["state"].clone()
    names = ("q", "k", "v", "g", "beta")

    def step():
        return call(x)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_g = step()
    # new inputs and a reset pool, then replay; eager on a copy of the same pool
    y = make_decode(6, 10, 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda",
                    indices=[9, -1, 0, 4, -1, 2], seed=3)
    for n in names:
        x[n].copy_(y[n])
    x["state"].copy_(pool0)
    graph.replay()
    torch.cuda.synchronize()
    z = {n: x[n].clone() for n in names}
    z["state"], z["state_indices"] = pool0.clone(), x["state_indices"].clone()
    o_e = call(z)
    assert torch.equal(o_g, o_e) and torch.equal(x["state"], z["state"]), "replay differs"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
def test_decode_cuda_index_checks():
    x = make_decode(3, 4, 2, 4, 64, 64, device="cuda", indices=[0, 9, 1])
    before = x["state"].clone()
    # with a host copy: a bad index is a ValueError before anything is written
    with pytest.raises(ValueError, match="state_indices"):
        call(x, state_indices_cpu=x["state_indices"].cpu())
    assert torch.equal(x["state"], before)
    # without: the kernel skips the out-of-range row (o zero, pool untouched there)
    o = call(x)
    torch.cuda.synchronize()
    assert torch.equal(o[1], torch.zeros_like(o[1]))
    assert torch.equal(x["state"][2:], before[2:])
    with pytest.raises(ValueError, match="state_indices"):
        call(dict(x, state_indices=x["state_indices"].cpu()))  # indices must be on q's device
