// Input regimes of the operand-precision study (one head, K = V = 128, C = 64, bf16 q/k/v as
// stored, fp32 g/beta/h0) and the conversions between a check::Case and the emulator's
// HeadInputs. Shared by gdn_precision_emu (main.cpp, which lists the regimes) and the CPU test
// tests/cpu/test_precision_emu.cpp.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check/check.hpp"
#include "check/rng.hpp"
#include "emu.hpp"  // same directory (the CPU test includes this file by a relative path)

namespace gdn::precision {

using Rng = check::SplitMix64;  // the fixtures' generator (src/check/rng.hpp)

inline float bf(double x) { return round_bf16(static_cast<float>(x)); }

inline HeadInputs from_case(const check::Case& c) {
  HeadInputs h;
  h.K = c.prob.K, h.V = c.prob.V, h.T = c.T;
  h.q = c.q32, h.k = c.k32, h.v = c.v32, h.g = c.g, h.beta = c.beta32, h.h0 = c.h0;
  h.l2norm = c.prob.qk_l2norm;
  h.scale = c.prob.scale;
  return h;
}

inline check::Case to_case(const HeadInputs& h) {
  check::Case c;
  c.spec.seq_lens = {static_cast<int>(h.T)};
  c.spec.HK = c.spec.HV = 1, c.spec.K = h.K, c.spec.V = h.V;
  c.spec.h0 = !h.h0.empty();
  c.spec.l2norm_in_kernel = h.l2norm;
  c.prob = Problem::make(1, 1, h.K, h.V);
  c.prob.qk_l2norm = h.l2norm;
  c.cu_seqlens = {0, static_cast<std::int32_t>(h.T)};
  c.T = h.T;
  c.q32 = h.q, c.k32 = h.k, c.v32 = h.v, c.g = h.g, c.beta32 = h.beta, c.h0 = h.h0;
  return c;
}

inline HeadInputs make_regime(const std::string& regime, std::int64_t T, std::uint64_t seed,
                       double vscale) {
  const int K = 128, V = 128;
  HeadInputs h;
  if (regime == "gslow" || regime == "g0b1" || regime == "g0brand") {
    check::CaseSpec s;
    s.seq_lens = {static_cast<int>(T)};
    s.HK = s.HV = 1, s.K = K, s.V = V;
    s.decay = regime == "gslow" ? check::Decay::slow : check::Decay::none;
    s.beta = regime == "g0b1" ? check::BetaKind::one : check::BetaKind::random;
    h = from_case(check::make_case(s, seed));
  } else if (regime == "bench27b" || regime == "peers27b") {
    const bool peers = regime == "peers27b";
    Rng r{seed * 0x9e3779b97f4a7c15ull + (peers ? 77 : 11)};
    h.K = K, h.V = V, h.T = T;
    h.q.resize(T * K), h.k.resize(T * K), h.v.resize(T * V), h.g.resize(T), h.beta.resize(T);
    std::vector<double> row(K);
    for (std::int64_t t = 0; t < T; ++t) {
      for (int pass = 0; pass < 2; ++pass) {
        float* dst = (pass ? h.k.data() : h.q.data()) + t * K;
        double ss = 0;
        for (int d = 0; d < K; ++d) ss += (row[d] = r.normal()) * row[d];
        // bench: both unit-norm; peers: q raw, k unit-norm (normalised again in the kernel).
        const double inv = (peers && pass == 0) ? 1.0 : 1.0 / std::sqrt(ss);
        for (int d = 0; d < K; ++d) dst[d] = bf(row[d] * inv);
      }
      for (int d = 0; d < V; ++d) h.v[t * V + d] = bf(r.normal());
      if (peers) {
        const double x = r.normal() - 3.0;
        h.g[t] = static_cast<float>(-(x > 20 ? x : std::log1p(std::exp(x))));
      } else {
        h.g[t] = static_cast<float>(-(0.005 + 0.045 * r.uniform()));
      }
      h.beta[t] = static_cast<float>(1.0 / (1.0 + std::exp(-r.normal())));
    }
    h.h0.resize(std::int64_t(K) * V);
    for (auto& x : h.h0) x = static_cast<float>(0.1 * r.normal());
    h.l2norm = peers;
  } else {
    std::fprintf(stderr, "unknown regime %s\n", regime.c_str());
    std::exit(2);
  }
  if (vscale != 1.0)
    for (auto& x : h.v) x = bf(x * vscale);
  return h;
}

}  // namespace gdn::precision
