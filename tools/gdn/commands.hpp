// `gdn` subcommands: each file registers one (or a few) on the app and sets the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace gdn::cli {

// Exit status of the subcommand that ran (0 ok, non-zero failure).
int& exit_code();

// The commit a record carries: $GDN_COMMIT (set by scripts/gpu_run.sh, whose device copy has no
// git history) over the sha baked in at configure time.
const char* commit_id();

void add_info(CLI::App& app);     // info.cpp
void add_check(CLI::App& app);    // check.cpp
void add_bench(CLI::App& app);    // bench.cpp
void add_tune(CLI::App& app);     // tune.cpp
void add_prefill(CLI::App& app);  // prefill.cpp (the layer stack)

// `gdn bench --decode`: decode (verify_tokens == 0) or speculative verify (verify_tokens > 0).
// Implemented in bench_decode.cpp; returns the process exit code.
struct DecodeBenchOptions {
  std::string preset = "qwen3.5-27b";
  int seqs = 256;
  int verify_tokens = 0;
  std::string json_path;  // append one JSON line per case when non-empty
  int iters = 200;
};
int bench_decode(const DecodeBenchOptions& opt);

}  // namespace gdn::cli
