// SCAFFOLD (to be replaced by the CPU arm): entry points so the library links.
#include "core/internal.hpp"

namespace gdn::detail {
Status cpu_prefill(const Problem&, const PrefillArgs&, const Seqs&) {
  return Status::Unsupported("cpu arm not implemented yet");
}
bool cpu_supports(const Problem&, std::string*) { return true; }
Status cpu_check_values(const Problem&, const PrefillArgs&, const Seqs&) { return Status::Ok(); }
}  // namespace gdn::detail
