// SCAFFOLD: `gdn tune` placeholder so the CLI links; the tuning helper replaces this file.
#include <cstdio>

#include "gdn/commands.hpp"

namespace gdn::cli {
void add_tune(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("tune", "Measure arm crossovers for auto (not implemented yet)");
  sub->allow_extras();
  sub->callback([] {
    std::fprintf(stderr, "gdn tune: not implemented yet\n");
    exit_code() = 2;
  });
}
}  // namespace gdn::cli
