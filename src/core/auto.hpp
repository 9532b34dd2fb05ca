// `auto`'s crossover table: measured milliseconds per arm at a few geometries, as data, and the
// pure lookup that turns a table and a geometry into an arm. `gdn tune` writes tables in the
// JSON form parsed here; `auto` loads one per device and falls back to the built-in tables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gdn/gdn.hpp"

namespace gdn::detail {

// One measurement: `seqs` sequences of `len` tokens, `heads` value heads, median `ms`.
struct TunePoint {
  Arm arm = Arm::serial;
  std::int64_t len = 0;
  std::int64_t seqs = 0;
  std::int64_t heads = 0;
  double ms = 0.0;
  std::int64_t seqs_heads() const { return seqs * heads; }
};

struct TuneTable {
  std::string device;  // e.g. "NVIDIA H200"; informational
  int sm = 0;          // compute capability x 10 the table was measured on
  std::string source;  // "built-in (...)" or the file path, for the printed choice
  std::vector<TunePoint> points;
};

// Estimated ms of `arm` at (len, seqs_heads): the arm's points at the nearest measured
// seqs_heads (log distance), interpolated linearly in (log len, log ms) between neighbouring
// lengths, extrapolated proportionally to len outside them, then scaled by seqs_heads / the
// row's seqs_heads. Negative when the table has no point for the arm.
double estimate_ms(const TuneTable& t, Arm arm, std::int64_t len, std::int64_t seqs_heads);

// The arm with the smallest estimate among `candidates` (ties: earlier candidate); Arm::serial
// when none of them is in the table.
Arm pick_arm(const TuneTable& t, std::int64_t len, std::int64_t seqs_heads,
             const std::vector<Arm>& candidates);

// JSON form: {"format": "gdn-tune-1", "device": str, "sm": int, "points": [{"arm": "serial" |
// "wy-fp32" | "wy-tc", "len": int > 0, "seqs": int > 0, "heads": int > 0, "ms": number > 0}, ...]}
// (other fields ignored). Errors name the offending field or point.
Status parse_tune_table(const std::string& json_text, TuneTable* out);
Status load_tune_file(const std::string& path, TuneTable* out);
// Writes `t` in the form above (pretty-printed, one point per line).
std::string tune_table_json(const TuneTable& t);

// Built-in tables (measured; docs/NOTES.md "auto"). nullptr when none is for this sm.
const TuneTable* builtin_tune_table(int sm);

// The table `auto` uses on device `d`: the file at `path` (if non-empty and readable and valid
// for d.sm), else the built-in one. `note` gets why a file was not used (empty when it was, or
// when there was no file). Returns nullptr when neither exists.
const TuneTable* select_tune_table(const DeviceInfo& d, const std::string& path, TuneTable* storage,
                                   std::string* note);

// Default tune file path for a device name: $HOME/.cache/gdn/tune-<name, spaces -> '-'>.json.
std::string default_tune_path(const std::string& device_name);

}  // namespace gdn::detail
