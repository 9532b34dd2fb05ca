"""Same inputs through gdn_torch and flash-linear-attention's chunk_gated_delta_rule (when fla is
importable and a GPU is present): both are held to the fp64 reference, and to each other."""
from __future__ import annotations

import pytest
import torch

import gdn_torch
from gdn_reference import bound, make_inputs, reference, rel_rms

fla_chunk = pytest.importorskip("fla.ops.gated_delta_rule").chunk_gated_delta_rule
pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and gdn_torch._C.cuda_built()),
    reason="fla runs on the GPU only")

CASES = {
    "T300_HK2_HV4_K128_h0": dict(T=300, cu=None, l2norm=False),
    "T257_HK2_HV4_K128_l2norm": dict(T=257, cu=None, l2norm=True),
    "varlen_0_100_100_333_HK2_HV4_K128_h0": dict(T=333, cu=[0, 100, 100, 333], l2norm=False),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("arm", ["serial", "wy-fp32", "wy-tc", "auto"])
def test_same_outputs_as_fla(case, arm):
    c = CASES[case]
    cu = c["cu"]
    N = len(cu) - 1 if cu else 1
    x = make_inputs(1, c["T"], 2, 4, 128, 128, dtype=torch.bfloat16, device="cuda", h0=True, N=N,
                    l2norm_in_kernel=c["l2norm"])
    cu_t = torch.tensor(cu, dtype=torch.long, device="cuda") if cu else None
    args = (x["q"], x["k"], x["v"], x["g"], x["beta"])
    o_f, hT_f = fla_chunk(*args, initial_state=x["initial_state"], output_final_state=True,
                          use_qk_l2norm_in_kernel=c["l2norm"], cu_seqlens=cu_t)
    o_g, hT_g = gdn_torch.chunk_gated_delta_rule(*args, None, x["initial_state"], True,
                                                 cu_seqlens=cu_t,
                                                 use_qk_l2norm_in_kernel=c["l2norm"], arm=arm)
    ran = gdn_torch.last_arm()
    o_r, hT_r = reference(*(t.cpu() for t in args), h0=x["initial_state"].cpu(), cu_seqlens=cu,
                          l2norm=c["l2norm"])
    assert o_g.shape == o_f.shape and o_g.dtype == o_f.dtype
    assert hT_g.shape == hT_f.shape and hT_g.dtype == hT_f.dtype == torch.float32
    # fla's chunked kernel folds in bf16 on tensor cores: hold it to the wy-tc bound
    tol_fla, tol_gdn = bound(torch.bfloat16, "wy-tc"), bound(torch.bfloat16, ran)
    errs = {"fla o": rel_rms(o_f, o_r), "fla state": rel_rms(hT_f, hT_r),
            "gdn o": rel_rms(o_g, o_r), "gdn state": rel_rms(hT_g, hT_r),
            "gdn-fla o": rel_rms(o_g, o_f.double()), "gdn-fla state": rel_rms(hT_g, hT_f.double())}
    msg = f"{case}, arm {arm} (ran {ran}): " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items())
    assert errs["fla o"] <= tol_fla and errs["fla state"] <= tol_fla, msg
    assert errs["gdn o"] <= tol_gdn and errs["gdn state"] <= tol_gdn, msg
    assert errs["gdn-fla o"] <= tol_fla + tol_gdn, msg
    assert errs["gdn-fla state"] <= tol_fla + tol_gdn, msg
