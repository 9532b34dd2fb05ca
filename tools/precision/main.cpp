// gdn_precision_emu: CPU emulation of operand schemes for the wy-tc arm's folds (emu.hpp), errors
// of o and the final state against the fp64 serial oracle (check::ref_serial) with the repo's
// metric (check::compare: relative RMS). Not installed; docs/NOTES_wy_tc.md, "Precision
// emulation (CPU, session 8)", has the results and what the emulation does differently from the
// GPU kernels. Runs of schemes A (wy-tc split) and H (wy-tc half) are also shown against the
// bound src/check/bounds.cpp derives for that scheme on the same inputs (docs/bounds.md).
//
//   gdn_precision_emu [--T 4096,32768] [--seeds 3] [--regimes bench27b,peers27b,gslow,g0b1]
//                     [--schemes F32,A,B,C,D,E1,E2,E3,E4,E5,E6,H] [--threads 2] [--vscale 1]
//
// Regimes (one head, K = V = 128, C = 64, bf16 q/k/v as stored, fp32 g/beta/h0):
//   bench27b  `gdn bench`'s inputs (tools/gdn/bench.cpp): unit-norm q, k (bf16), v ~ N(0,1),
//             g ~ U[-0.05, -0.005], beta = sigmoid(N(0,1)), h0 = 0.1 N(0,1); the GPU's
//             o 1.66e-3 / state 3.6e-6 were measured on these (same distribution, other draws)
//   peers27b  bench/compare.py's inputs (where FlashInfer / FlashQLA / fla were measured): raw q
//             ~ N(0,1) (bf16), k = normalize(N(0,1)) (bf16), both l2-normalised in fp32 in the
//             kernel, g = -softplus(N(0,1) - 3), beta = sigmoid(N(0,1)), h0 = 0.1 N(0,1)
//   gslow     check::make_case, Decay::slow (g ~ U[-0.05, -0.01]), beta ~ U[0,1], h0 ~ N(0,1)
//   g0b1      check::make_case, Decay::none, BetaKind::one (g = 0, beta = 1)
//   g0brand   check::make_case, Decay::none, BetaKind::random (g = 0, beta ~ U[0,1])
// --vscale multiplies v (after the bf16 rounding, then rounded again): un-normalised values.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "check/check.hpp"
#include "check/rng.hpp"
#include "precision/emu.hpp"
#include "precision/regimes.hpp"

using namespace gdn;
using namespace gdn::precision;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty()) v.push_back(x);
  return v;
}

template <class F>
void parallel(std::size_t n, int threads, F f) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> th;
  for (int t = 0; t < std::max(1, threads); ++t)
    th.emplace_back([&] {
      for (std::size_t i; (i = next++) < n;) f(i);
    });
  for (auto& t : th) t.join();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> Ts = {4096, 32768};
  int seeds = 3, threads = 2;
  double vscale = 1.0;
  std::vector<std::string> regimes = {"bench27b", "peers27b", "gslow", "g0b1"};
  std::vector<std::string> scheme_names;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--T") {
      Ts.clear();
      for (auto& x : split(val())) Ts.push_back(std::stoll(x));
    } else if (a == "--seeds") {
      seeds = std::stoi(val());
    } else if (a == "--threads") {
      threads = std::stoi(val());
    } else if (a == "--regimes") {
      regimes = split(val());
    } else if (a == "--schemes") {
      scheme_names = split(val());
    } else if (a == "--vscale") {
      vscale = std::stod(val());
    } else {
      std::fprintf(stderr, "usage: %s [--T a,b] [--seeds n] [--regimes r,..] [--schemes s,..] "
                           "[--threads n] [--vscale x]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  const auto all = study_schemes();
  std::vector<Scheme> schemes;
  if (scheme_names.empty()) schemes = all;
  for (auto& n : scheme_names) {
    Scheme custom;
    const Scheme* s = find_scheme(all, n);
    if (!s && parse_scheme(n, all, &custom)) s = &custom;
    if (!s) {
      std::fprintf(stderr, "unknown scheme %s\n", n.c_str());
      return 2;
    }
    schemes.push_back(*s);
  }
  std::printf("# gdn_precision_emu (CPU emulation, not a GPU measurement); vscale %g\n", vscale);
  for (const auto& s : schemes)
    std::printf("# scheme %-3s state-chain units %3d, W/U units %3d: %s\n", s.name.c_str(),
                s.state_units(), s.wu_units(), s.note.c_str());

  struct Inst {
    std::string regime;
    std::int64_t T;
    std::uint64_t seed;
    HeadInputs in;
    check::Oracle ref;
    check::Bound split, half;  // derived bounds of wy-tc's two schemes (src/check/bounds.cpp)
  };
  std::vector<std::unique_ptr<Inst>> insts;
  for (auto& r : regimes)
    for (auto T : Ts)
      for (int s = 0; s < seeds; ++s) {
        auto p = std::make_unique<Inst>();
        p->regime = r, p->T = T, p->seed = 1000 + s;
        insts.push_back(std::move(p));
      }
  parallel(insts.size(), threads, [&](std::size_t i) {
    Inst& x = *insts[i];
    x.in = make_regime(x.regime, x.T, x.seed, vscale);
    const check::Case c = to_case(x.in);
    x.ref = check::ref_serial(c);
    const check::BoundInputs bi = check::bound_inputs(c, 64);
    x.split = check::derive_bound(check::fold_precision(Arm::wy_tc, check::WyTcScheme::split), bi);
    x.half = check::derive_bound(check::fold_precision(Arm::wy_tc, check::WyTcScheme::half), bi);
  });
  struct Out {
    double o = 0, state = 0;
    OpStats stats[kOpCount];
  };
  const std::size_t nj = insts.size() * schemes.size();
  std::vector<Out> outs(nj);
  parallel(nj, threads, [&](std::size_t j) {
    const Inst& x = *insts[j / schemes.size()];
    const Scheme& sc = schemes[j % schemes.size()];
    HeadResult r;
    emulate(x.in, sc, &r);
    const std::vector<double> o(r.o.begin(), r.o.end()), s(r.hT.begin(), r.hT.end());
    outs[j].o = check::compare(x.ref.o, o).rel_rms;
    outs[j].state = check::compare(x.ref.hT, s).rel_rms;
    for (int k = 0; k < kOpCount; ++k) outs[j].stats[k] = r.stats[k];
    std::fprintf(stderr, "%-9s T %7lld seed %llu %-3s o %.3e state %.3e\n", x.regime.c_str(),
                 (long long)x.T, (unsigned long long)x.seed, sc.name.c_str(), outs[j].o,
                 outs[j].state);
  });
  // Per-run rows; schemes A and H also against the derived bound of wy-tc's split / half row.
  std::printf("\nregime     T       seed scheme  o_rel_rms  state_rel_rms   bound_o  bound_state"
              "  util_o  util_state\n");
  for (std::size_t j = 0; j < nj; ++j) {
    const Inst& x = *insts[j / schemes.size()];
    const std::string& name = schemes[j % schemes.size()].name;
    std::printf("%-9s %7lld %5llu %-6s %10.3e %12.3e", x.regime.c_str(), (long long)x.T,
                (unsigned long long)x.seed, name.c_str(), outs[j].o, outs[j].state);
    if (name == "A" || name == "H") {
      const check::Bound& b = name == "A" ? x.split : x.half;
      std::printf("  %9.3e  %11.3e  %6.3f  %10.4f", b.o, b.state, outs[j].o / b.o,
                  outs[j].state / b.state);
    }
    std::printf("\n");
  }
  // Medians over seeds: markdown, one row per scheme, columns regime x T (o / state).
  std::vector<std::pair<std::string, std::int64_t>> cols;
  for (auto& r : regimes)
    for (auto T : Ts) cols.push_back({r, T});
  std::printf("\nMedian over %d seed(s), o / state relative RMS (CPU emulation)\n\n| scheme | units |",
              seeds);
  for (auto& c : cols) std::printf(" %s T=%lld |", c.first.c_str(), (long long)c.second);
  std::printf("\n|---|---|");
  for (std::size_t i = 0; i < cols.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (std::size_t s = 0; s < schemes.size(); ++s) {
    std::printf("| %s | %d |", schemes[s].name.c_str(), schemes[s].state_units());
    for (auto& c : cols) {
      std::vector<double> vo, vs;
      for (std::size_t i = 0; i < insts.size(); ++i)
        if (insts[i]->regime == c.first && insts[i]->T == c.second)
          vo.push_back(outs[i * schemes.size() + s].o),
              vs.push_back(outs[i * schemes.size() + s].state);
      std::printf(" %.2e / %.2e |", median(vo), median(vs));
    }
    std::printf("\n");
  }
  // Operand ranges: max |x| over all runs of a regime (scheme F32: unrounded values), and the
  // fraction of nonzero |x| < 2^-14 (fp16 subnormals).
  std::printf("\nOperand max |x| (fraction below 2^-14) per regime, all T and seeds, scheme %s\n",
              schemes[0].name.c_str());
  for (auto& r : regimes) {
    OpStats agg[kOpCount];
    std::int64_t nonfinite_o = 0;
    for (std::size_t i = 0; i < insts.size(); ++i) {
      if (insts[i]->regime != r) continue;
      for (int k = 0; k < kOpCount; ++k) agg[k].merge(outs[i * schemes.size()].stats[k]);
    }
    (void)nonfinite_o;
    std::printf("%-9s", r.c_str());
    for (int k = 0; k < kOpCount; ++k)
      std::printf(" | %s %.3g (%.1e)", op_name(k), agg[k].max_abs,
                  agg[k].n ? double(agg[k].tiny) / agg[k].n : 0.0);
    std::printf("\n");
  }
  return 0;
}
