// SCAFFOLD: `gdn prefill` (the layer stack) placeholder so the CLI links; the layer helper
// replaces this file.
#include <cstdio>

#include "gdn/commands.hpp"

namespace gdn::cli {
void add_prefill(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("prefill", "Run a GDN layer stack prefill (not implemented yet)");
  sub->allow_extras();
  sub->callback([] {
    std::fprintf(stderr, "gdn prefill: not implemented yet\n");
    exit_code() = 2;
  });
}
}  // namespace gdn::cli
