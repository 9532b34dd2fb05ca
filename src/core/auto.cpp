// `auto` on a GPU: pick the arm measured fastest for this device and geometry.
// The crossover table is filled from `gdn tune` measurements (bench/results/); until an arm is
// measured it is not preferred.
#include "core/internal.hpp"

namespace gdn::detail {

Arm auto_gpu_arm(const DeviceInfo& d, const Problem& p, const Seqs& s) {
  (void)d;
  (void)p;
  (void)s;
  return Arm::serial;
}

}  // namespace gdn::detail
