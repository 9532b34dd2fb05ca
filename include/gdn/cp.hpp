// gdn — context-parallel prefill: one long sequence split into segments that run concurrently.
//
// The recurrence is affine in the state and column-separable, so a segment maps its initial
// state S_in [K, V] to M S_in + B, with M [K, K] = prod_t exp(g_t) (I - beta_t k_t k_t^T) (later
// tokens on the left) and B [K, V] the segment's final state from zero. Both come from ordinary
// prefill calls of any arm: B with h0 = 0; M with the value dim replaced by K value columns
// (v = 0, h0 = I). A sequential combine S_in(s+1) = M_s S_in(s) + B_s gives every segment its
// true initial state; one varlen call (segments as sequences) then runs all of them at once.
// docs/cp.md has the algebra, the costs and when it pays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gdn/gdn.hpp"

namespace gdn {

// prefill with every sequence split into `segments` chunk-aligned parts (64-token multiples;
// parts past a short sequence's end are empty and cost nothing but a launch slot). Same
// arguments, validation, options and outputs as prefill (host tensors for the cpu arm, device
// tensors for the GPU arms); the arm runs three varlen calls (B pass, M pass, final pass) plus a
// small combine. segments == 1 is exactly prefill. Limits: 1 <= segments <= 1024.
Status prefill_cp(const Problem& p, const PrefillArgs& a, int segments, Arm arm = Arm::automatic,
                  RunInfo* info = nullptr);

// Caller-provided workspace (PrefillArgs::workspace, gdn.hpp) for the cp entry points below: the
// call's own buffers (states, maps) and its internal prefill calls all come from it, with the same
// rules (device memory, kWorkspaceAlignment, valid until the stream's work completes, not shared
// between concurrent calls). These return the bytes the matching call needs (its host logic run
// without any work; the call checks the same number before it runs anything); 0 on the host.
// segments == 1: prefill_workspace_bytes.
Status prefill_cp_workspace_bytes(const Problem& p, const PrefillArgs& a, int segments,
                                  Arm arm, std::uint64_t* bytes);

// ---- Multi-GPU context parallelism: rank r of `ranks` holds the r-th segment of every sequence
// (its own packed tokens and cu_seqlens, the same N on every rank). h0 is read on rank 0 only, hT
// is written on the last rank only (leave them undefined elsewhere). The exchanged maps are fp32,
// N * HV * K * (K + V) floats per rank.

std::size_t cp_rank_map_floats(const Problem& p, int num_seqs);

// Step 1 on rank r: this rank's (M_r, B_r) into maps_r [N, HV, K, K] followed by [N, HV, K, V]
// (device memory when a.on_device). Rank 0 starts from h0: its B is its true final state, its M is
// 0, and its o is already final.
Status cp_rank_maps(const Problem& p, const PrefillArgs& a, int rank, int ranks, Arm arm,
                    float* maps_r, RunInfo* info = nullptr);

// Step 2 on rank r, after the all-gather: `gathered` holds every rank's maps back to back
// ([ranks][cp_rank_map_floats]). Combines ranks 0..r-1 into this rank's initial state and runs
// its segment (rank 0 has nothing left to run); the last rank writes hT.
Status cp_rank_finish(const Problem& p, const PrefillArgs& a, int rank, int ranks, Arm arm,
                      const float* gathered, RunInfo* info = nullptr);

// Workspace bytes for rank r's cp_rank_maps and cp_rank_finish (one size for both: the larger);
// each of the two checks its workspace against it.
Status cp_rank_workspace_bytes(const Problem& p, const PrefillArgs& a, int rank, int ranks,
                               Arm arm, std::uint64_t* bytes);

// The whole multi-GPU step over an NCCL communicator (ncclComm_t passed as void*): cp_rank_maps,
// ncclAllGather of the maps on a.stream, cp_rank_finish. Returns Unsupported when this build has no
// NCCL (nccl.h not found at configure time) or libnccl.so.2 cannot be loaded at run time.
Status prefill_cp_nccl(void* nccl_comm, int rank, int ranks, const Problem& p, const PrefillArgs& a,
                       Arm arm = Arm::automatic, RunInfo* info = nullptr);
// Workspace bytes for prefill_cp_nccl: the gathered maps (padded to 256 bytes), then
// cp_rank_workspace_bytes. Unsupported where prefill_cp_nccl is.
Status prefill_cp_nccl_workspace_bytes(int rank, int ranks, const Problem& p,
                                       const PrefillArgs& a, Arm arm, std::uint64_t* bytes);
bool nccl_available(std::string* why = nullptr);

}  // namespace gdn
