// CPU emulation of the operand precision of the chunked WY gated delta rule (one head), for
// choosing the operand scheme of the wy-tc arm's folds. Header-only: the tool
// (tools/precision/main.cpp) and the CPU test (tests/cpu/test_precision_emu.cpp) include it.
//
// What is emulated, per chunk of C = 64 tokens (algebra of src/ref/ref.cpp chunk_step, factored
// the way wy-tc factors it: exact input tiles Q, K, V, every exp / beta / 1/|q|, 1/|k| scaling on
// the fp32 side):
//   G  = cumsum(g)                                                  fp32
//   A  = beta_i rk_i rk_j (K K^T)_ij exp(G_i - G_j), j < i           K K^T fold ("kk")
//   P  = scale rq_i rk_j (Q K^T)_ij exp(G_i - G_j), j <= i           Q K^T fold ("kk")
//   T  = (I + A)^-1                                                   fp32 forward substitution
//   W  = (T diag(beta e^G rk)) K,  U = (T diag(beta)) V             "wu" folds (chunk pass)
//   X  = W S                                                          "x" fold (state read)
//   Vn = U - X                                                        fp32
//   O  = (Q S) diag(eq) + P Vn,  eq = scale e^G rq                    "os", "op" folds
//   S  = e^{G_C} S + K^T (diag(ed rk) Vn),  ed = e^{G_C - G}          "st" fold (acc initialised
//                                                                     with the decayed state)
//   o  = round(O) to bf16 (optional)
// Each fold's operands are rounded to their format (fp32 = not rounded; bf16 / fp16 round to
// nearest even, fp16 with overflow to inf and subnormals; "x2" = hi + lo split, hi = round(x),
// lo = round(x - hi), the product taken as hi*hi + hi*lo + lo*hi; "x2s" = fp16 split whose lo is
// stored scaled by 2^kLoShift and accumulated in a second fp32 accumulator, rescaled at the end).
// Products of rounded operands are exact in fp32 (8 + 8 or 11 + 11 significant bits <= 24);
// they are accumulated in ONE fp32 accumulator per output element in k order (k outer, the
// split's parts inner: hh, hl, lh), i.e. sequential fp32 summation. The GPU's mma/wgmma adds in
// an internal order of its own; the differences are at the 2^-24 level.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check/check.hpp"

namespace gdn::precision {

// ---------------------------------------------------------------- rounding helpers

// Round a float to bf16 / IEEE fp16, nearest even (fp16: subnormals, +-inf above 65504): the
// fixtures' converters (src/check).
inline float round_bf16(float x) { return check::round_to(DType::bf16, x); }
inline float round_fp16(float x) { return check::round_to(DType::f16, x); }

enum class Fmt { f32, bf16, fp16, bf16x2, fp16x2, fp16x2s };
constexpr int kLoShift = 12;  // fp16x2s: lo stored as round((x - hi) 2^12)

inline const char* fmt_name(Fmt f) {
  switch (f) {
    case Fmt::f32: return "f32";
    case Fmt::bf16: return "bf16";
    case Fmt::fp16: return "fp16";
    case Fmt::bf16x2: return "bf16x2";
    case Fmt::fp16x2: return "fp16x2";
    case Fmt::fp16x2s: return "fp16x2s";
  }
  return "?";
}
inline bool is_split(Fmt f) { return f == Fmt::bf16x2 || f == Fmt::fp16x2 || f == Fmt::fp16x2s; }
inline float round_to(Fmt f, float x) {
  switch (f) {
    case Fmt::bf16:
    case Fmt::bf16x2: return round_bf16(x);
    case Fmt::fp16:
    case Fmt::fp16x2:
    case Fmt::fp16x2s: return round_fp16(x);
    default: return x;
  }
}
// Products one fold issues per output tile for operand formats (a, b): 1, 2 (one split) or 3.
inline int n_products(Fmt a, Fmt b) { return 1 + (is_split(a) ? 1 : 0) + (is_split(b) ? 1 : 0); }

// An operand rounded to its format: hi (and lo for splits; lo pre-scaled for fp16x2s).
struct Operand {
  Fmt fmt = Fmt::f32;
  int rows = 0, cols = 0;
  std::vector<float> hi, lo;
  bool split() const { return !lo.empty(); }
};

// Operand statistics (before rounding): max |x| and the count of nonzero |x| < 2^-14 (values
// that fp16 stores as subnormals), over everything the fold saw.
struct OpStats {
  double max_abs = 0;
  std::int64_t n = 0, tiny = 0, nonfinite = 0;
  void add(const float* x, std::int64_t cnt) {
    for (std::int64_t i = 0; i < cnt; ++i) {
      const float a = std::fabs(x[i]);
      if (!std::isfinite(a)) {
        ++nonfinite;
        continue;
      }
      max_abs = std::max<double>(max_abs, a);
      if (a != 0.f && a < 0x1p-14f) ++tiny;
    }
    n += cnt;
  }
  void merge(const OpStats& o) {
    max_abs = std::max(max_abs, o.max_abs);
    n += o.n, tiny += o.tiny, nonfinite += o.nonfinite;
  }
};

inline void make_operand(Fmt f, const float* x, int rows, int cols, Operand* op,
                         OpStats* st = nullptr) {
  const std::int64_t n = std::int64_t(rows) * cols;
  if (st) st->add(x, n);
  op->fmt = f, op->rows = rows, op->cols = cols;
  op->hi.resize(n);
  op->lo.clear();
  if (!is_split(f)) {
    for (std::int64_t i = 0; i < n; ++i) op->hi[i] = round_to(f, x[i]);
    return;
  }
  op->lo.resize(n);
  const float s = f == Fmt::fp16x2s ? std::ldexp(1.f, kLoShift) : 1.f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float h = round_to(f, x[i]);
    op->hi[i] = h;
    // x - h is exact in fp32 (h is x rounded to fewer bits, same binade or the next one).
    op->lo[i] = std::isfinite(h) ? round_to(f, (x[i] - h) * s) : 0.f;
  }
}

// C[M x N] += A[M x Kd] B[Kd x N] (row-major operands), fp32 accumulation in k order, the split
// parts inner (hh, hl, lh). With fp16x2s the lo products go to a second accumulator scaled back
// by 2^-kLoShift at the end (both split operands must then be fp16x2s, or the other unsplit).
inline void mm(const Operand& A, const Operand& B, float* C) {
  const int M = A.rows, Kd = A.cols, N = B.cols;
  const bool al = A.split(), bl = B.split();
  const bool scaled = A.fmt == Fmt::fp16x2s || B.fmt == Fmt::fp16x2s;
  std::vector<float> acc(N), acc2(scaled ? N : 0);
  for (int i = 0; i < M; ++i) {
    float* c = C + std::int64_t(i) * N;
    std::copy(c, c + N, acc.begin());
    if (scaled) std::fill(acc2.begin(), acc2.end(), 0.f);
    float* a2 = scaled ? acc2.data() : acc.data();
    for (int k = 0; k < Kd; ++k) {
      const float ah = A.hi[std::int64_t(i) * Kd + k];
      const float* bh = B.hi.data() + std::int64_t(k) * N;
      if (!bl && !al) {
        for (int j = 0; j < N; ++j) acc[j] += ah * bh[j];
      } else if (bl && !al) {
        const float* blo = B.lo.data() + std::int64_t(k) * N;
        for (int j = 0; j < N; ++j) {
          acc[j] += ah * bh[j];
          a2[j] += ah * blo[j];
        }
      } else if (!bl && al) {
        const float alo = A.lo[std::int64_t(i) * Kd + k];
        for (int j = 0; j < N; ++j) {
          acc[j] += ah * bh[j];
          a2[j] += alo * bh[j];
        }
      } else {
        const float alo = A.lo[std::int64_t(i) * Kd + k];
        const float* blo = B.lo.data() + std::int64_t(k) * N;
        for (int j = 0; j < N; ++j) {
          acc[j] += ah * bh[j];
          a2[j] += ah * blo[j];
          a2[j] += alo * bh[j];
        }
      }
    }
    if (scaled) {
      const float s = std::ldexp(1.f, -kLoShift);
      for (int j = 0; j < N; ++j) acc[j] += acc2[j] * s;
    }
    std::copy(acc.begin(), acc.end(), c);
  }
}

// ---------------------------------------------------------------- schemes

// Operand formats per fold. kk_in: the q/k tiles in K K^T and Q K^T; wu_T / wu_in: the T-side
// (fp32, scaled) and input side (K or V tile) of W and U; x_W, x_S: X = W S; os_Q, os_S: Q S;
// op_P, op_Vn: P Vn; st_K, st_Vn: K^T (ed Vn). Inputs formats are single (no split: the inputs
// are bf16 values, exact in bf16 and, inside fp16's range, in fp16).
struct Scheme {
  std::string name, note;
  Fmt kk_in = Fmt::f32;
  Fmt wu_T = Fmt::f32, wu_in = Fmt::f32;
  Fmt x_W = Fmt::f32, x_S = Fmt::f32;
  Fmt os_Q = Fmt::f32, os_S = Fmt::f32;
  Fmt op_P = Fmt::f32, op_Vn = Fmt::f32;
  Fmt st_K = Fmt::f32, st_Vn = Fmt::f32;
  Fmt u_st = Fmt::f32;  // U as stored between the passes (rounded once to this format)
  // The solve's products (every product of the forward substitution, a superset of the GPU's row
  // blocks): fp32; 3xTF32 as session 11's v7t chunk kernel formed them (removed after r46); or
  // one tf32 product (big * big only: what a kernel that dropped the split would do; a negative
  // control).
  enum class Solve { f32, tf32x3, tf32 } solve = Solve::f32;
  bool o_bf16 = true;  // round o to bf16 (the arm's output dtype)
  // With in-kernel l2norm: store the normalised q, k as bf16 and use them as the tiles (what
  // fla / FlashQLA's l2norm kernels do) instead of exact tiles with fp32 1/|q|, 1/|k| scalings.
  bool qkn_bf16 = false;
  // Where the per-token scalings of the state pass's products are applied (session 21 study; the
  // wy-tc arm applies both on the fp32 side): eq_in_q forms O's inter-chunk part as
  // (diag(eq) Q) S, the scaled q tile rounded once to os_Q, instead of (Q S) diag(eq); ed_in_k
  // forms the state update as (K^T diag(ed rk)) Vn, the scaled k tile rounded once to st_K, with
  // Vn itself in st_Vn, instead of K^T (diag(ed rk) Vn) (the "ed*Vn" operand statistics then
  // describe Vn).
  bool eq_in_q = false, ed_in_k = false;
  // Tensor-core units of 64^3 MACs per chunk on the state chain (docs/NOTES_wy_tc.md, "How far
  // can the two targets move?"): X 2 per product, OS 2, ST 2, OP 1. -1 for an fp32 scheme.
  int state_units() const {
    if (x_S == Fmt::f32) return -1;
    return 2 * n_products(x_W, x_S) + 2 * n_products(os_Q, os_S) + 2 * n_products(st_K, st_Vn) +
           n_products(op_P, op_Vn);
  }
  // Units in the chunk pass's W and U folds (64 x 64 x 128 each: 2 per product), for reference.
  int wu_units() const { return wu_T == Fmt::f32 ? -1 : 2 * 2 * n_products(wu_T, wu_in); }
};

// Builds a scheme where every fold uses `single` for unsplit operands and `split` for the
// operands listed in the mask (the current wy-tc arm: all fp32-valued operands split).
inline Scheme uniform_scheme(std::string name, Fmt in, Fmt fp32side) {
  Scheme s;
  s.name = std::move(name);
  s.kk_in = s.wu_in = s.os_Q = s.st_K = in;
  s.wu_T = s.x_W = s.x_S = s.os_S = s.op_P = s.op_Vn = s.st_Vn = fp32side;
  return s;
}

// The schemes of the study (names as in docs/NOTES_wy_tc.md): a uniform base, then the
// operands that differ from it.
inline std::vector<Scheme> study_schemes() {
  std::vector<Scheme> v;
  auto add = [&v](const char* name, Fmt in, Fmt fp32side, const char* note, auto&& tweak) {
    Scheme s = uniform_scheme(name, in, fp32side);
    tweak(s);
    s.note = note;
    v.push_back(s);
  };
  auto none = [](Scheme&) {};
  add("F32", Fmt::f32, Fmt::f32, "every operand fp32 (floor: fp32 accumulation + bf16 o)", none);
  add("A", Fmt::bf16, Fmt::bf16x2,
      "current wy-tc: every fp32-valued operand bf16 hi+lo, inputs exact bf16", none);
  add("B", Fmt::fp16, Fmt::fp16, "fp16 operands, one product per fold", none);
  add("C", Fmt::bf16, Fmt::bf16, "bf16 operands, one product per fold (the peers)", none);
  add("D", Fmt::fp16, Fmt::fp16, "fp16; hi+lo only on S in X and on Vn in ST",
      [](Scheme& s) { s.x_S = s.st_Vn = Fmt::fp16x2; });
  add("E1", Fmt::fp16, Fmt::fp16,
      "D with the lo parts scaled by 2^12 (no fp16 subnormals), second accumulator",
      [](Scheme& s) { s.x_S = s.st_Vn = Fmt::fp16x2s; });
  add("E2", Fmt::fp16, Fmt::fp16,
      "fp16; hi+lo on the T side of W, U (chunk pass) and on Vn in ST (scaled lo)",
      [](Scheme& s) { s.wu_T = Fmt::fp16x2, s.st_Vn = Fmt::fp16x2s; });
  add("E3", Fmt::fp16, Fmt::fp16, "E2 + hi+lo (scaled lo) on S in X", [](Scheme& s) {
    s.wu_T = Fmt::fp16x2, s.st_Vn = s.x_S = Fmt::fp16x2s;
  });
  add("E4", Fmt::bf16, Fmt::bf16x2, "A with the output folds OS, OP unsplit (bf16)",
      [](Scheme& s) { s.os_S = s.op_P = s.op_Vn = Fmt::bf16; });
  add("E5", Fmt::fp16, Fmt::fp16,
      "B + hi+lo on the T side of W, U only (chunk pass; state chain as B)",
      [](Scheme& s) { s.wu_T = Fmt::fp16x2; });
  add("E6", Fmt::fp16, Fmt::fp16,
      "E3 + hi+lo on W in X (every state-feeding fp32 operand split, fp16)", [](Scheme& s) {
        s.wu_T = Fmt::fp16x2, s.st_Vn = s.x_S = s.x_W = Fmt::fp16x2s;
      });
  // The wy-tc arm's "half" scheme (docs/bounds.md; = spec "H=A:x_W=fp16+x_S=fp16+os_Q=fp16+
  // os_S=fp16+op_P=fp16+op_Vn=fp16"): A's bf16 split kept on the T side of W, U and on Vn in ST.
  add("H", Fmt::bf16, Fmt::bf16x2,
      "wy-tc half: A with fp16 single W, S (X), Q, S (OS), P, Vn (OP); T side, ST's Vn split bf16",
      [](Scheme& s) { s.x_W = s.x_S = s.os_Q = s.os_S = s.op_P = s.op_Vn = Fmt::fp16; });
  return v;
}

inline const Scheme* find_scheme(const std::vector<Scheme>& v, const std::string& name) {
  for (const auto& s : v)
    if (s.name == name) return &s;
  return nullptr;
}

// A scheme from a spec "NAME=BASE:fold=fmt+fold=fmt..." (BASE one of `known`), e.g.
// "Bw=B:wu_T=fp16x2+x_W=fp16x2". Folds: kk_in wu_T wu_in x_W x_S os_Q os_S op_P op_Vn st_K
// st_Vn u_st, o=f32 (no bf16 rounding of o), qkn=bf16 (normalised q, k stored as bf16 tiles),
// solve=f32|tf32x3|tf32 (the solve's products), eq=o|q and ed=vn|k (the side that takes the
// eq / ed scaling: Scheme::eq_in_q, ed_in_k).
// Returns false on a malformed spec.
inline bool parse_scheme(const std::string& spec, const std::vector<Scheme>& known, Scheme* out) {
  const auto eq = spec.find('='), colon = spec.find(':');
  if (eq == std::string::npos || colon == std::string::npos || colon < eq) return false;
  const Scheme* base = find_scheme(known, spec.substr(eq + 1, colon - eq - 1));
  if (!base) return false;
  Scheme s = *base;
  s.name = spec.substr(0, eq);
  s.note = spec.substr(eq + 1);
  std::string rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    const auto plus = rest.find('+');
    const std::string a = rest.substr(0, plus);
    rest = plus == std::string::npos ? "" : rest.substr(plus + 1);
    const auto e = a.find('=');
    if (e == std::string::npos) return false;
    const std::string key = a.substr(0, e), val = a.substr(e + 1);
    if (key == "solve") {
      if (val == "f32") s.solve = Scheme::Solve::f32;
      else if (val == "tf32x3") s.solve = Scheme::Solve::tf32x3;
      else if (val == "tf32") s.solve = Scheme::Solve::tf32;
      else return false;
      continue;
    }
    if (key == "eq" || key == "ed") {  // eq=q / eq=o, ed=k / ed=vn: the side that takes the scaling
      const bool on = key == "eq" ? val == "q" : val == "k";
      if (!on && val != (key == "eq" ? "o" : "vn")) return false;
      (key == "eq" ? s.eq_in_q : s.ed_in_k) = on;
      continue;
    }
    Fmt f;
    if (val == "f32") f = Fmt::f32;
    else if (val == "bf16") f = Fmt::bf16;
    else if (val == "fp16") f = Fmt::fp16;
    else if (val == "bf16x2") f = Fmt::bf16x2;
    else if (val == "fp16x2") f = Fmt::fp16x2;
    else if (val == "fp16x2s") f = Fmt::fp16x2s;
    else return false;
    if (key == "o") { s.o_bf16 = f != Fmt::f32; continue; }
    if (key == "qkn") { s.qkn_bf16 = f == Fmt::bf16; continue; }
    Fmt* slot = key == "kk_in" ? &s.kk_in : key == "wu_T" ? &s.wu_T : key == "wu_in" ? &s.wu_in
              : key == "x_W" ? &s.x_W : key == "x_S" ? &s.x_S : key == "os_Q" ? &s.os_Q
              : key == "os_S" ? &s.os_S : key == "op_P" ? &s.op_P : key == "op_Vn" ? &s.op_Vn
              : key == "st_K" ? &s.st_K : key == "st_Vn" ? &s.st_Vn
              : key == "u_st" ? &s.u_st : nullptr;
    if (!slot) return false;
    *slot = f;
  }
  *out = s;
  return true;
}

// 3xTF32 product as session 11's solve_row_block_tc formed it (removed after r46): each operand split
// x = big + small, big = x rounded to tf32 by + half an ulp and clearing the low 13 bits, small =
// x - big (exact) read by the tensor core as tf32, modelled as truncated (the larger error of
// the two readings the bound allows); big*big + big*small + small*big, each product exact in
// fp32 (11 x 11 significant bits), summed in fp32 in that order (small terms first).
inline float tf32_round_half_up(float x) {
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) + 0x1000u) & 0xffffe000u);
}
inline float tf32_trunc(float x) {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & 0xffffe000u);
}
inline float mul_3xtf32(float a, float b) {
  const float ab = tf32_round_half_up(a), as = tf32_trunc(a - ab);
  const float bb = tf32_round_half_up(b), bs = tf32_trunc(b - bb);
  return (as * bb + ab * bs) + ab * bb;
}

// ---------------------------------------------------------------- one head

struct HeadInputs {
  int K = 128, V = 128;
  std::int64_t T = 0;
  std::vector<float> q, k;  // [T, K], values as stored (bf16-rounded)
  std::vector<float> v;     // [T, V]
  std::vector<float> g, beta;
  std::vector<float> h0;  // [K, V] (empty: zero)
  bool l2norm = false;    // normalise q, k in fp32 (x / sqrt(sum x^2 + 1e-6)) as the layer does
  float scale = 0;        // 0: K^-1/2
};

enum OpId { kOpKKin, kOpA, kOpP, kOpTw, kOpTu, kOpWUin, kOpW, kOpS, kOpVn, kOpVd, kOpU, kOpCount };
inline const char* op_name(int i) {
  static const char* n[] = {"q,k tiles", "A=KK^T", "P=QK^T", "T(W side)", "T(U side)", "V tile",
                            "W", "S", "Vn", "ed*Vn", "U"};
  return n[i];
}

struct HeadResult {
  std::vector<float> o;   // [T, V]
  std::vector<float> hT;  // [K, V]
  OpStats stats[kOpCount];
};

inline void emulate(const HeadInputs& in, const Scheme& sc, HeadResult* res, int C = 64) {
  const int K = in.K, V = in.V;
  const std::int64_t T = in.T;
  const float scale = in.scale > 0 ? in.scale : 1.f / std::sqrt(float(K));
  res->o.assign(T * V, 0.f);
  std::vector<float>& S = res->hT;
  S.assign(std::int64_t(K) * V, 0.f);
  if (!in.h0.empty()) S = in.h0;
  OpStats* st = res->stats;
  for (int i = 0; i < kOpCount; ++i) st[i] = OpStats{};

  std::vector<float> G(C), rq(C), rk(C), Am(C * C), Pm(C * C), Tm(C * C), Tw(C * C), Tu(C * C);
  std::vector<float> W(C * K), U(C * V), X(C * V), O(C * V), OS(C * V), Vd(C * V), KT(K * C);
  std::vector<float> QK(C * C), KK(C * C);
  Operand oq, ok, okT, oqk, okk, ov, oTw, oTu, oW, oS, oVn, oP, oVd, okw, oqos, okst;
  std::vector<float> kT_raw(K * C), ked(K * C), qeq(C * K);

  for (std::int64_t t0 = 0; t0 < T; t0 += C) {
    const int L = static_cast<int>(std::min<std::int64_t>(C, T - t0));
    const float* q = in.q.data() + t0 * K;
    const float* k = in.k.data() + t0 * K;
    std::vector<float> qn, kn;
    const float* v = in.v.data() + t0 * V;
    float acc = 0;
    for (int i = 0; i < L; ++i) G[i] = (acc += in.g[t0 + i]);
    for (int i = 0; i < L; ++i) {
      if (in.l2norm) {
        float sq = 0, sk = 0;
        for (int d = 0; d < K; ++d) sq += q[i * K + d] * q[i * K + d], sk += k[i * K + d] * k[i * K + d];
        rq[i] = 1.f / std::sqrt(sq + 1e-6f);
        rk[i] = 1.f / std::sqrt(sk + 1e-6f);
      } else {
        rq[i] = rk[i] = 1.f;
      }
    }
    if (in.l2norm && sc.qkn_bf16) {
      qn.resize(std::size_t(L) * K), kn.resize(std::size_t(L) * K);
      for (int i = 0; i < L; ++i) {
        for (int d = 0; d < K; ++d)
          qn[i * K + d] = round_bf16(q[i * K + d] * rq[i]), kn[i * K + d] = round_bf16(k[i * K + d] * rk[i]);
        rq[i] = rk[i] = 1.f;
      }
      q = qn.data(), k = kn.data();
    }
    // K K^T and Q K^T on the input tiles (rounded to the fold's input format).
    for (int i = 0; i < L; ++i)
      for (int d = 0; d < K; ++d) kT_raw[d * L + i] = k[i * K + d];
    make_operand(sc.kk_in, k, L, K, &okk, &st[kOpKKin]);
    make_operand(sc.kk_in, q, L, K, &oqk, &st[kOpKKin]);
    make_operand(sc.kk_in, kT_raw.data(), K, L, &okT);
    std::fill(KK.begin(), KK.begin() + L * L, 0.f);
    std::fill(QK.begin(), QK.begin() + L * L, 0.f);
    mm(okk, okT, KK.data());
    mm(oqk, okT, QK.data());
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < L; ++j) {
        const float gam = j <= i ? std::exp(G[i] - G[j]) : 0.f;
        Am[i * L + j] = j < i ? in.beta[t0 + i] * rk[i] * rk[j] * KK[i * L + j] * gam : 0.f;
        Pm[i * L + j] = j <= i ? scale * rq[i] * rk[j] * QK[i * L + j] * gam : 0.f;
      }
    st[kOpA].add(Am.data(), L * L);
    // T = (I + A)^-1, fp32 forward substitution (products per sc.solve).
    for (int i = 0; i < L; ++i) {
      for (int j = 0; j < L; ++j) Tm[i * L + j] = i == j ? 1.f : 0.f;
      for (int j = 0; j < i; ++j) {
        float s = 0;
        for (int m = j; m < i; ++m) {
          const float a = Am[i * L + m], t = Tm[m * L + j];
          s += sc.solve == Scheme::Solve::tf32x3 ? mul_3xtf32(a, t)
             : sc.solve == Scheme::Solve::tf32   ? tf32_round_half_up(a) * tf32_round_half_up(t)
                                                 : a * t;
        }
        Tm[i * L + j] = -s;
      }
    }
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < L; ++j) {
        const float b = in.beta[t0 + j];
        Tw[i * L + j] = Tm[i * L + j] * (b * std::exp(G[j]) * rk[j]);
        Tu[i * L + j] = Tm[i * L + j] * b;
      }
    make_operand(sc.wu_T, Tw.data(), L, L, &oTw, &st[kOpTw]);
    make_operand(sc.wu_T, Tu.data(), L, L, &oTu, &st[kOpTu]);
    make_operand(sc.wu_in, k, L, K, &okw);
    make_operand(sc.wu_in, v, L, V, &ov, &st[kOpWUin]);
    std::fill(W.begin(), W.begin() + L * K, 0.f);
    std::fill(U.begin(), U.begin() + L * V, 0.f);
    mm(oTw, okw, W.data());
    mm(oTu, ov, U.data());
    if (sc.u_st != Fmt::f32)  // U stored rounded once (a split format: hi + rounded lo)
      for (int i = 0; i < L * V; ++i) {
        const float hi = round_to(sc.u_st, U[i]);
        U[i] = is_split(sc.u_st) ? hi + round_to(sc.u_st, U[i] - hi) : hi;
      }
    st[kOpU].add(U.data(), L * V);
    // State pass. X = W S; Vn = U - X.
    make_operand(sc.x_W, W.data(), L, K, &oW, &st[kOpW]);
    make_operand(sc.x_S, S.data(), K, V, &oS, &st[kOpS]);
    std::fill(X.begin(), X.begin() + L * V, 0.f);
    mm(oW, oS, X.data());
    for (int i = 0; i < L * V; ++i) X[i] = U[i] - X[i];  // X now holds Vn
    st[kOpVn].add(X.data(), L * V);
    // O = (Q S) diag(eq) + P Vn.
    Operand oSos;
    const Operand* pS = &oS;
    if (sc.os_S != sc.x_S) {
      make_operand(sc.os_S, S.data(), K, V, &oSos);
      pS = &oSos;
    }
    if (sc.eq_in_q) {  // the q tile scaled by eq, rounded once to os_Q
      for (int i = 0; i < L; ++i) {
        const float eq = scale * std::exp(G[i]) * rq[i];
        for (int c = 0; c < K; ++c) qeq[i * K + c] = q[i * K + c] * eq;
      }
      make_operand(sc.os_Q, qeq.data(), L, K, &oqos);
    } else {
      make_operand(sc.os_Q, q, L, K, &oqos);
    }
    std::fill(OS.begin(), OS.begin() + L * V, 0.f);
    mm(oqos, *pS, OS.data());
    make_operand(sc.op_P, Pm.data(), L, L, &oP, &st[kOpP]);
    make_operand(sc.op_Vn, X.data(), L, V, &oVn);
    std::fill(O.begin(), O.begin() + L * V, 0.f);
    mm(oP, oVn, O.data());
    for (int i = 0; i < L; ++i) {
      const float eq = sc.eq_in_q ? 1.f : scale * std::exp(G[i]) * rq[i];
      for (int d = 0; d < V; ++d) {
        const float x = OS[i * V + d] * eq + O[i * V + d];
        res->o[(t0 + i) * V + d] = sc.o_bf16 ? round_bf16(x) : x;
      }
    }
    // S = e^{G_C} S + K^T diag(ed rk) Vn.
    const float eL = std::exp(G[L - 1]);
    for (int i = 0; i < L; ++i) {
      const float ed = std::exp(G[L - 1] - G[i]) * rk[i];
      if (sc.ed_in_k)  // the k tile (K^T's column i) scaled by ed rk, rounded once to st_K
        for (int c = 0; c < K; ++c) ked[c * L + i] = kT_raw[c * L + i] * ed;
      for (int d = 0; d < V; ++d) Vd[i * V + d] = sc.ed_in_k ? X[i * V + d] : X[i * V + d] * ed;
    }
    make_operand(sc.st_Vn, Vd.data(), L, V, &oVd, &st[kOpVd]);
    make_operand(sc.st_K, sc.ed_in_k ? ked.data() : kT_raw.data(), K, L, &okst);
    for (auto& x : S) x *= eL;
    mm(okst, oVd, S.data());
  }
}

}  // namespace gdn::precision
