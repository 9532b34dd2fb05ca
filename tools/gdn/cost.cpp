// Cost model of a prefill call (see cost.hpp for the terms).
#include "gdn/cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>

namespace gdn::cli {

double Cost::bytes() const {
  return bytes_q + bytes_k + bytes_v + bytes_g + bytes_beta + bytes_cu + bytes_o + bytes_h0 +
         bytes_hT;
}
double Cost::flops() const {
  return fl_kkt + fl_qkt + fl_solve + fl_w + fl_u + fl_ws + fl_qs + fl_pv + fl_state;
}

std::string Cost::describe() const {
  std::string s;
  auto b = [&](const char* n, double v) { s += fmt::format("  bytes {:<6} {:>12.4g}\n", n, v); };
  auto f = [&](const char* n, double v) { s += fmt::format("  flops {:<28} {:>12.4g}\n", n, v); };
  b("q", bytes_q), b("k", bytes_k), b("v", bytes_v), b("g", bytes_g), b("beta", bytes_beta);
  b("cu", bytes_cu), b("o", bytes_o), b("h0", bytes_h0), b("hT", bytes_hT);
  s += fmt::format("  bytes total  {:>12.4g}\n", bytes());
  f("KK^T      2c^2K  per key head", fl_kkt);
  f("QK^T      2c^2K  per key head", fl_qkt);
  f("solve     c^3/3  per value head", fl_solve);
  f("W=Tm e^G K 2c^2K", fl_w);
  f("U=Tm V    2c^2V", fl_u);
  f("W S       2cKV", fl_ws);
  f("Q S       2cKV", fl_qs);
  f("P Vn      2c^2V", fl_pv);
  f("state     2cKV", fl_state);
  s += fmt::format("  flops total  {:>12.4g}\n", flops());
  return s;
}

Cost prefill_cost(const CostInputs& in) {
  Cost c;
  std::int64_t T = 0;
  for (auto L : in.seq_lens) T += L;
  const double io = static_cast<double>(dtype_size(in.io));
  const double N = static_cast<double>(in.seq_lens.size());
  c.bytes_q = double(T) * in.HK * in.K * io;
  c.bytes_k = double(T) * in.HK * in.K * io;
  c.bytes_v = double(T) * in.HV * in.V * io;
  c.bytes_g = double(T) * in.HV * 4.0;
  c.bytes_beta = double(T) * in.HV * double(dtype_size(in.beta));
  c.bytes_cu = (N + 1) * 4.0;
  c.bytes_o = double(T) * in.HV * in.V * double(dtype_size(in.out));
  const double state = N * in.HV * double(in.K) * in.V * 4.0;
  c.bytes_h0 = in.h0 ? state : 0;
  c.bytes_hT = in.hT ? state : 0;

  const double K = in.K, V = in.V, HK = in.HK, HV = in.HV;
  for (std::int64_t L : in.seq_lens) {
    for (std::int64_t t0 = 0; t0 < L; t0 += in.chunk) {
      const double n = static_cast<double>(std::min<std::int64_t>(in.chunk, L - t0));
      c.fl_kkt += HK * 2 * n * n * K;
      c.fl_qkt += HK * 2 * n * n * K;
      c.fl_solve += HV * n * n * n / 3;
      c.fl_w += HV * 2 * n * n * K;
      c.fl_u += HV * 2 * n * n * V;
      c.fl_ws += HV * 2 * n * K * V;
      c.fl_qs += HV * 2 * n * K * V;
      c.fl_pv += HV * 2 * n * n * V;
      c.fl_state += HV * 2 * n * K * V;
    }
  }
  return c;
}

Ceilings h200_ceilings() {
  return {4.27e12, 790e12,
          "H200 measured (DESIGN.md §6): copy 4.27 TB/s, bf16 dense matmul 790 TFLOP/s"};
}

CpuPeak cpu_fp32_peak() {
  CpuPeak p;
  p.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), val = line.substr(colon + 1);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    while (!val.empty() && val.front() == ' ') val.erase(0, 1);
    if (key == "cpu MHz" && p.ghz == 0) p.ghz = std::atof(val.c_str()) / 1000.0;
    if (key == "model name" && p.model.empty()) p.model = val;
  }
  std::string clock_note;
  if (p.ghz <= 0) {
    p.ghz = 2.0;
    clock_note = " (clock unknown: 2.0 GHz assumed)";
  }
  if (p.model.empty()) p.model = "unknown CPU";
  p.flops_per_s = p.cores * p.ghz * 1e9 * p.fma_units * p.lanes * 2;
  p.formula = fmt::format(
      "{} cores x {:.2f} GHz x {} FMA units x {} fp32 lanes (AVX2) x 2 FLOP/FMA = {:.1f} GFLOP/s{}",
      p.cores, p.ghz, p.fma_units, p.lanes, p.flops_per_s / 1e9, clock_note);
  return p;
}

double floor_seconds(const Cost& c, const Ceilings& ceil, std::string* bound) {
  const double tb = ceil.bytes_per_s > 0 ? c.bytes() / ceil.bytes_per_s : 0;
  const double tf = ceil.flops_per_s > 0 ? c.flops() / ceil.flops_per_s : 0;
  if (bound) *bound = tb >= tf ? "bytes" : "flops";
  return std::max(tb, tf);
}

}  // namespace gdn::cli
