// Multi-GPU context-parallel prefill over NCCL (include/gdn/cp.hpp): cp_rank_maps, an in-place
// ncclAllGather of every rank's fp32 maps on the call's stream, cp_rank_finish.
//
// Built with nccl.h when CMake finds it (GDN_WITH_NCCL); libnccl itself is loaded at run time
// (dlopen "libnccl.so.2"), so libgdn and everything linking it keep no NCCL link dependency.
// The caller owns the communicator and has therefore already loaded NCCL.
#include <string>

#include "cp/cp_internal.hpp"
#include "gdn/cp.hpp"

#if defined(GDN_WITH_CUDA) && defined(GDN_WITH_NCCL)
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#endif

namespace gdn {

#if defined(GDN_WITH_CUDA) && defined(GDN_WITH_NCCL)
namespace {

struct NcclApi {
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string why;
};

const NcclApi& nccl_api() {
  static const NcclApi api = [] {
    NcclApi r;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libnccl.so.2", RTLD_NOW);
    if (!lib) lib = dlopen("libnccl.so", RTLD_NOW);
    if (!lib) {
      const char* e = dlerror();
      r.why = std::string("cannot load libnccl.so.2: ") + (e ? e : "unknown error");
      return r;
    }
    r.all_gather = reinterpret_cast<decltype(&ncclAllGather)>(dlsym(lib, "ncclAllGather"));
    r.error_string =
        reinterpret_cast<decltype(&ncclGetErrorString)>(dlsym(lib, "ncclGetErrorString"));
    if (!r.all_gather || !r.error_string) r.why = "libnccl.so.2 lacks ncclAllGather";
    return r;
  }();
  return api;
}

}  // namespace

bool nccl_available(std::string* why) {
  const NcclApi& api = nccl_api();
  if (why) *why = api.why;
  return api.why.empty();
}

namespace {
// Checks shared by the call and its workspace query.
Status check_call(int rank, int ranks, const Problem& p, const PrefillArgs& a) {
  std::string why;
  if (!nccl_available(&why)) return Status::Unsupported("prefill_cp_nccl: " + why);
  if (!a.on_device) return Status::Invalid("prefill_cp_nccl: tensors must be device memory");
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return Status::Invalid("prefill_cp_nccl: rank " + std::to_string(rank) + " of " +
                           std::to_string(ranks));
  return validate(p, a);
}
// The all-gathered maps [ranks][F] fp32; they come first in a caller's workspace, padded to 256
// bytes, then what cp_rank_maps / cp_rank_finish take.
std::size_t gathered_bytes(const Problem& p, const PrefillArgs& a, int ranks) {
  const int N = a.cu_seqlens ? a.num_seqs : 1;
  return std::size_t(ranks) * cp_rank_map_floats(p, N) * sizeof(float);
}
std::size_t round256(std::size_t b) { return (b + 255) / 256 * 256; }
}  // namespace

Status prefill_cp_nccl_workspace_bytes(int rank, int ranks, const Problem& p, const PrefillArgs& a,
                                       Arm arm, std::uint64_t* bytes) {
  if (!bytes) return Status::Invalid("prefill_cp_nccl_workspace_bytes: bytes is null");
  *bytes = 0;
  Status st = check_call(rank, ranks, p, a);
  if (!st.ok()) return st;
  std::uint64_t rest = 0;
  if (!(st = cp_rank_workspace_bytes(p, a, rank, ranks, arm, &rest)).ok()) return st;
  *bytes = round256(gathered_bytes(p, a, ranks)) + rest;
  return Status::Ok();
}

Status prefill_cp_nccl(void* nccl_comm, int rank, int ranks, const Problem& p, const PrefillArgs& a,
                       Arm arm, RunInfo* info) {
  std::string why;
  if (!nccl_available(&why)) return Status::Unsupported("prefill_cp_nccl: " + why);
  if (!nccl_comm) return Status::Invalid("prefill_cp_nccl: null communicator");
  Status st = check_call(rank, ranks, p, a);
  if (!st.ok()) return st;
  const std::size_t G = gathered_bytes(p, a, ranks);
  PrefillArgs ar = a;  // the rank steps' arguments: the workspace past the gathered maps
  if (a.workspace) {  // its size first: nothing may run before a too-small one is rejected
    std::uint64_t need = 0;
    if (!(st = prefill_cp_nccl_workspace_bytes(rank, ranks, p, a, arm, &need)).ok()) return st;
    if (a.workspace_bytes < need)
      return Status::Invalid("workspace too small: prefill_cp_nccl needs " + std::to_string(need) +
                             " bytes, workspace_bytes = " + std::to_string(a.workspace_bytes) +
                             " (gdn::prefill_cp_nccl_workspace_bytes)");
    ar.workspace = static_cast<char*>(a.workspace) + round256(G);
    ar.workspace_bytes = a.workspace_bytes - round256(G);
  }
  const std::size_t F = cp_rank_map_floats(p, a.cu_seqlens ? a.num_seqs : 1);
  cp::Workspace ws(true, a.stream, a.workspace, a.workspace_bytes);
  if (!(st = ws.alloc(G)).ok()) return st;
  float* gathered = reinterpret_cast<float*>(ws.data());  // [ranks][F] fp32 maps
  float* mine = gathered + std::size_t(rank) * F;
  if (!(st = cp_rank_maps(p, ar, rank, ranks, arm, mine, info)).ok()) return st;
  const ncclResult_t r =
      nccl_api().all_gather(mine, gathered, F, ncclFloat32, static_cast<ncclComm_t>(nccl_comm),
                            static_cast<cudaStream_t>(a.stream));
  if (r != ncclSuccess)
    return Status::Internal(std::string("ncclAllGather: ") + nccl_api().error_string(r));
  return cp_rank_finish(p, ar, rank, ranks, arm, gathered, info);
}

#else

bool nccl_available(std::string* why) {
  if (why) *why = "this build has no NCCL (CUDA off or nccl.h not found when configuring gdn)";
  return false;
}

Status prefill_cp_nccl(void*, int, int, const Problem&, const PrefillArgs&, Arm, RunInfo*) {
  std::string why;
  nccl_available(&why);
  return Status::Unsupported("prefill_cp_nccl: " + why);
}

Status prefill_cp_nccl_workspace_bytes(int, int, const Problem&, const PrefillArgs&, Arm,
                                       std::uint64_t* bytes) {
  if (bytes) *bytes = 0;
  std::string why;
  nccl_available(&why);
  return Status::Unsupported("prefill_cp_nccl: " + why);
}

#endif

}  // namespace gdn
