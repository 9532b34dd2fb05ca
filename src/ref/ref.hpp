// fp64 oracles for the gated delta rule (DESIGN.md §1, §2). Tests, `gdn check` and benchmarks
// link this library (gdn_ref); the shipped libgdn never does.
//
// Variants in ref.cpp:
//   serial       one step per token, exactly DESIGN.md §1
//   chunked      WY / UT form with chunk C (DESIGN.md §2), built on chunk_step()
//   chunk_step   one chunk of one head: the building block other oracles (segments) reuse
//
// All arrays are contiguous doubles. Inputs are the values the kernel sees (already rounded to
// their storage dtype by the caller).
#pragma once

#include <cstdint>

namespace gdn::ref {

struct Geometry {
  int N = 1;                         // sequences
  const std::int32_t* cu = nullptr;  // [N+1] sequence offsets into the token axis
  int HK = 1, HV = 1, K = 128, V = 128;
  bool tiled = false;      // head map: false = grouped h / (HV/HK), true = tiled h % HK
  double scale = 0;        // output scale
  bool l2norm = false;     // normalize q, k per head as x / sqrt(sum(x^2) + 1e-6) first
  bool state_vk = false;   // h0/hT layout: false [N, HV, K, V], true [N, HV, V, K]
  int threads = 0;         // worker threads over (sequence, head); 0 = hardware_concurrency
  int kv_head(int h) const { return tiled ? h % HK : h / (HV / HK); }
  std::int64_t T() const { return cu[N]; }
};

// Full problem. q, k: [T, HK, K]; v: [T, HV, V]; g, beta: [T, HV]; h0: [N, HV, K, V] (or
// [N, HV, V, K] when state_vk), may be null (zero initial state); o: [T, HV, V] out;
// hT: like h0, may be null. hT may alias h0.
void serial(const Geometry& geo, const double* q, const double* k, const double* v,
            const double* g, const double* beta, const double* h0, double* o, double* hT);
void chunked(const Geometry& geo, const double* q, const double* k, const double* v,
             const double* g, const double* beta, const double* h0, double* o, double* hT,
             int chunk = 64);

// One chunk of L tokens for one head, in the WY form of DESIGN.md §2, in place on the state.
//   q_LK, k_LK: [L, K] rows with stride ldk; v_LV, o_LV: [L, V] rows with stride ldv;
//   g_L, beta_L: [L] with stride ldg; S_KV: [K, V] row-major (in: state before, out: after).
// o_LV may be null (state only). Gam_ij = exp(G_i - G_j) is formed from differences of the
// in-chunk cumulative log-decay, masked above the diagonal before the exp.
void chunk_step(int L, int K, int V, const double* q_LK, const double* k_LK, std::int64_t ldk,
                const double* v_LV, std::int64_t ldv, const double* g_L, const double* beta_L,
                std::int64_t ldg, double scale, double* S_KV, double* o_LV);

// One token step of DESIGN.md §1 for one head (state [K, V] row-major, in place). o_V may be null.
void serial_step(int K, int V, const double* q_K, const double* k_K, const double* v_V,
                 double g, double beta, double scale, double* S_KV, double* o_V);

}  // namespace gdn::ref
