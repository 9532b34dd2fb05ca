// gdn: command-line entry point. Subcommands live one per file (commands.hpp).
#include <CLI/CLI.hpp>

#include <cstdlib>

#include "gdn/commands.hpp"

#ifndef GDN_GIT_SHA
#define GDN_GIT_SHA "unknown"
#endif

namespace gdn::cli {
int& exit_code() {
  static int code = 0;
  return code;
}
const char* commit_id() {
  if (const char* c = std::getenv("GDN_COMMIT"); c && *c) return c;
  return GDN_GIT_SHA[0] ? GDN_GIT_SHA : "unknown";
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
