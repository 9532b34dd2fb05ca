"""gdn_torch.Layer (the whole GDN layer on the GPU) against an fp64 torch transcription of the
layer oracle (src/ref/layer_ref.cpp), with the bounds of tests/gpu/test_layer.cpp. The weight and
config helpers run everywhere; the layer itself needs a CUDA device and build."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gdn_torch
from gdn_reference import reference, rel_rms

HAS_CUDA = torch.cuda.is_available() and gdn_torch._C.cuda_built()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and build")
BOUND_Y, BOUND_SSM, BOUND_CONV = 2e-2, 2e-2, 7.8e-3  # tests/gpu/test_layer.cpp


def layer_reference(cfg, w, x, cu, conv0, ssm0):
    """y [T, hidden], conv [N, KW-1, CD], ssm [N, HV, K, V], all fp64 (layer_ref.cpp in torch)."""
    HK, HV, K, V, KW = cfg["HK"], cfg["HV"], cfg["K"], cfg["V"], cfg["conv_kernel"]
    CD, VD = cfg["conv_dim"], cfg["value_dim"]
    xd = x.double().cpu()
    W = {n: t.double() for n, t in w.items()}
    mixed, z = xd @ W["w_qkv"].T, xd @ W["w_z"].T
    b, a = xd @ W["w_b"].T, xd @ W["w_a"].T
    N, T = len(cu) - 1, cu[-1]
    qkv = torch.zeros(T, CD, dtype=torch.float64)
    conv = conv0.double().clone()
    for n in range(N):
        t0, L = cu[n], cu[n + 1] - cu[n]
        inp = torch.cat([conv0[n].double(), mixed[t0:t0 + L]])  # [KW-1+L, CD]
        for p in range(L):
            s = (W["conv_w"].T * inp[p:p + KW]).sum(0)
            qkv[t0 + p] = F.silu(s)
        conv[n] = inp[L:L + KW - 1]
    q = qkv[:, :HK * K].reshape(1, T, HK, K)
    k = qkv[:, HK * K:2 * HK * K].reshape(1, T, HK, K)
    v = qkv[:, 2 * HK * K:].reshape(1, T, HV, V)
    beta = torch.sigmoid(b).reshape(1, T, HV)
    g = (-torch.exp(W["A_log"]) * F.softplus(a + W["dt_bias"])).reshape(1, T, HV)
    o, ssm = reference(q, k, v, g, beta, h0=ssm0.double(), cu_seqlens=cu, l2norm=True)
    o = o.reshape(T, HV, V)
    o = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + cfg["eps"]) * W["norm_w"]
    o = o * F.silu(z.reshape(T, HV, V))
    return o.reshape(T, VD) @ W["w_out"].T, conv, ssm


def test_layer_config_and_weights():
    cfg = gdn_torch.layer_config("tiny")
    w = gdn_torch.layer_weights("tiny", seed=1)
    H, CD, VD, HV = cfg["hidden"], cfg["conv_dim"], cfg["value_dim"], cfg["HV"]
    want = {"w_qkv": (CD, H), "w_z": (VD, H), "w_b": (HV, H), "w_a": (HV, H),
            "conv_w": (CD, cfg["conv_kernel"]), "A_log": (HV,), "dt_bias": (HV,),
            "norm_w": (cfg["V"],), "w_out": (H, VD)}
    assert {n: tuple(t.shape) for n, t in w.items()} == want
    assert w["w_qkv"].dtype == torch.bfloat16 and w["A_log"].dtype == torch.float32
    assert torch.equal(w["w_qkv"], gdn_torch.layer_weights("tiny", seed=1)["w_qkv"])
    assert not torch.equal(w["w_qkv"], gdn_torch.layer_weights("tiny", seed=2)["w_qkv"])
    with pytest.raises(ValueError, match="neither a preset"):
        gdn_torch.layer_config("no-such-model")


@pytest.mark.skipif(HAS_CUDA or gdn_torch._C.cuda_built(), reason="CPU-only build")
def test_layer_needs_cuda_build():
    with pytest.raises(RuntimeError, match="CUDA build"):
        gdn_torch.Layer("tiny")


def _random_states(cfg, N, seed):
    gen = torch.Generator().manual_seed(seed)
    conv = torch.randn(N, cfg["conv_kernel"] - 1, cfg["conv_dim"], generator=gen)
    conv = conv.bfloat16().float()  # the GPU keeps the conv state in bf16
    ssm = 0.05 * torch.randn(N, cfg["HV"], cfg["K"], cfg["V"], generator=gen)
    return conv, ssm


@needs_cuda
@pytest.mark.parametrize("arm", ["auto", "serial", "wy-fp32", "wy-tc"])
def test_layer_prefill_matches_reference(arm):
    cfg = gdn_torch.layer_config("tiny")
    w = gdn_torch.layer_weights("tiny", seed=11)
    lens = [37, 0, 70]
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    N, T = len(lens), cu[-1]
    slots = [N - n for n in range(N)]  # distinct, reversed
    layer = gdn_torch.Layer("tiny", weights=w, slots=N + 1)
    conv0, ssm0 = _random_states(cfg, N, 12)
    for n in range(N):
        layer.set_state(slots[n], conv0[n], ssm0[n])
    x = torch.randn(T, cfg["hidden"], generator=torch.Generator().manual_seed(13)).bfloat16()
    y = layer.prefill(x.cuda(), cu, slots, arm=arm)
    torch.cuda.synchronize()
    y_ref, conv_ref, ssm_ref = layer_reference(cfg, w, x, cu, conv0, ssm0)
    ctx = f"arm {arm} (ran {gdn_torch.last_arm()})"
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert rel_rms(y, y_ref) <= BOUND_Y, ctx
    for n in range(N):
        conv, ssm = layer.get_state(slots[n])
        assert rel_rms(conv, conv_ref[n]) <= BOUND_CONV, f"{ctx} seq {n} conv"
        assert rel_rms(ssm, ssm_ref[n]) <= BOUND_SSM, f"{ctx} seq {n} ssm"


@needs_cuda
def test_layer_prefill_then_decode_matches_reference():
    cfg = gdn_torch.layer_config("tiny")
    layer = gdn_torch.Layer("tiny", seed=21, slots=3)
    w = gdn_torch.layer_weights("tiny", seed=21)  # the weights Layer(seed=21) synthesized
    gen = torch.Generator().manual_seed(22)
    T0, steps = 45, 4
    x = torch.randn(T0 + steps, cfg["hidden"], generator=gen).bfloat16()
    ys = [layer.prefill(x[:T0].cuda(), [0, T0], [2])]
    for t in range(T0, T0 + steps):
        ys.append(layer.decode(x[t:t + 1].cuda(), [2]))
    y = torch.cat(ys)
    conv0 = torch.zeros(1, cfg["conv_kernel"] - 1, cfg["conv_dim"])
    ssm0 = torch.zeros(1, cfg["HV"], cfg["K"], cfg["V"])
    y_ref, _, ssm_ref = layer_reference(cfg, w, x, [0, T0 + steps], conv0, ssm0)
    assert rel_rms(y, y_ref) <= BOUND_Y
    assert rel_rms(layer.get_state(2)[1], ssm_ref[0]) <= BOUND_SSM


@needs_cuda
def test_layer_bad_input():
    layer = gdn_torch.Layer("tiny", slots=2)
    H = layer.config["hidden"]
    x = torch.zeros(8, H, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer.prefill(x, [0, 7], [0])
    with pytest.raises(ValueError, match="slot"):
        layer.prefill(x, [0, 8], [5])
    with pytest.raises(ValueError, match="bfloat16"):
        layer.prefill(x.float(), [0, 8], [0])
    with pytest.raises(ValueError, match="hidden"):
        layer.prefill(x[:, :-1].contiguous(), [0, 8], [0])
