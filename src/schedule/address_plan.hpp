#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/tensor_graph.hpp"
#include "solver/solve.hpp"

namespace madpipe::schedule {

// Static memory planning with a fixed operator order (OLLA's address problem, seeds digest §2.2
// and §2.5 T4): every buffer gets an offset in one arena so that buffers live at the same time
// never overlap; the arena is the highest end. Frees become no-ops.

// A buffer live during timesteps first..last, both included.
struct Buffer {
  std::string name;
  std::int64_t size_bytes = 0;
  int first = 0;
  int last = 0;
};

// The buffers of a graph in its node order: first = the producer's timestep (0 without one),
// last = the last consumer's timestep (the producer's without consumers).
std::vector<Buffer> buffers_of(const TensorGraph& graph);

// True when a and b are live at a common timestep.
inline bool live_together(const Buffer& a, const Buffer& b) noexcept {
  return a.first <= b.last && b.first <= a.last;
}

// Max over timesteps of the sum of live sizes: no placement needs less (the resident-set peak).
std::int64_t live_bytes_lower_bound(const std::vector<Buffer>& buffers);

enum class PlanMethod {
  GreedyByStart,       // first fit in allocation order (by first use, then largest)
  GreedyLargestFirst,  // first fit, largest buffers first (then longest lived)
  Ilp,                 // the address ILP
};
const char* to_string(PlanMethod method);  // "greedy-by-start", "greedy-largest-first", "ilp"

struct AddressPlan {
  std::vector<Buffer> buffers;
  std::vector<std::int64_t> offsets;  // one per buffer
  std::int64_t arena_bytes = 0;       // max of offset + size
  std::int64_t lower_bound_bytes = 0; // live_bytes_lower_bound(buffers)
  PlanMethod method = PlanMethod::GreedyByStart;
  // What the ILP did ("optimal", "feasible", a fallback and why); empty for a plain greedy plan.
  std::string note;
  // The ILP's result when one ran (values cleared).
  solver::Status solver_status = solver::Status::Error;
  double solver_seconds = 0;

  std::int64_t sum_bytes() const noexcept;  // every buffer at its own address
};

// A pair of buffers live together whose address ranges intersect.
struct BufferConflict {
  int a = -1, b = -1;  // indices in plan.buffers, a < b
};

// Every conflict of a plan (empty: valid), plus any buffer with a negative offset or one past
// arena_bytes reported as a conflict with itself.
std::vector<BufferConflict> overlapping_live_buffers(const AddressPlan& plan);

// First-fit placement: buffers are taken in the method's order, each at the lowest offset that
// overlaps no already placed buffer live at the same time. O(n^2).
AddressPlan greedy_address_plan(const std::vector<Buffer>& buffers, PlanMethod order);
// The smaller arena of the two greedy orders (by start on ties).
AddressPlan best_greedy_address_plan(const std::vector<Buffer>& buffers);

struct AddressIlpOptions {
  std::string backend;  // "cbc", "glpk"; empty: the first built
  solver::SolveOptions solve{10.0, 1e-4, 1, false};
  // Skip the solve when the best greedy plan already meets the lower bound (it is optimal).
  bool skip_when_greedy_optimal = true;
};

// The address ILP (digest eq. 15): minimize the arena over offsets A_e, with one binary per pair
// of buffers live together (pairs that never coexist get no constraint), big-M = the greedy arena
// (also the upper bound of every A_e + S_e), sizes divided by their GCD, the greedy plan as MIP
// start. The solved order of each pair is turned into integral offsets by a longest-path pass, and
// the plan is checked with overlapping_live_buffers. On timeout without a better incumbent, a
// solver error, no built backend or an invalid decode, returns the best greedy plan with a note.
AddressPlan ilp_address_plan(const std::vector<Buffer>& buffers, const AddressIlpOptions& options);

}  // namespace madpipe::schedule
