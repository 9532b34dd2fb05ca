// SCAFFOLD (to be replaced by the wy_fp32 arm): entry points so the library links.
#include "core/internal.hpp"

namespace gdn::detail {
Status cuda_wy_fp32_prefill(const Problem&, const PrefillArgs&, const Seqs&) {
  return Status::Unsupported("wy_fp32 arm not implemented yet");
}
bool cuda_wy_fp32_supports(const Problem&, std::string* why) {
  if (why) *why = "wy_fp32 arm not implemented yet";
  return false;
}
}  // namespace gdn::detail
