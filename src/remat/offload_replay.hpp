#pragma once

#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"

#include <cstdint>
#include <string>

namespace madpipe::remat {

// What replaying a sequence with offloads and prefetches gives (thesis ch. 3-4 model).
struct OffloadReplay {
  bool valid = false;
  std::string problem;               // first violation when !valid, naming the op
  double total_ms = 0;               // makespan, idle time included
  double forward_ms = 0;             // up to the end of the loss forward
  double backward_ms = 0;            // the rest: the wait at the loss, backwards, recomputations
  double idle_ms = 0;                // total_ms minus the compute time
  std::int64_t offloaded_bytes = 0;  // sum of the sizes of the O ops (each comes back once)
  // Largest GPU memory, a[0] and overheads included, when a transfer frees (offload) or
  // allocates (prefetch) memory progressively as it goes (thesis OR.5); <= budget when valid.
  std::int64_t peak_bytes = 0;
  // The same schedule seen by a runtime without partial frees: an offloaded tensor holds its
  // memory until its transfer completes, a prefetch reserves all of it when it starts.
  std::int64_t peak_bytes_release_at_completion = 0;
  // Held on the GPU at the end of the loss forward, offloaded tensors excluded.
  std::int64_t stored_bytes = 0;
};

// Replays `sequence` on `chain` with a GPU budget and a host link of `host_bytes_per_ms`, in the
// model the pofo DP assumes (thesis Assumptions 4):
//   O_k copies the input of stage k (abar_{k-1} if recorded, else a_{k-1}) to the host and P_k
//   brings it back; offloads precede the loss forward, prefetches follow it (OR.2-OR.3).
//   One transfer at a time, in sequence order, overlapping compute fully; a transfer frees
//   (offload) or allocates (prefetch) GPU memory progressively as it goes (OR.5).
//   An offload starts once the link is free, its tensor exists and the compute op just before it
//   in the sequence has started: ops are launched asynchronously and the copy only reads that
//   op's input, as the compute op does.
//   Prefetches run as late as possible (thesis Prop. 1): each ends when the first op reading its
//   tensor may start, none starts before the loss forward and every offload have ended, and the
//   loss backward waits for the ones the backward phase cannot hide (OR.3). Where a P op sits
//   between the loss and that reader only sets the link order; a prefetch issued at a fixed
//   point would hold memory early and break the budget the DP plans for.
//   Compute ops run in sequence order, as early as possible in the forward phase and as late as
//   possible (from the end) in the backward phase; an op that would exceed the budget waits for
//   the link to free memory (thesis Lemma 8): before the op in the forward phase, after it in
//   the backward phase. The replay is invalid when an op misses an input, can never fit, or the
//   sequence does not end with only delta_0 stored.
// Without O and P ops and with an unbounded budget it gives the times, peak and stored bytes of
// replay_sequence.
OffloadReplay replay_offload_sequence(const RematChain& chain, const RematSequence& sequence,
                                      std::int64_t budget_bytes, double host_bytes_per_ms);

}  // namespace madpipe::remat
