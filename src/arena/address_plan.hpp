#pragma once

#include "arena/tensor_graph.hpp"
#include "solver/solve.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace madpipe::arena {

// Static memory planning with a fixed operator order (OLLA's address problem, solved on its own
// after the order is chosen, as in OLLA's split of ordering and addressing): every buffer gets an
// offset in one arena so that buffers live at the same time never overlap; the arena is the
// highest end. Frees become no-ops.

// A buffer live during timesteps first..last, both included. On a circular timeline (the steady
// state of a periodic schedule, modulo_memory.hpp) a buffer with first > last wraps around the
// end: it is live from first to the last timestep and from 0 to last.
struct Buffer {
  std::string name;
  std::int64_t size_bytes = 0;
  int first = 0;
  int last = 0;
};

// The buffers of a graph in its node order: first = the producer's timestep (0 without one),
// last = the last consumer's timestep (the producer's without consumers).
std::vector<Buffer> buffers_of(const TensorGraph& graph);

inline bool wraps(const Buffer& b) noexcept { return b.first > b.last; }

// True when a and b are live at a common timestep (their arcs intersect when either wraps: two
// wrapping buffers always share the end of the circle).
inline bool live_together(const Buffer& a, const Buffer& b) noexcept {
  if (wraps(a) && wraps(b)) return true;
  if (wraps(a)) return b.first <= a.last || b.last >= a.first;
  if (wraps(b)) return a.first <= b.last || a.last >= b.first;
  return a.first <= b.last && b.first <= a.last;
}

// Max over timesteps of the sum of live sizes: no placement needs less (the resident-set peak).
std::int64_t live_bytes_lower_bound(const std::vector<Buffer>& buffers);

// OLLA's pyramid heuristic: repeatedly the longest-lived buffer whose lifetime lies inside the
// previous pick's (ties: the larger, then the first), stacked bottom-up from offset 0. Activations
// of a training step are freed in reverse order of creation, so their lifetimes nest. Returns the
// picks in stacking order: picks[i] sits at the sum of the sizes of picks[0..i). Empty and wrapping
// buffers are never picked.
std::vector<int> pyramid_stack(const std::vector<Buffer>& buffers);

enum class PlanMethod {
  GreedyByStart,       // first fit in allocation order (by first use, then largest)
  GreedyLargestFirst,  // first fit, largest buffers first (then longest lived)
  Ilp,                 // the address ILP
};
const char* to_string(PlanMethod method);  // "greedy-by-start", "greedy-largest-first", "ilp"

struct AddressPlan {
  std::vector<Buffer> buffers;
  std::vector<std::int64_t> offsets;   // one per buffer
  std::int64_t arena_bytes = 0;        // max of offset + size
  std::int64_t lower_bound_bytes = 0;  // live_bytes_lower_bound(buffers)
  PlanMethod method = PlanMethod::GreedyByStart;
  // What the ILP did ("optimal", "feasible", a fallback and why); empty for a plain greedy plan.
  std::string note;
  // The ILP's result when one ran (values cleared).
  solver::Status solver_status = solver::Status::Error;
  double solver_seconds = 0;

  std::int64_t sum_bytes() const noexcept;  // every buffer at its own address
};

// Pairs (a < b) of non-empty buffers live together: the pairs a placement must keep apart.
std::vector<std::pair<int, int>> coexisting_buffer_pairs(const std::vector<Buffer>& buffers);

// A pair of buffers live together whose address ranges intersect.
struct BufferConflict {
  int a = -1, b = -1;  // indices in plan.buffers, a < b
};

// Every conflict of a plan (empty: valid), plus any buffer with a negative offset or one past
// arena_bytes reported as a conflict with itself.
std::vector<BufferConflict> overlapping_live_buffers(const AddressPlan& plan);

// First-fit placement: buffers are taken in the method's order, each at the lowest offset that
// overlaps no already placed buffer live at the same time. O(n^2). `fixed_offsets` (empty, or one
// per buffer, -1 for a free one) pre-places buffers, which must not overlap each other.
AddressPlan greedy_address_plan(const std::vector<Buffer>& buffers, PlanMethod order,
                                const std::vector<std::int64_t>& fixed_offsets = {});
// The smaller arena of the two greedy orders (by start on ties).
AddressPlan best_greedy_address_plan(const std::vector<Buffer>& buffers,
                                     const std::vector<std::int64_t>& fixed_offsets = {});

struct AddressIlpOptions {
  std::string backend;  // "cbc", "glpk"; empty: the first built
  solver::SolveOptions solve{10.0, 1e-4, 1, false};
  // Skip the solve when the best greedy plan already meets the lower bound (it is optimal).
  bool skip_when_greedy_optimal = true;
  // Pre-place pyramid_stack() at fixed offsets: their address variables and the order binaries
  // between them disappear, and the ILP places the rest around them.
  bool pyramid = false;
};

// The address ILP: minimize the arena over offsets A_e, with one binary per pair of buffers live
// together (pairs that never coexist get no constraint), big-M = the greedy arena (also the upper
// bound of every A_e + S_e), sizes divided by their GCD, the greedy plan as MIP start. The solved
// order of each pair is turned into integral offsets by a longest-path pass, and the plan is
// checked with overlapping_live_buffers. On timeout without a better incumbent, a
// solver error, no built backend or an invalid decode, returns the best greedy plan with a note.
// With options.pyramid, the MIP start is first-fit around the pyramid; a result worse than the
// plain best greedy plan gives that plan, with a note saying so. Wrapping buffers (circular
// lifetimes) are placed like the others: the pairs that must not overlap are those whose arcs
// intersect.
AddressPlan ilp_address_plan(const std::vector<Buffer>& buffers, const AddressIlpOptions& options);

}  // namespace madpipe::arena
