// A small bf16 case spec shared by the CPU tests (one sequence of 70 tokens, HK 2, HV 4,
// K = V = 64): quick to generate and run, two chunks long, grouped heads.
#pragma once

#include "check/check.hpp"

namespace gdn::check::cputest {

inline CaseSpec small_spec() {
  CaseSpec s;
  s.seq_lens = {70};
  s.HK = 2;
  s.HV = 4;
  s.K = s.V = 64;
  return s;
}

}  // namespace gdn::check::cputest
