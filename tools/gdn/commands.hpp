// `gdn` subcommands: each file registers one (or a few) on the app and sets the exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace gdn::cli {

// Exit status of the subcommand that ran (0 ok, non-zero failure).
int& exit_code();

void add_info(CLI::App& app);     // info.cpp
void add_check(CLI::App& app);    // check.cpp
void add_bench(CLI::App& app);    // bench.cpp
void add_tune(CLI::App& app);     // tune.cpp (wy-fp32 issue)

}  // namespace gdn::cli
