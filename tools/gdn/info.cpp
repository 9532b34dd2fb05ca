// `gdn info`: version, commit, build, devices and the arms this machine can run (with reasons).
#include <fmt/format.h>

#include "gdn/commands.hpp"
#include "gdn/gdn.hpp"

namespace gdn::cli {

void add_info(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "build, devices and the arms available here");
  sub->callback([] {
    const DeviceInfo d = device_info();
    fmt::print("gdn {} (commit {})\n", version(), commit_id());
    fmt::print("build: CUDA {}{}\n", d.cuda_built ? "yes" : "no",
               d.cuda_built ? fmt::format(" (runtime {})", d.cuda_runtime) : std::string());
    if (d.device_count == 0) {
      fmt::print("devices: none\n");
    } else {
      fmt::print("devices: {} (current #{}: {}, sm_{}, {} SMs)\n", d.device_count, d.device,
                 d.name, d.sm, d.multiprocessors);
    }
    fmt::print("arms:\n");
    for (Arm a : {Arm::cpu, Arm::serial, Arm::wy_fp32, Arm::wy_tc}) {
      std::string why;
      const bool ok = arm_available(a, d, &why);
      fmt::print("  {:<8} {}\n", to_string(a), ok ? "available" : "unavailable: " + why);
    }
    fmt::print("  {:<8} {}\n", "auto",
               d.device_count > 0 ? "picks a GPU arm for device tensors, cpu for host tensors"
                                  : "runs cpu (no GPU)");
  });
}

}  // namespace gdn::cli
