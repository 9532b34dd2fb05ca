// gdn: command-line entry point. Subcommands live one per file (commands.hpp).
#include <CLI/CLI.hpp>

#include "gdn/commands.hpp"

namespace gdn::cli {
int& exit_code() {
  static int code = 0;
  return code;
}
}  // namespace gdn::cli

int main(int argc, char** argv) {
  CLI::App app{"gdn: gated delta rule (Gated DeltaNet) prefill — check, benchmark, tune"};
  app.require_subcommand(1);
  gdn::cli::add_info(app);
  gdn::cli::add_check(app);
  gdn::cli::add_bench(app);
  gdn::cli::add_tune(app);
  gdn::cli::add_prefill(app);
  CLI11_PARSE(app, argc, argv);
  return gdn::cli::exit_code();
}
