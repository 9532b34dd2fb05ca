// Cost model of one prefill call: bytes moved and FLOPs of the chunked (WY) form, and the floor
// time they imply on a machine with given copy and matrix ceilings. Used by `gdn bench` for its
// "achieved vs floor" columns and written out term by term so the numbers can be checked by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn::cli {

struct CostInputs {
  int HK = 0, HV = 0, K = 0, V = 0;
  std::vector<std::int64_t> seq_lens;  // one entry per sequence
  DType io = DType::bf16;              // q, k, v
  DType out = DType::bf16;             // o
  DType beta = DType::f32;
  bool h0 = true, hT = true;
  int chunk = 64;  // C of the chunked form (fla convention)
};

struct Cost {
  // Bytes: every input read once, every output written once (the unavoidable traffic).
  double bytes_q = 0, bytes_k = 0, bytes_v = 0, bytes_g = 0, bytes_beta = 0, bytes_cu = 0;
  double bytes_o = 0, bytes_h0 = 0, bytes_hT = 0;
  // FLOPs of the chunked form (1 FMA = 2 FLOPs), summed over chunks of c <= C tokens:
  //   per key head (depend only on q, k; shared by the HV/HK value heads of a group):
  double fl_kkt = 0;  // K K^T            2 c^2 K
  double fl_qkt = 0;  // Q K^T            2 c^2 K
  //   per value head:
  double fl_solve = 0;  // (I + A)^-1      c^3 / 3   (unit-lower-triangular inverse)
  double fl_w = 0;      // W = Tm (e^G K)  2 c^2 K
  double fl_u = 0;      // U = Tm V        2 c^2 V
  double fl_ws = 0;     // Vn = U - W S    2 c K V
  double fl_qs = 0;     // e^G Q S         2 c K V
  double fl_pv = 0;     // (QK^T.*Gam) Vn  2 c^2 V
  double fl_state = 0;  // S' += (e^(G_C-G) K)^T Vn   2 c K V
  double bytes() const;
  double flops() const;
  std::string describe() const;  // the terms above with their values, one per line
};

// The cost of a prefill over `in` (elementwise work — masks, exp, decay scaling — is O(c^2 + cK)
// per chunk and left out: it is < 2% of the total at K = V = 128).
Cost prefill_cost(const CostInputs& in);

// Throughput ceilings of a machine. A zero ceiling is "not known" and is left out of the floor.
struct Ceilings {
  double bytes_per_s = 0;  // copy bandwidth (bytes read + written per second)
  double flops_per_s = 0;  // dense matrix arithmetic
  std::string source;      // where the numbers come from
};

// NVIDIA H200, measured on this project's card (DESIGN.md §6): copy 4.27 TB/s, bf16 dense
// matmul 680-790 TFLOP/s (the upper figure is used, so the floor stays a floor).
Ceilings h200_ceilings();

// This machine's fp32 FMA peak: cores x clock x 2 FMA units x 8 lanes (AVX2, the build's
// -march=x86-64-v3) x 2 FLOPs per FMA. The clock is /proc/cpuinfo's "cpu MHz" (nominal on VMs).
// `formula` spells the product out with this machine's numbers.
struct CpuPeak {
  int cores = 0;
  double ghz = 0;
  int fma_units = 2, lanes = 8;
  double flops_per_s = 0;
  std::string model, formula;
};
CpuPeak cpu_fp32_peak();

// floor = max(bytes / copy ceiling, flops / matrix ceiling), in seconds; `bound` gets "bytes" or
// "flops", whichever sets it.
double floor_seconds(const Cost& c, const Ceilings& ceil, std::string* bound = nullptr);

}  // namespace gdn::cli
