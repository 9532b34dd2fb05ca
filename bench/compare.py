#!/usr/bin/env python3
"""Side-by-side GDN prefill on the GPU: every gdn arm (through gdn_torch) and the peers that import
here -- flash-linear-attention (chunked and fused-recurrent), FlashInfer, FlashQLA -- on the same
inputs, timed alike, checked against one fp64 reference on a head subset.

    python3 bench/compare.py --json out.jsonl --png out.png

Cases: presets qwen3.5-27b (HK16 HV48) and qwen3-next-80b (HK16 HV32), K = V = 128, bf16 q/k/v,
fp32 g/beta, fp32 h0 in and hT out; one sequence of T in {4096, 8192, 32768, 131072} and 8 x 4096
packed (varlen). Time: median of triton.testing.do_bench (CUDA events when triton is missing).
Accuracy: relative RMS of o and of the final state against an fp64 recurrence on value heads
{0, HV-1}, for cases up to --err-max-tokens tokens (null above).

One JSON line per (case, implementation) in DESIGN.md §7 form; a peer or arm that cannot run gets
a line with "error" saying why (import failure, unsupported, exception), so the record says which
peers were not run.

Peers on the GPU machine (no network): FlashQLA 0.1.3 (TileLang) and FlashInfer 0.7.2.post1 (its
sm90 GDN prefill is a CuTe-DSL kernel) travel as wheels: scripts/peer_wheels.sh here, the .peer/pN
folders carried one a call, scripts/peer_install.sh there, then the PYTHONPATH it prints. Their
first call compiles (TileLang through nvcc, CuTe DSL in process): see first_call_ms. Adapters:
  FlashQLA   our layouts as they are: q, k [1, T, HK, K], v [1, T, HV, V], log-space g and beta
             fp32 [1, T, HV], h0 and hT fp32 [N, HV, K, V], int64 cu_seqlens; returns (o, hT);
             run in inference mode with enable_fwd_cp_cache=False; its intra-card CP is its own
             default (auto_cp).
  FlashInfer tokens packed [T, H, K]; g is the linear decay alpha = exp(g); state [N, HV, V, K]
             (h0 transposed in, hT transposed back; alpha and the h0 copy made once per case, not
             timed); GVA needs num_q_heads = num_k_heads, value head h reading key head
             h // (HV / HK) as ours does; its default use_cp="auto" runs its context-parallel
             kernels when N * HV < SMs / 2 (every single-sequence case here on an H200) and the
             one-pass kernel otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
import traceback

import torch

PRESETS = {"qwen3.5-27b": (16, 48), "qwen3-next-80b": (16, 32)}
GDN_ARMS = ["serial", "wy-fp32", "wy-tc"]


def git_commit() -> str:
    if os.environ.get("GDN_COMMIT"):
        return os.environ["GDN_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=here,
                                       stderr=subprocess.DEVNULL).decode().strip()
    except Exception:
        return "unknown"


def bench_ms(fn, rep_ms: int) -> float:
    """Median kernel time in ms."""
    try:
        import triton.testing
        return float(triton.testing.do_bench(fn, warmup=25, rep=rep_ms, return_mode="median"))
    except ImportError:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(max(10, rep_ms // 5)):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        return times[len(times) // 2]


def make_case(HK, HV, seqs, T_each, K=128, V=128, seed=0):
    """Packed inputs [1, T, ...] plus cu_seqlens (int64 on the GPU and on the host)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    T = seqs * T_each
    dev = "cuda"
    q = torch.randn(1, T, HK, K, device=dev, generator=g).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(1, T, HK, K, device=dev, generator=g), dim=-1)
    k = k.bfloat16()
    v = torch.randn(1, T, HV, V, device=dev, generator=g).bfloat16()
    gate = -torch.nn.functional.softplus(torch.randn(1, T, HV, device=dev, generator=g) - 3.0)
    beta = torch.sigmoid(torch.randn(1, T, HV, device=dev, generator=g))
    h0 = 0.1 * torch.randn(seqs, HV, K, V, device=dev, generator=g)
    cu_cpu = torch.arange(0, T + 1, T_each, dtype=torch.long)
    return dict(q=q, k=k, v=v, g=gate, beta=beta, h0=h0, cu=cu_cpu.to(dev), cu_cpu=cu_cpu)


H200_BYTES_PER_S, H200_FLOPS_PER_S = 4.27e12, 790e12  # measured ceilings (DESIGN.md §6)


def floor_ms(HK, HV, seqs, T_each, K=128, V=128, C=64):
    """The cost model of `gdn cost` (tools/gdn/cost.cpp): bytes of q, k, v, o (bf16), g, beta,
    h0, hT (fp32) at the copy ceiling, or the chunked form's FLOPs at the bf16 matmul ceiling,
    whichever is longer."""
    T = seqs * T_each
    nbytes = T * (2 * HK * K * 2 + HV * V * 2 * 2 + HV * 4 * 2) + (seqs + 1) * 4 \
        + 2 * seqs * HV * K * V * 4
    flops = 0.0
    for t0 in range(0, T_each, C):
        n = min(C, T_each - t0)
        flops += HK * 4 * n * n * K + HV * (n ** 3 / 3 + 2 * n * n * K + 4 * n * n * V
                                             + 6 * n * K * V)
    flops *= seqs
    return 1e3 * max(nbytes / H200_BYTES_PER_S, flops / H200_FLOPS_PER_S)


def reference_subset(x, heads, HK, HV):
    """fp64 recurrence (DESIGN.md §1) for value heads `heads`: o [T, h, V], state [N, h, K, V]."""
    kh = [h // (HV // HK) for h in heads]
    q = x["q"][0][:, kh].double()
    k = x["k"][0][:, kh].double()
    v = x["v"][0][:, heads].double()
    gate = x["g"][0][:, heads].double()
    beta = x["beta"][0][:, heads].double()
    scale = q.shape[-1] ** -0.5
    cu = x["cu_cpu"].tolist()
    o = torch.empty(q.shape[0], len(heads), v.shape[-1], dtype=torch.float64, device="cuda")
    states = []
    for n in range(len(cu) - 1):
        S = x["h0"][n, heads].double().clone()
        a = torch.exp(gate)
        for t in range(cu[n], cu[n + 1]):
            S.mul_(a[t][:, None, None])
            u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
            S.add_(k[t][:, :, None] * u[:, None, :])
            o[t] = scale * torch.einsum("hkv,hk->hv", S, q[t])
        states.append(S)
    return o, torch.stack(states)


def rel_rms(x, ref) -> float:
    x = x.double()
    if (~torch.isfinite(x)).any():
        return math.inf
    return ((x - ref).norm() / ref.norm()).item()


# ---- implementations: name -> (impl, arm, fn(x) -> (o [1, T, HV, V], hT [N, HV, K, V])) ----

def gdn_impls(args):
    import gdn_torch
    out = []
    for arm in args.arms:
        def run(x, arm=arm):
            return gdn_torch.chunk_gated_delta_rule(
                x["q"], x["k"], x["v"], x["g"], x["beta"], None, x["h0"], True,
                cu_seqlens=x["cu"], cu_seqlens_cpu=x["cu_cpu"], arm=arm)
        out.append(("gdn", arm, run))
    return out


def peer_impls(args, errors):
    """Peers that import; for the others an entry in `errors` saying why."""
    out = []
    if "fla" in args.peers:
        # fla 0.6 hands chunk_gated_delta_rule to its FlashQLA backend whenever flash_qla imports
        # (r24 measured FlashQLA twice that way); "fla" here means fla's own Triton kernels.
        os.environ.setdefault("FLA_FLASH_QLA", "0")
        try:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
            from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_rec
            import fla
            ver = getattr(fla, "__version__", "?")

            def run_chunk(x):
                return fla_chunk(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"],
                                 output_final_state=True, cu_seqlens=x["cu"],
                                 cu_seqlens_cpu=x["cu_cpu"])

            def run_rec(x):
                return fla_rec(x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"],
                               initial_state=x["h0"], output_final_state=True, cu_seqlens=x["cu"])
            out.append(("fla", f"chunk-{ver}", run_chunk))
            out.append(("fla", f"fused_recurrent-{ver}", run_rec))
        except Exception as e:  # noqa: BLE001 - any import failure is recorded
            errors.append(("fla", "chunk", f"import failed: {type(e).__name__}: {e}"))
    if "flashinfer" in args.peers:
        try:
            import flashinfer
            import flashinfer.gdn_kernels as fi_kernels
            from flashinfer.gdn_prefill import chunk_gated_delta_rule as fi_chunk
            if fi_kernels.chunk_gated_delta_rule_sm90 is None:
                # flashinfer imports without its sm90 CuTe-DSL kernel when nvidia-cutlass-dsl is
                # missing or broken (gdn_kernels/__init__.py swallows the error): show the cause.
                import flashinfer.gdn_kernels.delta_rule_dsl.delta_rule_sm90  # noqa: F401
                raise ImportError("flashinfer.gdn_kernels.chunk_gated_delta_rule_sm90 is None")
            ver = getattr(flashinfer, "__version__", "?")

            def run_fi(x):
                # FlashInfer's formats, made once per case outside the timed work: decay as
                # alpha = exp(g) (linear), state [N, HV, V, K]; max_seqlen is its host-side
                # bound for the CP grid (the default, total tokens, is loose for varlen).
                if "_fi" not in x:
                    cu = x["cu_cpu"]
                    x["_fi"] = (torch.exp(x["g"][0]).contiguous(), x["beta"][0].contiguous(),
                                x["h0"].transpose(-1, -2).contiguous(),
                                int((cu[1:] - cu[:-1]).max()))
                alpha, beta, h0_vk, max_len = x["_fi"]
                with torch.inference_mode():
                    o, hT = fi_chunk(x["q"][0], x["k"][0], x["v"][0], alpha, beta,
                                     scale=x["q"].shape[-1] ** -0.5, initial_state=h0_vk,
                                     output_final_state=True, cu_seqlens=x["cu"],
                                     max_seqlen=max_len)
                return o.unsqueeze(0), hT.transpose(-1, -2)
            out.append(("flashinfer", f"chunk-{ver}", run_fi))
        except Exception as e:  # noqa: BLE001
            errors.append(("flashinfer", "chunk", f"import failed: {type(e).__name__}: {e}"))
    if "flashqla" in args.peers:
        try:
            import flash_qla
            from flash_qla import chunk_gated_delta_rule as qla_chunk
            ver = getattr(flash_qla, "__version__", "?")

            def run_qla(x):
                # Our layouts as they are; inference mode, so nothing is kept for a backward.
                with torch.inference_mode():
                    return qla_chunk(x["q"], x["k"], x["v"], x["g"], x["beta"],
                                     scale=x["q"].shape[-1] ** -0.5, initial_state=x["h0"],
                                     output_final_state=True, cu_seqlens=x["cu"],
                                     enable_fwd_cp_cache=False)
            out.append(("flashqla", f"chunk-{ver}", run_qla))
        except Exception as e:  # noqa: BLE001
            errors.append(("flashqla", "chunk", f"import failed: {type(e).__name__}: {e}"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", required=True, help="JSON lines output path")
    ap.add_argument("--png", default=None, help="plot output path (tokens/s vs T)")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--T", default="4096,8192,32768,131072", help="single-sequence lengths")
    ap.add_argument("--varlen", default="8x4096", help="packed cases SEQSxLEN, comma-separated")
    ap.add_argument("--arms", default=",".join(GDN_ARMS), help="gdn arms to time")
    ap.add_argument("--peers", default="fla,flashinfer,flashqla")
    ap.add_argument("--rep-ms", type=int, default=200, help="do_bench rep time per case")
    ap.add_argument("--err-max-tokens", type=int, default=32768,
                    help="check accuracy for cases with at most this many tokens")
    ap.add_argument("--max-rec-tokens", type=int, default=32768,
                    help="skip fla fused_recurrent above this many tokens (it is ~50 ms at 32K)")
    args = ap.parse_args()
    args.arms = [a for a in args.arms.split(",") if a]
    args.peers = [p for p in args.peers.split(",") if p]
    if not torch.cuda.is_available():
        sys.exit("compare.py needs a CUDA GPU")

    meta = dict(date=datetime.date.today().isoformat(), commit=git_commit(),
                device=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    print(f"# {meta['device']}  cuda {meta['cuda']}  torch {torch.__version__}  "
          f"commit {meta['commit'][:12]}  {meta['date']}", flush=True)
    errors = []
    impls = []
    try:
        impls += gdn_impls(args)
    except Exception as e:  # noqa: BLE001
        errors.append(("gdn", "all", f"import failed: {type(e).__name__}: {e}"))
    impls += peer_impls(args, errors)

    cases = [(1, int(t)) for t in args.T.split(",") if t]
    for spec in [s for s in args.varlen.split(",") if s]:
        n, t = spec.lower().split("x")
        cases.append((int(n), int(t)))

    records = []
    first_seen = set()  # implementations whose first call in this process has been timed
    out = open(args.json, "w")

    def emit(rec):
        rec = {**meta, **rec}
        records.append(rec)
        out.write(json.dumps(rec) + "\n")
        out.flush()

    for impl, arm, why in errors:
        for preset in args.presets.split(","):
            emit(dict(impl=impl, arm=arm, op="prefill", preset=preset, tokens=None, seqs=None,
                      ms=None, o_err=None, state_err=None, error=why))
        print(f"  {impl:10s} {arm:24s} NOT RUN: {why}", flush=True)

    hdr = f"{'preset':15s} {'seqs x T':>12s} {'impl':10s} {'arm':24s} {'ms':>9s} " \
          f"{'Mtok/s':>9s} {'o_err':>9s} {'state_err':>9s}"
    print(hdr, flush=True)
    for preset in args.presets.split(","):
        HK, HV = PRESETS[preset]
        for seqs, T_each in cases:
            tokens = seqs * T_each
            x = make_case(HK, HV, seqs, T_each)
            heads = [0, HV - 1]
            ref = reference_subset(x, heads, HK, HV) if tokens <= args.err_max_tokens else None
            fl = floor_ms(HK, HV, seqs, T_each)
            case_recs = []
            for impl, arm, fn in impls:
                base = dict(impl=impl, arm=arm, op="prefill", preset=preset, tokens=tokens,
                            seqs=seqs)
                if arm.startswith("fused_recurrent") and tokens > args.max_rec_tokens:
                    continue
                try:
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    o, hT = fn(x)
                    torch.cuda.synchronize()
                    first_ms = None
                    if (impl, arm) not in first_seen:  # JIT compilation, autotuning, loading
                        first_ms = 1e3 * (time.perf_counter() - t0)
                        first_seen.add((impl, arm))
                    ran = arm
                    if impl == "gdn":
                        import gdn_torch
                        ran = gdn_torch.last_arm()
                    o_err = s_err = None
                    if ref is not None:
                        o_err = rel_rms(o[0][:, heads], ref[0])
                        s_err = rel_rms(hT[:, heads], ref[1])
                    del o, hT
                    ms = bench_ms(lambda: fn(x), args.rep_ms)
                    rec = dict(base, arm=ran, ms=ms, o_err=o_err, state_err=s_err,
                               tokens_per_s=tokens / (ms * 1e-3), floor_ms=fl,
                               floor_fraction=fl / ms, first_call_ms=first_ms)
                    if ran != arm:
                        rec["requested_arm"] = arm
                    case_recs.append(rec)
                    fmt = lambda e: "-" if e is None else f"{e:.2e}"  # noqa: E731
                    print(f"{preset:15s} {seqs:>3d} x {T_each:<6d} {impl:10s} {ran:24s} "
                          f"{ms:9.3f} {tokens / ms / 1e3:9.1f} {fmt(o_err):>9s} "
                          f"{fmt(s_err):>9s}", flush=True)
                except Exception as e:  # noqa: BLE001 - a failing implementation is recorded
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    case_recs.append(dict(base, ms=None, o_err=None, state_err=None, error=msg))
                    print(f"{preset:15s} {seqs:>3d} x {T_each:<6d} {impl:10s} {arm:24s} "
                          f"FAILED: {msg}", flush=True)
                    if os.environ.get("GDN_COMPARE_TRACEBACK"):
                        traceback.print_exc()
            # Side by side: every line carries fla chunk's time over its own (> 1: faster than fla).
            fla_ms = [r["ms"] for r in case_recs
                      if r["impl"] == "fla" and r["arm"].startswith("chunk") and r.get("ms")]
            for r in case_recs:
                r["speedup_vs_fla_chunk"] = fla_ms[0] / r["ms"] if fla_ms and r.get("ms") else None
                emit(r)
            gdn = [r for r in case_recs if r["impl"] == "gdn" and r.get("ms")]
            if gdn:
                best = min(gdn, key=lambda r: r["ms"])
                vs = (f"{fla_ms[0] / best['ms']:.2f}x fla chunk ({fla_ms[0]:.3f} ms)" if fla_ms
                      else "fla not run")
                print(f"{preset:15s} {seqs:>3d} x {T_each:<6d} best gdn {best['arm']} "
                      f"{best['ms']:.3f} ms = {vs}; floor {fl:.3f} ms, gdn at "
                      f"{100 * fl / best['ms']:.1f}% of floor speed", flush=True)
            del x, ref
            torch.cuda.empty_cache()
    out.close()
    if args.png:
        plot(records, args.png, args.presets.split(","))


def plot(records, path, presets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(presets), figsize=(6.5 * len(presets), 4.8), squeeze=False)
    for ax, preset in zip(axes[0], presets):
        rows = [r for r in records if r["preset"] == preset and r.get("ms")]
        names = sorted({(r["impl"], r.get("requested_arm", r["arm"])) for r in rows})
        for impl, arm in names:
            mine = [r for r in rows if r["impl"] == impl and r.get("requested_arm", r["arm"]) == arm]
            single = sorted((r["tokens"], r["tokens_per_s"]) for r in mine if r["seqs"] == 1)
            label = f"{impl} {arm}"
            line = None
            if single:
                line, = ax.plot([s[0] for s in single], [s[1] for s in single], marker="o",
                                label=label)
            for r in mine:
                if r["seqs"] > 1:
                    ax.scatter([r["tokens"]], [r["tokens_per_s"]], marker="x", s=60,
                               color=line.get_color() if line else None,
                               label=None if line else label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens (line: one sequence; x: 8 sequences x 4096)")
        ax.set_ylabel("tokens / s")
        ax.set_title(f"GDN prefill, {preset}, bf16, K=V=128")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"# plot: {path}")


if __name__ == "__main__":
    main()
