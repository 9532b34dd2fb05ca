// SCAFFOLD (to be replaced by the serial arm): entry points so the library links.
#include "core/internal.hpp"

namespace gdn::detail {
Status cuda_serial_prefill(const Problem&, const PrefillArgs&, const Seqs&) {
  return Status::Unsupported("serial arm not implemented yet");
}
bool cuda_serial_supports(const Problem&, std::string* why) {
  if (why) *why = "serial arm not implemented yet";
  return false;
}
}  // namespace gdn::detail
