// `auto`'s table lookup (src/core/auto.hpp): a pure function of (table, geometry) -> arm, the
// tune-file parser, and the fallback to the built-in table when a tune file is malformed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/auto.hpp"

namespace gdn::detail {
namespace {

// Serial is flat-fast at short lengths and linear; WY has a fixed cost and a lower slope:
// the crossover lies between 512 and 4096 tokens at 48 seq-heads. With 8 x 48 seq-heads serial
// wins at 4096.
TuneTable synthetic() {
  TuneTable t;
  t.sm = 90;
  t.points = {{Arm::serial, 512, 1, 48, 0.3},   {Arm::serial, 4096, 1, 48, 2.4},
              {Arm::serial, 32768, 1, 48, 19.0}, {Arm::serial, 4096, 8, 48, 12.0},
              {Arm::wy_fp32, 512, 1, 48, 0.6},  {Arm::wy_fp32, 4096, 1, 48, 1.5},
              {Arm::wy_fp32, 32768, 1, 48, 9.0}, {Arm::wy_fp32, 4096, 8, 48, 14.0}};
  return t;
}
const std::vector<Arm> kAll = {Arm::serial, Arm::wy_fp32, Arm::wy_tc};

TEST(AutoTable, EstimateInterpolatesAndExtrapolates) {
  const TuneTable t = synthetic();
  EXPECT_DOUBLE_EQ(estimate_ms(t, Arm::serial, 4096, 48), 2.4);  // on a point
  // Geometric midpoint of 512 and 4096 in log len -> geometric mean of the ms.
  const double mid = estimate_ms(t, Arm::serial, 1448, 48);
  EXPECT_NEAR(mid, std::sqrt(0.3 * 2.4), 0.01);
  EXPECT_DOUBLE_EQ(estimate_ms(t, Arm::serial, 65536, 48), 38.0);  // proportional beyond
  EXPECT_DOUBLE_EQ(estimate_ms(t, Arm::serial, 256, 48), 0.15);    // proportional below
  EXPECT_DOUBLE_EQ(estimate_ms(t, Arm::serial, 4096, 384), 12.0);  // the 8-seq row
  EXPECT_LT(estimate_ms(t, Arm::wy_tc, 4096, 48), 0.0);            // no points: negative
}

TEST(AutoTable, PicksTheMeasuredFastestArm) {
  const TuneTable t = synthetic();
  EXPECT_EQ(pick_arm(t, 64, 48, kAll), Arm::serial);
  EXPECT_EQ(pick_arm(t, 512, 48, kAll), Arm::serial);
  EXPECT_EQ(pick_arm(t, 4096, 48, kAll), Arm::wy_fp32);
  EXPECT_EQ(pick_arm(t, 32768, 48, kAll), Arm::wy_fp32);
  EXPECT_EQ(pick_arm(t, 4096, 384, kAll), Arm::serial);  // many sequences: serial wins
  EXPECT_EQ(pick_arm(t, 32768, 48, {Arm::serial}), Arm::serial);  // candidates are honoured
}

TEST(AutoTable, NegativeControlSwappedTimesFlipTheChoice) {
  // The same table with the two arms' times swapped must flip every decision above: the lookup
  // really reads the numbers (a constant answer would pass one of the two tests, not both).
  TuneTable t = synthetic();
  for (auto& p : t.points) p.arm = p.arm == Arm::serial ? Arm::wy_fp32 : Arm::serial;
  EXPECT_EQ(pick_arm(t, 64, 48, kAll), Arm::wy_fp32);
  EXPECT_EQ(pick_arm(t, 4096, 48, kAll), Arm::serial);
  EXPECT_EQ(pick_arm(t, 4096, 384, kAll), Arm::wy_fp32);
}

TEST(AutoTable, BuiltInH200TableFollowsTheMeasurement) {
  const TuneTable* t = builtin_tune_table(90);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(builtin_tune_table(75), nullptr);
  // gdn tune of r20 (bench/results/2026-12-03-h200-r20-6daa8a8-tune.txt) and compare.py at
  // 128eb09: wy-tc is the fastest measured arm at every length from 64 tokens, one sequence or 8,
  // and for HV 32; without it, wy-fp32 on long sequences (one, or 8 x 4096: 7.88 ms against
  // serial's 12.6) and serial at 64 tokens (0.062 against 0.082 ms).
  EXPECT_EQ(pick_arm(*t, 64, 48, kAll), Arm::wy_tc);
  EXPECT_EQ(pick_arm(*t, 4096, 32, kAll), Arm::wy_tc);
  EXPECT_EQ(pick_arm(*t, 32768, 48, kAll), Arm::wy_tc);
  EXPECT_EQ(pick_arm(*t, 4096, 8 * 48, kAll), Arm::wy_tc);
  EXPECT_EQ(pick_arm(*t, 32768, 48, {Arm::serial, Arm::wy_fp32}), Arm::wy_fp32);
  EXPECT_EQ(pick_arm(*t, 4096, 8 * 48, {Arm::serial, Arm::wy_fp32}), Arm::wy_fp32);
  EXPECT_EQ(pick_arm(*t, 64, 48, {Arm::serial, Arm::wy_fp32}), Arm::serial);
}

TEST(AutoTable, ParseRoundTrip) {
  TuneTable t = synthetic();
  t.device = "NVIDIA H200";
  TuneTable back;
  const Status st = parse_tune_table(tune_table_json(t), &back);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(back.sm, 90);
  EXPECT_EQ(back.device, "NVIDIA H200");
  ASSERT_EQ(back.points.size(), t.points.size());
  for (std::size_t i = 0; i < t.points.size(); ++i) {
    EXPECT_EQ(back.points[i].arm, t.points[i].arm);
    EXPECT_EQ(back.points[i].len, t.points[i].len);
    EXPECT_EQ(back.points[i].seqs_heads(), t.points[i].seqs_heads());
    EXPECT_DOUBLE_EQ(back.points[i].ms, t.points[i].ms);
  }
}

TEST(AutoTable, MalformedInputsGiveClearErrors) {
  const std::pair<std::string, std::string> bad[] = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"format": "other", "sm": 90, "points": []})", "format"},
      {R"({"format": "gdn-tune-1", "points": [{}]})", "\"sm\""},
      {R"({"format": "gdn-tune-1", "sm": 90, "points": []})", "\"points\""},
      {R"({"format": "gdn-tune-1", "sm": 90, "points": [{"arm": "cpu", "len": 1, "seqs": 1,
           "heads": 1, "ms": 1}]})", "point 0: \"arm\""},
      {R"({"format": "gdn-tune-1", "sm": 90, "points": [{"arm": "serial", "len": -4, "seqs": 1,
           "heads": 1, "ms": 1}]})", "point 0: \"len\""},
      {R"({"format": "gdn-tune-1", "sm": 90, "points": [{"arm": "serial", "len": 4, "seqs": 1,
           "heads": 1, "ms": 0}]})", "point 0: \"ms\""},
  };
  for (const auto& [text, want] : bad) {
    TuneTable t;
    t.sm = 12345;  // must stay untouched on error
    const Status st = parse_tune_table(text, &t);
    EXPECT_FALSE(st.ok()) << "accepted: " << text;
    EXPECT_NE(st.message().find(want), std::string::npos)
        << "error for " << text << " is '" << st.message() << "', want it to mention " << want;
    EXPECT_EQ(t.sm, 12345);
  }
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(AutoTable, MalformedTuneFileFallsBackToBuiltIn) {
  DeviceInfo d;
  d.sm = 90;
  d.name = "NVIDIA H200";
  const std::string path = temp_file("gdn_bad_tune.json", "{\"format\": \"gdn-tune-1\", \"sm\": ");
  TuneTable storage;
  std::string note;
  const TuneTable* t = select_tune_table(d, path, &storage, &note);
  EXPECT_EQ(t, builtin_tune_table(90));
  EXPECT_NE(note.find(path), std::string::npos) << note;
  EXPECT_NE(note.find("not valid JSON"), std::string::npos) << note;
  std::remove(path.c_str());
}

TEST(AutoTable, ValidTuneFileIsUsedAndWrongSmIsNot) {
  DeviceInfo d;
  d.sm = 90;
  TuneTable file = synthetic();
  const std::string path = temp_file("gdn_good_tune.json", tune_table_json(file));
  TuneTable storage;
  std::string note;
  const TuneTable* t = select_tune_table(d, path, &storage, &note);
  ASSERT_EQ(t, &storage) << note;
  EXPECT_TRUE(note.empty()) << note;
  EXPECT_EQ(t->source, path);
  EXPECT_EQ(pick_arm(*t, 4096, 384, kAll), Arm::serial);
  // The same file on an sm_80 device: not used (and no built-in table for sm_80).
  d.sm = 80;
  t = select_tune_table(d, path, &storage, &note);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(note.find("sm_90"), std::string::npos) << note;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gdn::detail
