// SCAFFOLD (to be replaced by the wy_tc arm): entry points so the library links.
#include "core/internal.hpp"

namespace gdn::detail {
Status cuda_wy_tc_prefill(const Problem&, const PrefillArgs&, const Seqs&) {
  return Status::Unsupported("wy_tc arm not implemented yet");
}
bool cuda_wy_tc_supports(const Problem&, std::string* why) {
  if (why) *why = "wy_tc arm not implemented yet";
  return false;
}
}  // namespace gdn::detail
