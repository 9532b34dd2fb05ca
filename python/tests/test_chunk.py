"""gdn_torch.chunk_gated_delta_rule against the fp64 reference (DESIGN.md §1), on every arm this
machine can run: the cpu arm on CPU tensors always, the CUDA arms when a GPU is present."""
from __future__ import annotations

import math
import os

import pytest
import torch

import gdn_torch
from gdn_reference import bound, make_inputs, reference, rel_rms

HAS_CUDA = torch.cuda.is_available() and gdn_torch._C.cuda_built()
GPU_ARMS = ["serial", "wy-fp32", "wy-tc", "auto"]

# (device, arm) pairs: the cpu arm always; each CUDA arm when a GPU and a CUDA build are present.
DEVICE_ARMS = [pytest.param("cpu", "cpu", id="cpu")] + [
    pytest.param("cuda", arm, id=f"cuda-{arm}",
                 marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build"))
    for arm in GPU_ARMS
]


def check(what: str, x: torch.Tensor, ref: torch.Tensor, tol: float, ctx: str) -> float:
    """Asserts rel RMS(x, ref) <= tol; the message names the fixture, error, bound, utilisation,
    NaN count and the worst element."""
    err = rel_rms(x, ref)
    if not err <= tol:
        xd, rd = x.detach().double().cpu(), ref.double().cpu()
        diff = (xd - rd).abs().nan_to_num(math.inf)
        worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        nans = int((~torch.isfinite(xd)).sum())
        pytest.fail(f"{ctx}: {what} rel RMS {err:.3e} > bound {tol:.3e} "
                    f"(utilisation {err / tol:.2f}); NaN/Inf {nans}; worst at {worst}: "
                    f"got {xd[worst].item():.6g}, want {rd[worst].item():.6g}")
    return err


def run_case(device, arm, *, B=1, T=65, HK=2, HV=6, K=64, V=64, dtype=torch.float32, h0=True,
             cu=None, head_map="grouped", l2norm=False, decay="slow", scale=None, seed=0):
    N = len(cu) - 1 if cu is not None else B
    x = make_inputs(B, T, HK, HV, K, V, dtype=dtype, device=device, decay=decay, h0=h0, N=N,
                    l2norm_in_kernel=l2norm, seed=seed)
    cu_t = torch.tensor(cu, dtype=torch.long, device=device) if cu is not None else None
    o, hT = gdn_torch.chunk_gated_delta_rule(
        x["q"], x["k"], x["v"], x["g"], x["beta"], scale, x["initial_state"], True,
        cu_seqlens=cu_t, use_qk_l2norm_in_kernel=l2norm, head_map=head_map, arm=arm)
    o_ref, hT_ref = reference(x["q"].cpu(), x["k"].cpu(), x["v"].cpu(), x["g"].cpu(),
                              x["beta"].cpu(), scale=scale,
                              h0=x["initial_state"].cpu() if h0 else None, cu_seqlens=cu,
                              head_map=head_map, l2norm=l2norm)
    return o, hT, o_ref, hT_ref


FIXTURES = {
    # name: run_case kwargs; odd sizes on purpose (partial chunks, GVA ratios, empty sequences)
    "T65_HK2_HV6_K64_h0_grouped": dict(T=65, HK=2, HV=6, K=64, V=64),
    "T37_HK2_HV4_K128_tiled": dict(T=37, HK=2, HV=4, K=128, V=128, head_map="tiled", h0=False),
    "T64_HK2_HV4_K64_h0_tiled": dict(T=64, HK=2, HV=4, K=64, V=64, head_map="tiled"),
    "B2_T63_HK1_HV2_K64_l2norm_h0": dict(B=2, T=63, HK=1, HV=2, K=64, V=64, l2norm=True),
    "varlen_0_17_17_100_164_HK2_HV4_K64_h0": dict(T=164, HK=2, HV=4, K=64, V=64,
                                                  cu=[0, 17, 17, 100, 164]),
    "T200_HK4_HV8_K128_fastdecay": dict(T=200, HK=4, HV=8, K=128, V=128, decay="fast"),
    "T70_HK2_HV2_K64_extremedecay_h0": dict(T=70, HK=2, HV=2, K=64, V=64, decay="extreme"),
    "T1_HK1_HV1_K64_scale0.5": dict(T=1, HK=1, HV=1, K=64, V=64, scale=0.5),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("fixture", list(FIXTURES))
@pytest.mark.parametrize("device,arm", DEVICE_ARMS)
def test_matches_fp64_reference(device, arm, fixture, dtype):
    o, hT, o_ref, hT_ref = run_case(device, arm, dtype=dtype, **FIXTURES[fixture])
    ran = gdn_torch.last_arm()
    ctx = f"arm {arm} (ran {ran}), {fixture}, {dtype}, {device}"
    assert o.dtype == dtype and o.device.type == device, ctx
    assert hT.dtype == torch.float32 and hT.shape == hT_ref.shape, ctx
    tol = bound(dtype, ran)
    check("o", o, o_ref, tol, ctx)
    check("final state", hT, hT_ref, tol, ctx)


@pytest.mark.parametrize("device,arm", DEVICE_ARMS)
def test_negative_controls(device, arm):
    """The checks above can fail: a wrong head map and a 2.5x-bound perturbation both exceed the
    bound."""
    kw = dict(T=65, HK=2, HV=6, K=64, V=64)
    o, hT, o_ref, hT_ref = run_case(device, arm, **kw)
    tol = bound(torch.float32, gdn_torch.last_arm())
    assert rel_rms(o, o_ref) <= tol
    # grouped vs tiled differ for HK=2, HV=6 (head 1 reads key head 0 vs 1)
    o_t, hT_t, _, _ = run_case(device, arm, head_map="tiled", **kw)
    assert rel_rms(o_t, o_ref) > tol and rel_rms(hT_t, hT_ref) > tol
    # a perturbation of 2.5x the bound, in relative RMS, is caught
    noise = torch.randn(o_ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bad = o_ref + 2.5 * tol * o_ref.norm() * noise / noise.norm()
    assert rel_rms(bad, o_ref) > tol
    nan_o = o.clone()
    nan_o.view(-1)[7] = float("nan")
    assert rel_rms(nan_o, o_ref) == math.inf


@pytest.mark.parametrize("device,arm", DEVICE_ARMS)
def test_fla_defaults_and_dtypes(device, arm):
    x = make_inputs(1, 40, 2, 4, 64, 64, dtype=torch.bfloat16, device=device, h0=True)
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"])
    o1, hT1 = gdn_torch.chunk_gated_delta_rule(*args, None, x["initial_state"], True, arm=arm)
    o2, hT2 = gdn_torch.chunk_gated_delta_rule(*args, 64**-0.5, x["initial_state"], True, arm=arm)
    assert torch.equal(o1, o2) and torch.equal(hT1, hT2), "scale=None must mean K^-1/2"
    # initial state in bf16 is read as fp32 (fla does the same); g in bf16 likewise
    h0_bf = x["initial_state"].bfloat16()
    o3, _ = gdn_torch.chunk_gated_delta_rule(*args, None, h0_bf, False, arm=arm)
    o4, _ = gdn_torch.chunk_gated_delta_rule(*args, None, h0_bf.float(), False, arm=arm)
    assert torch.equal(o3, o4)
    g_bf = x["g"].bfloat16()
    o5, _ = gdn_torch.chunk_gated_delta_rule(*args[:3], g_bf, args[4], arm=arm)
    o6, _ = gdn_torch.chunk_gated_delta_rule(*args[:3], g_bf.float(), args[4], arm=arm)
    assert torch.equal(o5, o6)
    # no final state unless asked; o in q's dtype
    o, hT = gdn_torch.chunk_gated_delta_rule(*args)
    assert hT is None and o.dtype == torch.bfloat16 and o.shape == (1, 40, 4, 64)
    # non-contiguous inputs (a transposed-then-sliced view) give the same result as contiguous
    qn = x["q"].transpose(1, 2).contiguous().transpose(1, 2)
    assert not qn.is_contiguous()
    o7, _ = gdn_torch.chunk_gated_delta_rule(qn, *args[1:], arm=arm)
    o8, _ = gdn_torch.chunk_gated_delta_rule(*args, arm=arm)
    assert torch.equal(o7, o8)


def test_empty_sequence_keeps_initial_state():
    x = make_inputs(1, 10, 1, 2, 64, 64, h0=True, N=3)
    cu = torch.tensor([0, 0, 10, 10])
    o, hT = gdn_torch.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], None,
                                             x["initial_state"], True, cu_seqlens=cu)
    assert torch.equal(hT[0], x["initial_state"][0]) and torch.equal(hT[2], x["initial_state"][2])
    assert not torch.equal(hT[1], x["initial_state"][1])


def _args(**over):
    x = make_inputs(1, 8, 2, 4, 64, 64)
    a = dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=x["beta"])
    a.update(over)
    return a


@pytest.mark.parametrize("case,over,kw,match", [
    ("q_rank3", dict(q=torch.zeros(8, 2, 64)), {}, "q must have shape"),
    ("k_shape", dict(k=torch.zeros(1, 8, 3, 64)), {}, "k must have q's shape"),
    ("v_T", dict(v=torch.zeros(1, 9, 4, 64)), {}, "v must have shape"),
    ("g_shape", dict(g=torch.zeros(1, 8, 3)), {}, "g must have shape"),
    ("gva_ratio", dict(v=torch.zeros(1, 8, 3, 64), g=torch.zeros(1, 8, 3),
                       beta=torch.zeros(1, 8, 3)), {}, "multiple of H"),
    ("dtype_mix", dict(v=torch.zeros(1, 8, 4, 64, dtype=torch.bfloat16)), {}, "share one dtype"),
    ("dtype_f64", dict(q=torch.zeros(1, 8, 2, 64, dtype=torch.float64)), {}, "not supported"),
    ("g_int", dict(g=torch.zeros(1, 8, 4, dtype=torch.int32)), {}, "floating-point"),
    ("cu_batch2", dict(q=torch.zeros(2, 8, 2, 64), k=torch.zeros(2, 8, 2, 64),
                       v=torch.zeros(2, 8, 4, 64), g=torch.zeros(2, 8, 4),
                       beta=torch.zeros(2, 8, 4)),
     dict(cu_seqlens=torch.tensor([0, 8, 16])), "batch size must be 1"),
    ("cu_end", {}, dict(cu_seqlens=torch.tensor([0, 3, 7])), "cu_seqlens"),
    ("cu_monotone", {}, dict(cu_seqlens=torch.tensor([0, 5, 3, 8])), "monotone"),
    ("cu_start", {}, dict(cu_seqlens=torch.tensor([1, 8])), "cu_seqlens\\[0\\]"),
    ("h0_N", {}, dict(initial_state=torch.zeros(2, 4, 64, 64)), "initial_state must have shape"),
    ("head_map", {}, dict(head_map="interleaved"), "head_map"),
    ("arm", {}, dict(arm="fastest"), "arm must be one of"),
    ("scale_neg", {}, dict(scale=-1.0), "scale"),
])
def test_bad_input_raises_value_error(case, over, kw, match):
    with pytest.raises(ValueError, match=match):
        gdn_torch.chunk_gated_delta_rule(**_args(**over), **kw)


def test_bad_values_rejected_on_cpu():
    # The CPU path scans values (check_values): g > 0 and beta outside [0, 1] are errors.
    a = _args()
    with pytest.raises(ValueError, match="g"):
        gdn_torch.chunk_gated_delta_rule(**dict(a, g=a["g"] + 1.0), arm="cpu")
    with pytest.raises(ValueError, match="beta"):
        gdn_torch.chunk_gated_delta_rule(**dict(a, beta=a["beta"] + 2.0), arm="cpu")


def test_opcheck():
    """Schema, fake kernel and dispatch registrations agree (torch.library.opcheck)."""
    x = make_inputs(1, 33, 2, 4, 64, 64, h0=True)
    for cu, out in ((None, True), (torch.tensor([0, 13, 33]), True), (None, False)):
        h0 = x["initial_state"] if cu is None else torch.cat([x["initial_state"]] * 2)
        args = (x["q"], x["k"], x["v"], x["g"], x["beta"], None, h0, out, cu, None, False,
                "grouped", False, "auto")
        torch.library.opcheck(torch.ops.gdn.chunk_gated_delta_rule.default, args)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAS_CUDA, reason="needs a CUDA device and build"))])
def test_torch_compile_fullgraph(device):
    x = make_inputs(2, 50, 2, 4, 64, 64, dtype=torch.bfloat16, device=device, h0=True)

    def layer(q, k, v, g, beta, h0):
        o, hT = gdn_torch.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True,
                                                 use_qk_l2norm_in_kernel=True)
        return o.float() * 2.0, hT

    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], x["initial_state"])
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(layer, fullgraph=True, backend=backend)
    o_c, hT_c = compiled(*args)
    o_e, hT_e = layer(*args)
    assert torch.equal(o_c, o_e) and torch.equal(hT_c, hT_e)


# How the sequences reach the op: B2 (fixed length, offsets built on the device), B1 (one
# sequence), varlen_cpu_offsets (CUDA cu_seqlens plus its host copy), varlen_host_only (cu_seqlens
# as a CPU tensor: the library copies it by value in kernel parameters).
CAPTURE_OFFSETS = ["B2", "B1", "varlen_cpu_offsets", "varlen_host_only"]
# Every GPU arm builds its chunk table on the device (src/cuda/common/chunk_table.cuh), so every
# arm is captured. GDN_TEST_WYTC_CAPTURE=0 skips the wy-tc cases (a captured pageable copy would
# replay from freed host memory and poison the CUDA context for the rest of the process).
WYTC_CAPTURE_SAFE = os.environ.get("GDN_TEST_WYTC_CAPTURE", "1") == "1"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
@pytest.mark.parametrize("arm", GPU_ARMS)
@pytest.mark.parametrize("offsets", CAPTURE_OFFSETS)
def test_cuda_graph_capture(offsets, arm):
    varlen = offsets.startswith("varlen")
    B = 2 if offsets == "B2" else 1
    x = make_inputs(B, 130, 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda", h0=True,
                    N=3 if varlen else None)
    kw = dict(arm=arm)
    if varlen:
        cpu = torch.tensor([0, 40, 40, 130])
        kw.update(dict(cu_seqlens=cpu.cuda(), cu_seqlens_cpu=cpu) if offsets == "varlen_cpu_offsets"
                  else dict(cu_seqlens=cpu))
    static = [x[n].clone() for n in ("q", "k", "v", "g", "beta", "initial_state")]

    def step():
        return gdn_torch.chunk_gated_delta_rule(*static[:5], None, static[5], True, **kw)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    if gdn_torch.last_arm() == "wy-tc" and not WYTC_CAPTURE_SAFE:
        pytest.skip("wy-tc uploads a host-built table pageably (see WYTC_CAPTURE_SAFE)")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_g, hT_g = step()
    y = make_inputs(B, 130, 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda", h0=True,
                    N=3 if varlen else None, seed=5)
    for dst, n in zip(static, ("q", "k", "v", "g", "beta", "initial_state")):
        dst.copy_(y[n])
    graph.replay()
    torch.cuda.synchronize()
    o_e, hT_e = gdn_torch.chunk_gated_delta_rule(*static[:5], None, static[5], True, **kw)
    assert torch.equal(o_g, o_e) and torch.equal(hT_g, hT_e), "replay differs from eager"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
def test_cuda_graph_capture_device_offsets_need_host_copy():
    """CUDA cu_seqlens without cu_seqlens_cpu would be read back (a sync): under capture the op
    says so with a ValueError instead of a CUDA error from inside the capture."""
    x = make_inputs(1, 130, 2, 4, 64, 64, dtype=torch.bfloat16, device="cuda", N=3)
    cu = torch.tensor([0, 40, 40, 130], device="cuda")
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"])
    gdn_torch.chunk_gated_delta_rule(*args, cu_seqlens=cu)  # eager: fine (one sync)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="cu_seqlens_cpu"):
        with torch.cuda.graph(graph):
            gdn_torch.chunk_gated_delta_rule(*args, cu_seqlens=cu)


def test_wrappers_trace_without_calling_into_the_extension():
    """torch.compile(fullgraph=True) failed on CUDA inputs because the wrapper called the pybind11
    function _C.cuda_built() on the traced path (reached only when q.is_cuda): Dynamo cannot
    trace into it and fullgraph turns that graph break into an error. The wrapper now reads a
    module constant. This checks the mechanism on CPU: the old call fails to trace, the constant
    traces."""
    from gdn_torch import _ops

    def old(x):
        return x * 2 if gdn_torch._C.cuda_built() or True else x

    def new(x):
        return x * 2 if _ops._CUDA_BUILT or True else x

    x = torch.ones(3)
    assert torch.equal(torch.compile(new, fullgraph=True, backend="eager")(x), x * 2)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="(?i)graph break|unsupported|skip|not.*trace"):
        torch.compile(old, fullgraph=True, backend="eager")(x)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
def test_current_stream_is_used():
    x = make_inputs(1, 300, 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda", h0=True)
    ref_o, ref_hT = gdn_torch.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"],
                                                     None, x["initial_state"], True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o, hT = gdn_torch.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], None,
                                                 x["initial_state"], True)
        o2 = o * 1.0  # ordered after the op on the same stream
    s.synchronize()
    assert torch.equal(o2, ref_o) and torch.equal(hT, ref_hT)


def test_workspace_cpu():
    """Host tensors need no workspace (0 bytes); a workspace on a CPU call is an error."""
    a = _args()
    assert gdn_torch.prefill_workspace_bytes(**a, arm="cpu") == 0
    with pytest.raises(ValueError, match="on_device=false"):
        gdn_torch.chunk_gated_delta_rule(**a, workspace=torch.empty(1024, dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        gdn_torch.chunk_gated_delta_rule(**a, workspace=torch.empty(16, dtype=torch.float32))


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
@pytest.mark.parametrize("arm", GPU_ARMS)
def test_workspace_cuda(arm):
    """A caller's workspace of exactly prefill_workspace_bytes(): same bits as the pool path; one
    byte short or misaligned is a ValueError; captured into a CUDA graph with a static buffer."""
    x = make_inputs(1, 130, 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda", h0=True, N=3)
    cpu = torch.tensor([0, 40, 40, 130])
    kw = dict(arm=arm, cu_seqlens=cpu.cuda(), cu_seqlens_cpu=cpu)
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"], None, x["initial_state"], True)
    n = gdn_torch.prefill_workspace_bytes(*args, **kw)
    # The serial arm needs none when the offsets are on the device and values are not scanned
    # (r29: 0 bytes); the WY arms always need their chunk workspace.
    assert n == 0 if arm == "serial" else n > 0
    m = max(n, 256)  # a workspace larger than needed is allowed
    ref_o, ref_hT = gdn_torch.chunk_gated_delta_rule(*args, **kw)
    ws = torch.empty(m + 256, dtype=torch.uint8, device="cuda")
    o, hT = gdn_torch.chunk_gated_delta_rule(*args, **kw, workspace=ws[:m])
    assert torch.equal(o, ref_o) and torch.equal(hT, ref_hT)
    if n > 0:
        with pytest.raises(ValueError, match="too small"):
            gdn_torch.chunk_gated_delta_rule(*args, **kw, workspace=ws[:n - 1])
    with pytest.raises(ValueError, match="aligned"):
        gdn_torch.chunk_gated_delta_rule(*args, **kw, workspace=ws[128:128 + m])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        gdn_torch.chunk_gated_delta_rule(*args, **kw, workspace=ws[:m])  # warm-up
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_g, hT_g = gdn_torch.chunk_gated_delta_rule(*args, **kw, workspace=ws[:m])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(o_g, ref_o) and torch.equal(hT_g, ref_hT)
