#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/memory_floor.hpp"
#include "partition/planning_budget.hpp"
#include "partition/stage_options.hpp"
#include "plan/plan.hpp"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace madpipe::partition {

enum class Algorithm {
  MadPipe,     // MadPipe-DP (one special GPU may hold several stages) + scheduler; never worse
               // than the contiguous baseline
  Contiguous,  // PipeDream-style contiguous DP with 1F1B* memory estimates + 1F1B* (best k)
  OneFOneB,    // contiguous DP with 1F1B memory (NCA = stages after) + 1F1B (PipeDream-Flush)
  GPipe,       // contiguous DP with GPipe memory (NCA = micro-batches) + fill-drain
  PipeDream,   // PipeDream's partition (memory of 1F1B: NCA = stages after) scheduled with 1F1B*
               // and its k-periodic variants: the baseline of thesis ch. 7.3
  Ilp,         // the full ILP of thesis ch. 6 (allocation + 1-periodic pattern), warm-started
               // from MadPipe's best 1-periodic plan; needs a MILP backend
  // Today's schedules, placed as they place stages (balanced chunks, no memory model) and
  // scheduled and checked by madpipe's model:
  Interleaved,  // Megatron's interleaved 1F1B: 2 chunks per GPU in a loop, whole backwards
  ZbH1,         // zero-bubble ZB-H1: 1F1B's partition and memory, W filling the bubbles
  ZbV,          // zero-bubble ZB-V: 2 chunks per GPU in a V, split backwards
};

// How MadPipe schedules the allocations it found.
enum class Scheduler {
  Auto,       // Ilp when a MILP backend is built, else Heuristic
  Ilp,        // heuristic families, then the stage-level ILP of ch. 7.2 on the best allocations
  Heuristic,  // 1F1B*, modulo and guided-modulo families only
};
const char* to_string(Scheduler scheduler);                // "auto", "ilp", "heuristic"
Scheduler scheduler_from_string(const std::string& name);  // Error lists names

// Whether stages split their backward into B (input gradient) and W (weight gradient), as
// zero-bubble schedules do, where the profile measured the split (backward_weight_ms). The
// madpipe, contiguous and ilp algorithms plan with and without it, zb-h1 and zb-v with it; the
// others run whole backwards.
enum class BackwardSplit {
  Auto,  // plans with and without the split, keeps the shorter period (whole backwards on a tie)
  Off,   // whole backwards: the profile's split is ignored
};
const char* to_string(BackwardSplit split);                         // "auto", "off"
BackwardSplit backward_split_from_string(const std::string& name);  // Error lists names
bool can_split_backward(Algorithm algorithm);
// True when each GPU of the algorithm's plans holds one range of layers (the memory floor is then
// exact for it).
bool places_contiguously(Algorithm algorithm);
// True for interleaved and zb-v, which run one fixed placement of two chunks of layers per GPU
// (fixed_placement in loop_placements.hpp).
bool uses_fixed_placement(Algorithm algorithm);

// The MILP solver the ILPs use.
struct MilpSettings {
  std::string backend;       // "cbc", "glpk"; empty: the first built
  double time_limit_s = 60;  // per ILP solved (the stage ILPs of one plan share it), within
                             // PlannerOptions::time_limit_s
  double relative_gap = 1e-4;
  int threads = 1;
  bool log = false;  // the backend's own log on stdout
  // Non-empty: every ILP solved is also written in MPS, to PREFIX-schedule-N.mps (the stage
  // ILPs, in order) and PREFIX-full.mps (the full ILP), for solving with another solver.
  std::string mps_prefix;
};

const char* to_string(Algorithm algorithm);                // "madpipe", "contiguous", ...
Algorithm algorithm_from_string(const std::string& name);  // case-insensitive; Error lists names
const std::vector<Algorithm>& all_algorithms();

// Discretization of MadPipe-DP (thesis ch. 7.3.1 defaults).
struct Discretization {
  int time_steps = 101;   // values of t_P in [0, U(1, L)]
  int delay_steps = 51;   // values of V in [0, U(1, L) + sum C]
  int memory_steps = 11;  // values of m_P in [0, M]
  int iterations = 10;    // K of Algorithm 8
  // Extra MadPipe-DP runs at targets spread geometrically between the bounds of Algorithm 8:
  // more candidate allocations for the scheduler, which has the final word on the period.
  int extra_targets = 8;
};

// The madpipe command's default --time-limit, in seconds: a whole plan or compare request.
inline constexpr double kCommandTimeLimitS = 10;

struct PlannerOptions {
  Algorithm algorithm = Algorithm::MadPipe;
  Discretization discretization{};
  // Micro-batches per training step: GPipe's step, and the step over which the exchange of a
  // tied weight's gradients between GPUs is spread; 0: the number of GPUs.
  int micro_batches_per_step = 0;
  int max_k = 0;                 // largest k tried for k-periodic patterns; 0: 2 * stages - 1
                                 // (one per pipeline resource)
  int refine_evaluations = 150;  // madpipe: schedules tried by the local search; 0: none
  // madpipe: after the local search, choose which stages of the best plan split their backward
  // (where the profile splits); false: every stage splits as its layers do.
  bool choose_stage_splits = true;
  Scheduler scheduler = Scheduler::Auto;
  BackwardSplit split_backward = BackwardSplit::Auto;
  int ilp_allocations = 2;  // madpipe + ilp scheduler: best allocations given to the ILP
  MilpSettings milp{};
  RematSettings remat{};  // per-stage rematerialization (ROTOR) where memory is short
  // Wall-clock budget of the whole request, in seconds. Each phase (DPs, scheduling, local
  // search, ILPs, each within milp.time_limit_s) stops when it is spent; the best plan found so
  // far is returned with a note naming what was cut. The work that gives a first plan always
  // runs. Infinite: no limit, and the same plan on every machine.
  double time_limit_s = std::numeric_limits<double>::infinity();
  // Progress; the planner itself never prints. A status line (phase, best period so far, time
  // left) once a request has run a second, then every second and at each new phase; with
  // detailed_progress, every step's line instead (DP runs, allocations scheduled, ILPs).
  std::function<void(const std::string&)> progress;
  bool detailed_progress = false;
  // Seconds on a monotonic clock, read for the time limit; empty: std::chrono::steady_clock.
  // Tests pass one that advances with the work done.
  std::function<double()> clock;
};

struct PlanResult {
  bool feasible = false;
  plan::Plan plan;                 // valid when feasible
  std::string reason;              // why no plan fits, when infeasible
  std::vector<std::string> notes;  // what the user should know: solver fallbacks, limits hit
  double planning_seconds = 0;
  std::vector<PhaseTime> phases;   // where planning_seconds went, in order of first entry
  bool cut_by_time_limit = false;  // time_limit_s stopped some phase (a note says which)
  // Candidate allocations (madpipe and the contiguous algorithms) given to the schedule search,
  // and those it searched to the end, not cut by the time limit.
  int allocations_total = 0;
  int allocations_scheduled = 0;
};

// Plans `profile` on `platform` with the chosen algorithm. Every feasible plan passes
// plan::validate(). Throws Error{InvalidInput} for an inconsistent platform.
PlanResult make_plan(const Profile& profile, const Platform& platform,
                     const PlannerOptions& options = {});

// No plan can have a smaller normalized period: max(sum U / P, max_l (u_F + u_B), for every
// layer boundary min(C(l), U_l + U_{l+1}): either the boundary is cut and its link carries a_l
// and delta_l, or one GPU runs both layers), and what layers being indivisible adds: with U
// sorted in decreasing order, for every k >= 1 with k P + 1 layers, some GPU runs k + 1 of the
// k P + 1 longest, at least U_{kP-k+1} + ... + U_{kP+1} (80 equal blocks on 64 GPUs: two
// blocks). On a multi-node platform C(l) is over the fastest link, which a cut may use.
double lower_bound_period_ms(const Profile& profile, const Platform& platform);
double lower_bound_period_ms(const ChainCosts& costs, const Platform& platform);

// No plan that keeps every activation (no rematerialization or offloading) has a smaller
// normalized period (Little's law): a micro-batch holds what layer l stores from the start of
// l's forward to the end of its (input) backward, at least sum_{m >= l} (u_F(m) + u_B(m) - its W
// part) apart, and a GPU holding l keeps at most (M - C W_l - workspace_l) / stored_l of them;
// all GPUs together keep sum_l stored_l x that time / T, within P M less every weight (C copies)
// and the largest workspace. 0 where no layer binds.
double memory_bound_period_ms(const ChainCosts& costs, const Platform& platform);

// The best bound the planner knows for `plan`: lower_bound_period_ms, and memory_bound_period_ms
// where no stage of the plan rematerializes or offloads.
double lower_bound_for(const plan::Plan& plan, const Profile& profile);

// Micro-batches in flight that the algorithm's least-memory plans keep on the stage with q
// stages from it to the end: 1 for madpipe, contiguous and ilp (their patterns go down to one
// micro-batch at long periods), q for 1f1b and pipedream (their partitioner's estimate), N for
// gpipe.
InFlight least_in_flight(const PlannerOptions& options, const Platform& platform);

// memory_floor() with the algorithm's least in-flight counts and, with `remat` (built from
// options.remat), its rematerialization and offloading. make_plan() finds a plan at
// floor.bytes; the contiguous algorithms find none below it.
MemoryFloor algorithm_memory_floor(const ChainCosts& costs, const Platform& platform,
                                   const PlannerOptions& options, StageOptions* remat = nullptr,
                                   const std::function<bool()>& out_of_time = {});

// Smallest memory per GPU for which the algorithm finds a plan (algorithm_memory_floor(), with
// rematerialization and offloading when options.remat asks for them), in a fraction of a second
// and without planning; -1 if none fits with any memory. Exact for the contiguous algorithms;
// madpipe and ilp may also find non-contiguous plans a little below it.
std::int64_t smallest_feasible_memory(const Profile& profile, const Platform& platform,
                                      const PlannerOptions& options = {});

}  // namespace madpipe::partition
