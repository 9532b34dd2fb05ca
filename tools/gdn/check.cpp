// `gdn check [--arm A|all] [--seed N] [--quick]`: every arm against the fp64 oracle on the
// fixture set, one row per (arm, fixture); non-zero exit on any failure or on a negative control
// that did not fail. GPU arms run only where a device is present; otherwise they are reported
// as skipped.
#include <fmt/format.h>

#include <vector>

#include "check/check.hpp"
#include "gdn/commands.hpp"
#include "gdn/gdn.hpp"

namespace gdn::cli {

void add_check(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("check", "check arms against the fp64 oracle (table)");
  static std::string arm_name = "all";
  static std::uint64_t seed = 20261202;
  static bool quick = false;
  sub->add_option("--arm", arm_name, "cpu | serial | wy-fp32 | wy-tc | all")->capture_default_str();
  sub->add_option("--seed", seed, "base seed of the fixture draws")->capture_default_str();
  sub->add_flag("--quick", quick, "drop the largest fixtures");
  sub->callback([] {
    std::vector<Arm> arms;
    if (arm_name == "all") {
      arms = {Arm::cpu, Arm::serial, Arm::wy_fp32, Arm::wy_tc};
    } else {
      Arm a;
      if (!parse_arm(arm_name, &a) || a == Arm::automatic) {
        fmt::print(stderr, "gdn check: unknown arm '{}'\n", arm_name);
        exit_code() = 2;
        return;
      }
      arms = {a};
    }
    const DeviceInfo d = device_info();
    std::vector<Arm> run;
    for (Arm a : arms) {
      std::string why;
      if (a != Arm::cpu && !arm_available(a, d, &why)) {
        fmt::print("skipped {}: {}\n", to_string(a), why);
        if (arm_name != "all") exit_code() = 1;  // explicitly requested, cannot run
        continue;
      }
      run.push_back(a);
    }
    const auto specs = check::fixture_set(quick);
    std::vector<check::Row> rows;
    int failures = 0, bad_controls = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const check::Case c = check::make_case(specs[i], seed + i);
      const check::Oracle ref = check::ref_serial(c);
      for (Arm a : run) {
        rows.push_back(check::evaluate(a, c, ref, a != Arm::cpu));
        failures += !rows.back().pass;
        bad_controls += !rows.back().negative_control_failed;
      }
    }
    fmt::print("{}", check::format_table(rows));
    fmt::print("seed {}: {} rows, {} failed, {} negative controls that did not fail\n", seed,
               rows.size(), failures, bad_controls);
    if (failures || bad_controls) exit_code() = 1;
  });
}

}  // namespace gdn::cli
