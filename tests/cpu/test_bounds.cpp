// The error-bound model's pieces (src/check/bounds.cpp, docs/bounds.md): the chunk memory n_mem
// on hand-made cases, the wy-tc scheme selection rule, the per-scheme rows, and that the
// single-scheme arms' bounds are never looser than the sqrt(n_c) model they replaced.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "check/check.hpp"
#include "small_spec.hpp"

namespace gdn::check {
namespace {

constexpr std::uint64_t kSeed = 20261204;

// Sets (or unsets, value null) an environment variable for a scope, restoring the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

CaseSpec one_head(int T, Decay d, BetaKind b, int K = 128) {
  CaseSpec s;
  s.seq_lens = {T};
  s.HK = s.HV = 1;
  s.K = s.V = K;
  s.decay = d;
  s.beta = b;
  s.h0 = false;
  return s;
}

// Keys replaced by exact unit basis vectors e_{t mod K} (|k| = 1 exactly).
void unit_keys(Case& c) {
  const int K = c.prob.K, HK = c.prob.HK;
  for (std::int64_t t = 0; t < c.T; ++t)
    for (int h = 0; h < HK; ++h)
      for (int d = 0; d < K; ++d) c.k32[(t * HK + h) * K + d] = d == t % K ? 1.f : 0.f;
}

TEST(Bounds, ChunkMemoryNoDecayBetaOne_UnitKeys) {
  const int K = 128, C = 64;
  Case c = make_case(one_head(64 * C, Decay::none, BetaKind::one, K), kSeed);
  unit_keys(c);
  const double r = std::pow(1.0 - 1.0 / K, C);  // (1 - (2 - 1) / K)^C
  const ChunkMemory m = chunk_memory(c, C);
  EXPECT_EQ(m.n_c, 64);
  EXPECT_NEAR(m.rho_c2, r, 1e-12);
  // 64 chunks: s_64 = (1 - r^64) / (1 - r), r^64 ~ 1e-14.
  EXPECT_NEAR(m.n_mem, (1 - std::pow(r, 64)) / (1 - r), 1e-9);
  EXPECT_NEAR(m.n_mem, 1 / (1 - r), 1e-9);  // = 2.54
  // Two chunks: s_2 = 1 + r.
  Case c2 = make_case(one_head(2 * C, Decay::none, BetaKind::one, K), kSeed);
  unit_keys(c2);
  EXPECT_NEAR(chunk_memory(c2, C).n_mem, 1 + r, 1e-12);
  // A partial last chunk (one token) adds at most one chunk: s = 1 + (1 - 1/K) s_10.
  Case c3 = make_case(one_head(10 * C + 1, Decay::none, BetaKind::one, K), kSeed);
  unit_keys(c3);
  const ChunkMemory m3 = chunk_memory(c3, C);
  EXPECT_EQ(m3.n_c, 11);
  EXPECT_NEAR(m3.rho_c2, 1 - 1.0 / K, 1e-12);  // the partial chunk is the worst chunk
  EXPECT_NEAR(m3.n_mem, 1 + (1 - 1.0 / K) * (1 - std::pow(r, 10)) / (1 - r), 1e-9);
  EXPECT_LT(m3.n_mem, std::min(m3.n_c, 1 / (1 - m3.rho_c2)));
  // beta in [0, 1]: 2 beta - beta^2 instead of 1.
  Case c4 = make_case(one_head(C, Decay::none, BetaKind::one, K), kSeed);
  unit_keys(c4);
  for (auto& b : c4.beta32) b = 0.5f;
  EXPECT_NEAR(chunk_memory(c4, C).rho_c2, std::pow(1.0 - 0.75 / K, C), 1e-12);
}

TEST(Bounds, ChunkMemoryStrongDecayIsOneChunk) {
  const Case c = make_case(one_head(4096, Decay::fast, BetaKind::random), kSeed);
  const ChunkMemory m = chunk_memory(c, 64);
  EXPECT_EQ(m.n_c, 64);
  EXPECT_LT(m.rho_c2, 1e-20);  // e^{2 G_C}, G_C <= -32
  EXPECT_GE(m.n_mem, 1.0);
  EXPECT_LT(m.n_mem, 1.0 + 1e-12);
  // The bench's slow decay (g ~ U[-0.05, -0.01] here): close to one chunk too.
  const Case s = make_case(one_head(4096, Decay::slow, BetaKind::random), kSeed);
  const ChunkMemory ms = chunk_memory(s, 64);
  EXPECT_LT(ms.n_mem, 1.2);
  EXPECT_GE(ms.n_mem, 1.0);
}

TEST(Bounds, ChunkMemoryBetaZeroNoDecayIsAllChunks) {
  const Case c = make_case(one_head(4096 + 5, Decay::none, BetaKind::zero), kSeed);
  const ChunkMemory m = chunk_memory(c, 64);
  EXPECT_EQ(m.rho_c2, 1.0);  // no contraction: n_mem is infinite, n_c chunks count
  EXPECT_EQ(m.n_c, 65);
  EXPECT_NEAR(m.n_mem, 65, 1e-12);
  // The bound is then the sqrt(n_c) model's.
  const FoldPrecision& f = fold_precision(Arm::cpu);
  BoundInputs in = bound_inputs(c, f.C), old = in;
  old.n_mem = old.n_c;
  EXPECT_NEAR(derive_bound(f, in).state, derive_bound(f, old).state, 1e-18);
}

TEST(Bounds, ChunkMemoryWorstSequenceAndHead) {
  CaseSpec s = one_head(640, Decay::none, BetaKind::one);
  s.seq_lens = {640, 64};
  s.HV = 2;
  Case c = make_case(s, kSeed);
  unit_keys(c);
  for (std::int64_t t = 0; t < c.T; ++t) c.g[t * 2 + 1] = -1.f;  // head 1 forgets at once
  const double r = std::pow(1.0 - 1.0 / 128, 64);
  const ChunkMemory m = chunk_memory(c, 64);
  EXPECT_EQ(m.n_c, 10);
  EXPECT_NEAR(m.n_mem, (1 - std::pow(r, 10)) / (1 - r), 1e-9);  // head 0 of the long sequence
}

// The sqrt(n_c) model (before n_mem), for the single-scheme rows whose e_chunk did not change.
double old_state_bound(Arm arm, const Case& c) {
  const FoldPrecision& f = fold_precision(arm);
  const double K = c.prob.K, C = f.C, kappa = f.C > 1 ? 2.0 : 1.0;
  std::int64_t max_len = 0;
  for (std::size_t i = 0; i + 1 < c.cu_seqlens.size(); ++i)
    max_len = std::max<std::int64_t>(max_len, c.cu_seqlens[i + 1] - c.cu_seqlens[i]);
  const double n_c = std::max<double>(1.0, std::ceil(static_cast<double>(max_len) / C));
  const double u_l2 = c.prob.qk_l2norm ? std::sqrt(K) * f.u_acc : 0.0;
  const double acc2 = (K + C) * f.u_acc * f.u_acc;
  const double e = std::sqrt(kappa * kappa * (C * f.u_solve * f.u_solve + acc2) + acc2 + u_l2 * u_l2);
  return kLambda * growth_factor(c) * std::sqrt(n_c) * e;
}

TEST(Bounds, SingleSchemeArmsNeverLooserThanBefore) {
  int i = 0;
  for (const CaseSpec& s : fixture_set()) {
    const Case c = make_case(s, kSeed + i++);
    for (Arm arm : {Arm::cpu, Arm::serial, Arm::wy_fp32}) {
      const FoldPrecision& f = fold_precision(arm);
      ASSERT_EQ(f.u_kk + f.u_wu + f.u_x + f.u_st + f.u_os + f.u_op, 0.0) << to_string(arm);
      const Bound b = derive_bound(arm, c);
      const double old = old_state_bound(arm, c);
      EXPECT_LE(b.state, old * (1 + 1e-12)) << to_string(arm) << " " << s.name();
      const double u_out = s.out_dtype == DType::bf16 ? 0x1p-8 : s.out_dtype == DType::f16 ? 0x1p-11 : 0x1p-24;
      const double intra = kLambda * (f.C > 1 ? 2.0 : 1.0) * std::sqrt((c.prob.K + f.C) * 0x1p-48);
      EXPECT_NEAR(b.o, u_out + b.state + intra, 1e-15) << to_string(arm) << " " << s.name();
    }
  }
}

using cputest::small_spec;

TEST(Bounds, WyTcHalfSchemeRule) {
  ScopedEnv unset("GDN_WYTC_PRECISION", nullptr);
  ScopedEnv no_u16_switch("GDN_WYTC_U16", nullptr), no_d16("GDN_WYTC_D16", nullptr);  // defaults
  const Case base = make_case(small_spec(), kSeed);
  EXPECT_TRUE(wy_tc_half_scheme(base));
  auto with = [&](auto edit) {
    Case c = base;
    edit(c);
    return wy_tc_half_scheme(c);
  };
  // The limits themselves are inside; raw q, k (no in-kernel l2norm applied) are what count.
  EXPECT_TRUE(with([](Case& c) { c.v32[5] = kWyTcHalfMaxV; c.h0[7] = -kWyTcHalfMaxV; }));
  EXPECT_TRUE(with([](Case& c) { c.q32[3] = kWyTcHalfMaxQK; c.k32[9] = -kWyTcHalfMaxQK; }));
  EXPECT_FALSE(with([](Case& c) { c.v32[5] = 2049.f; }));
  EXPECT_FALSE(with([](Case& c) { c.v32[5] = -2049.f; }));
  EXPECT_FALSE(with([](Case& c) { c.h0[11] = 4096.f; }));
  EXPECT_FALSE(with([](Case& c) { c.q32[3] = 16385.f; }));
  EXPECT_FALSE(with([](Case& c) { c.k32[3] = -20000.f; }));
  EXPECT_FALSE(with([](Case& c) { c.v32[0] = NAN; }));
  CaseSpec f16 = small_spec();
  f16.io_dtype = f16.out_dtype = DType::f16;
  const Case cf16 = make_case(f16, kSeed);
  EXPECT_FALSE(wy_tc_half_scheme(cf16));
  CaseSpec f32out = small_spec();
  f32out.out_dtype = DType::f32;
  const Case cf32out = make_case(f32out, kSeed);
  EXPECT_FALSE(wy_tc_half_scheme(cf32out));  // auto: fp32 o keeps the split scheme
  EXPECT_NE(derive_bound(Arm::wy_tc, base).formula.find("wy-tc half-u16-d16:"),
            std::string::npos);
  {
    ScopedEnv env("GDN_WYTC_D16", "0");  // ST's D split again: the half-u16 row
    EXPECT_NE(derive_bound(Arm::wy_tc, base).formula.find("wy-tc half-u16:"), std::string::npos);
  }
  {
    ScopedEnv env("GDN_WYTC_U16", "0");  // U kept in fp32: the half row
    EXPECT_NE(derive_bound(Arm::wy_tc, base).formula.find("wy-tc half:"), std::string::npos);
  }
  EXPECT_NE(derive_bound(Arm::wy_tc, cf16).formula.find("wy-tc split:"), std::string::npos);
  {
    ScopedEnv env("GDN_WYTC_PRECISION", "split");
    EXPECT_FALSE(wy_tc_half_scheme(base));
    EXPECT_NE(derive_bound(Arm::wy_tc, base).formula.find("wy-tc split:"), std::string::npos);
  }
  {
    ScopedEnv env("GDN_WYTC_PRECISION", "half");
    EXPECT_TRUE(wy_tc_half_scheme(base));
    EXPECT_TRUE(with([](Case& c) { c.v32[5] = 1e5f; }));  // forced: also outside the domain
    EXPECT_FALSE(wy_tc_half_scheme(cf16));               // but bf16 io only
    EXPECT_TRUE(wy_tc_half_scheme(cf32out));             // forced: fp32 o too
  }
  {
    ScopedEnv env("GDN_WYTC_PRECISION", "auto");
    EXPECT_TRUE(wy_tc_half_scheme(base));
    EXPECT_FALSE(with([](Case& c) { c.v32[5] = 3000.f; }));
  }
  EXPECT_EQ(std::getenv("GDN_WYTC_PRECISION"), nullptr);  // restored
  // Other arms have one row whatever the rule says.
  EXPECT_EQ(derive_bound(Arm::cpu, base).formula.find("half"), std::string::npos);
}

// Every rounding of the half scheme is at least the split scheme's (bf16 io), so the half bound
// is valid (loose) where the library runs split for a case the rule calls half (not sm_90a).
TEST(Bounds, HalfRowDominatesSplitRow) {
  ScopedEnv unset("GDN_WYTC_PRECISION", nullptr);
  ScopedEnv u32("GDN_WYTC_U16", "0");  // the half row itself (half-u16: the next test)
  const FoldPrecision &s = fold_precision(Arm::wy_tc, WyTcScheme::split),
                      &h = fold_precision(Arm::wy_tc, WyTcScheme::half);
  EXPECT_STREQ(s.scheme, "split");
  EXPECT_STREQ(h.scheme, "half");
  EXPECT_EQ(s.C, h.C);
  EXPECT_GE(h.u_wu, s.u_wu);
  EXPECT_GE(h.u_x, s.u_x);
  EXPECT_GE(h.u_st, s.u_st);
  EXPECT_GE(h.u_os, s.u_os);
  EXPECT_GE(h.u_op, s.u_op);
  EXPECT_EQ(h.u_kk, 0.0);  // exact bf16 products; split's 2^-16 covers f32 io only
  int i = 0;
  for (const CaseSpec& sp : fixture_set()) {
    if (sp.io_dtype != DType::bf16) continue;
    const Case c = make_case(sp, kSeed + i++);
    // auto: half on every in-domain bf16 fixture except an fp32 o, which keeps split.
    const bool want_half = sp.out_dtype != DType::f32;
    ASSERT_EQ(wy_tc_half_scheme(c), want_half) << sp.name();
    const BoundInputs in = bound_inputs(c, 64);
    const Bound bs = derive_bound(s, in), bh = derive_bound(h, in), bd = derive_bound(Arm::wy_tc, c);
    EXPECT_GT(bh.state, bs.state) << sp.name();
    EXPECT_GT(bh.o, bs.o) << sp.name();
    EXPECT_EQ(bd.state, want_half ? bh.state : bs.state) << sp.name();
    EXPECT_EQ(bd.o, want_half ? bh.o : bs.o) << sp.name();
  }
}

// The half-u16 row (U stored in fp16, the half scheme's default; GDN_WYTC_U16=0 turns it off)
// is the half row plus one more fp16 rounding in X's entry; derive_bound picks it exactly where
// the rule says half and the switch is not off, and it is then looser than half (the switch
// reached the bound).
TEST(Bounds, HalfU16RowAddsTheURounding) {
  ScopedEnv unset("GDN_WYTC_PRECISION", nullptr);
  ScopedEnv no_d16("GDN_WYTC_D16", "0");  // the half-u16 row itself (half-u16-d16: below)
  ScopedEnv u16_default("GDN_WYTC_U16", nullptr);  // switched off below, per case
  const FoldPrecision &h = fold_precision(Arm::wy_tc, WyTcScheme::half),
                      &hu = fold_precision(Arm::wy_tc, WyTcScheme::half_u16);
  EXPECT_STREQ(hu.scheme, "half-u16");
  EXPECT_NEAR(hu.u_x * hu.u_x, h.u_x * h.u_x + 0x1.0p-22, 1e-3 * 0x1.0p-22);  // + (2^-11)^2
  EXPECT_EQ(hu.u_wu, h.u_wu);
  EXPECT_EQ(hu.u_st, h.u_st);
  EXPECT_EQ(hu.u_os, h.u_os);
  EXPECT_EQ(hu.u_op, h.u_op);
  int i = 0;
  for (const CaseSpec& sp : fixture_set()) {
    if (sp.io_dtype != DType::bf16) continue;
    const Case c = make_case(sp, kSeed + i++);
    const bool half = wy_tc_half_scheme(c);
    const Bound b = derive_bound(Arm::wy_tc, c);
    EXPECT_EQ(wy_tc_u16(c), half) << sp.name();
    ScopedEnv off_env("GDN_WYTC_U16", "0");
    EXPECT_FALSE(wy_tc_u16(c)) << sp.name();
    const Bound off = derive_bound(Arm::wy_tc, c);
    if (half) {
      EXPECT_GT(b.state, off.state) << sp.name();
      EXPECT_NE(b.formula.find("half-u16"), std::string::npos) << b.formula;
    } else {
      EXPECT_EQ(b.state, off.state) << sp.name();  // split: the switch does not apply
    }
  }
}

// The half-u16-folded row (derived ahead of a kernel, docs/bounds.md): half-u16 with ST and OS
// each charged two fp16 roundings (the scaled k / q tile and the unsplit Vn / S^T); every other
// entry is half-u16's. No library path selects it: derive_bound's formula never names it.
TEST(Bounds, FoldedRowIsHalfU16WithTwoFp16RoundingsInStAndOs) {
  ScopedEnv unset("GDN_WYTC_PRECISION", nullptr);
  const FoldPrecision &hu = fold_precision(Arm::wy_tc, WyTcScheme::half_u16),
                      &f = fold_precision(Arm::wy_tc, WyTcScheme::half_u16_folded);
  EXPECT_STREQ(f.scheme, "half-u16-folded");
  EXPECT_NEAR(f.u_st * f.u_st, 2 * 0x1.0p-22, 1e-3 * 0x1.0p-22);
  EXPECT_NEAR(f.u_os * f.u_os, 2 * 0x1.0p-22, 1e-3 * 0x1.0p-22);
  EXPECT_GT(f.u_st, hu.u_st);
  EXPECT_GT(f.u_os, hu.u_os);
  EXPECT_EQ(f.u_x, hu.u_x);
  EXPECT_EQ(f.u_wu, hu.u_wu);
  EXPECT_EQ(f.u_op, hu.u_op);
  EXPECT_EQ(f.u_kk, hu.u_kk);
  EXPECT_EQ(f.u_solve, hu.u_solve);
  int i = 0;
  for (const CaseSpec& sp : fixture_set()) {
    const Case c = make_case(sp, kSeed + i++);
    const Bound b = derive_bound(Arm::wy_tc, c);
    EXPECT_EQ(b.formula.find("folded"), std::string::npos) << sp.name() << ": " << b.formula;
  }
}

// The half-u16-d16 row (session 22; the default where half-u16 runs since r70): half-u16 with ST
// charged one fp16 rounding (D single, K exact); every other entry is half-u16's. derive_bound
// names it exactly where the half-u16 rule holds (wy_tc_d16), never with GDN_WYTC_D16=0, and it
// then lies between the half-u16 and the folded rows' bounds.
TEST(Bounds, D16RowIsHalfU16WithOneFp16RoundingInSt) {
  ScopedEnv unset("GDN_WYTC_PRECISION", nullptr);
  ScopedEnv u16_default("GDN_WYTC_U16", nullptr);
  const FoldPrecision &hu = fold_precision(Arm::wy_tc, WyTcScheme::half_u16),
                      &d = fold_precision(Arm::wy_tc, WyTcScheme::half_u16_d16),
                      &f = fold_precision(Arm::wy_tc, WyTcScheme::half_u16_folded);
  EXPECT_STREQ(d.scheme, "half-u16-d16");
  EXPECT_STREQ(scheme_name(WyTcScheme::half_u16_d16), "half-u16-d16");
  EXPECT_EQ(d.u_st, 0x1.0p-11);
  EXPECT_GT(d.u_st, hu.u_st);
  EXPECT_LT(d.u_st, f.u_st);
  EXPECT_EQ(d.u_os, hu.u_os);
  EXPECT_EQ(d.u_x, hu.u_x);
  EXPECT_EQ(d.u_wu, hu.u_wu);
  EXPECT_EQ(d.u_op, hu.u_op);
  EXPECT_EQ(d.u_kk, hu.u_kk);
  EXPECT_EQ(d.u_solve, hu.u_solve);
  {
    ScopedEnv off("GDN_WYTC_D16", "0");
    int i = 0;
    for (const CaseSpec& sp : fixture_set()) {
      const Case c = make_case(sp, kSeed + i++);
      EXPECT_FALSE(wy_tc_d16(c)) << sp.name();
      const Bound b = derive_bound(Arm::wy_tc, c);
      EXPECT_EQ(b.formula.find("d16"), std::string::npos) << sp.name() << ": " << b.formula;
    }
  }
  ScopedEnv dflt("GDN_WYTC_D16", nullptr);
  int n_d16 = 0, i = 0;
  for (const CaseSpec& sp : fixture_set()) {
    const Case c = make_case(sp, kSeed + i++);
    const bool u16 = wy_tc_u16(c);
    EXPECT_EQ(wy_tc_d16(c), u16) << sp.name();
    const Bound b = derive_bound(Arm::wy_tc, c);
    EXPECT_EQ(b.formula.find("half-u16-d16") != std::string::npos, u16)
        << sp.name() << ": " << b.formula;
    if (u16) {
      ++n_d16;
      const Bound bu = derive_bound(hu, bound_inputs(c, hu.C));
      const Bound bf = derive_bound(f, bound_inputs(c, f.C));
      EXPECT_GT(b.state, bu.state) << sp.name();
      EXPECT_LT(b.state, bf.state) << sp.name();
    }
  }
  EXPECT_GT(n_d16, 0) << "no fixture case takes the D16 scheme: the checks above saw none";
}

}  // namespace
}  // namespace gdn::check
