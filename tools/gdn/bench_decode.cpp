// SCAFFOLD: decode / verify benchmark placeholder so `gdn bench --decode` links; the decode
// helper replaces this file.
#include <cstdio>

#include "gdn/commands.hpp"

namespace gdn::cli {
int bench_decode(const DecodeBenchOptions&) {
  std::fprintf(stderr, "gdn bench --decode: decode benchmark not built yet\n");
  return 2;
}
}  // namespace gdn::cli
