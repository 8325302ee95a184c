#include "partition/madpipe_dp.hpp"

#include "core/units.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kDelayStepsPerPeriod = 4;
// From here on the delay grid is aligned with the target and the bounds are bisected by ratio.
constexpr int kManyGpus = 16;

// Open-addressing map from packed state to value: the DP visits a small part of its state space.
class StateMemo {
 public:
  explicit StateMemo(std::size_t capacity_hint) {
    rehash(std::max<std::size_t>(1024, capacity_hint));
  }

  const float* find(std::uint64_t key) const {
    for (std::size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == kEmpty) return nullptr;
      if (keys_[i] == key) return &values_[i];
    }
  }

  void insert(std::uint64_t key, float value) {
    if (2 * (size_ + 1) > keys_.size()) rehash(2 * keys_.size());
    std::size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    if (keys_[i] == kEmpty) ++size_;
    keys_[i] = key;
    values_[i] = value;
  }

  std::size_t size() const { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  std::size_t slot(std::uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<std::size_t>(key) & mask_;
  }
  void rehash(std::size_t capacity) {
    std::vector<std::uint64_t> old_keys = std::move(keys_);
    std::vector<float> old_values = std::move(values_);
    keys_.assign(capacity, kEmpty);
    values_.assign(capacity, 0.0f);
    mask_ = capacity - 1;
    size_ = 0;
    for (std::size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty) insert(old_keys[i], old_values[i]);
  }

  std::vector<std::uint64_t> keys_;
  std::vector<float> values_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

struct State {
  int j = 0;   // layers 0..j-1 remain
  int p = 0;   // normal GPUs available
  int ti = 0;  // special GPU load, grid index
  int mi = 0;  // special GPU memory, grid index
  int vi = 0;  // delay V, grid index
};

// Costs of the stage [first, last], precomputed once: the DP's inner loop only reads these.
// A stage's time and its schedule::StageMemory terms, as doubles for the DP's memory grid.
struct StageCost {
  double load = 0;       // U(first, last)
  double chain = 0;      // its part of a micro-batch's round trip: load less the deferred W
  double link_in = 0;    // C(first - 1), 0 for the first stage
  double weights = 0;    // C * W
  double stored = 0;     // bytes kept per micro-batch in flight
  double buffers = 0;    // communication buffers
  double workspace = 0;  // largest layer workspace
};

struct Choice {
  int first_layer = -1;
  bool special = false;
  State child;
  int remat = -1;  // index in StageOptions::of(first, last); -1: plain
};

class Solver {
 public:
  Solver(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
         const madpipe::partition::Discretization& d, bool allow_special, double target,
         double upper_bound, madpipe::partition::StageOptions* remat,
         const std::function<bool()>* out_of_time)
      : costs_(costs),
        platform_(platform),
        remat_(remat && remat->enabled() ? remat : nullptr),
        allow_special_(allow_special),
        target_(target),
        upper_bound_(upper_bound),
        out_of_time_(out_of_time && *out_of_time ? out_of_time : nullptr),
        memo_(1 << 16) {
    const int L = costs.num_layers();
    double total_links = 0;
    for (int l = 0; l + 1 < L; ++l) total_links += madpipe::partition::link_ms(costs, l, platform);
    nt_ = allow_special ? std::max(2, d.time_steps) : 1;
    nm_ = allow_special ? std::max(2, d.memory_steps) : 1;
    nv_ = std::max(2, d.delay_steps);
    const double t_range = costs.total_compute_ms();
    dt_ = nt_ > 1 ? t_range / (nt_ - 1) : 1.0;
    dm_ = nm_ > 1 ? static_cast<double>(platform.memory_bytes) / (nm_ - 1) : 1.0;
    // V matters through its group, ceil(V / T^), and its place in that group. With many GPUs T^
    // is a small part of ΣU + ΣC and --delay-steps values over it would give steps of about a
    // group: rounding errors of whole groups, where memory binds. There the step is made to
    // divide T^, kDelayStepsPerPeriod times: every group boundary is a grid value, and V is
    // rounded up to it, so no stage's group is counted short (the estimate never promises memory
    // that 1F1B*(T^) lacks) and the error starts again at each group. That grid also goes past
    // ΣU + ΣC: a ⊕ that starts a group skips the rest of the current one (less than T^), twice
    // per stage at most, and clamping there would count the first stages' groups short. Below
    // kManyGpus the thesis's grid is kept as it is (nearest value, clamped): an
    // estimate, which the scheduler then decides; there the exact grid changed plans both ways.
    dv_ = (costs.total_compute_ms() + total_links) / (nv_ - 1);
    if (platform.gpus >= kManyGpus && dv_ > 0 && target > 0 &&
        dv_ * kDelayStepsPerPeriod > target) {
      dv_ = target / kDelayStepsPerPeriod;
      round_delay_up_ = true;
      const double largest_delay = costs.total_compute_ms() + total_links + 2.0 * L * target;
      nv_ = static_cast<int>(std::ceil(largest_delay / dv_ - 1e-9)) + 1;
    }
    if (dt_ <= 0) dt_ = 1.0;
    if (dv_ <= 0) dv_ = 1.0;
    if (dm_ <= 0) dm_ = 1.0;
    inverse_dt_ = 1.0 / dt_;
    inverse_dm_ = 1.0 / dm_;
    inverse_dv_ = 1.0 / dv_;
    normal_gpus_ = allow_special ? platform.gpus - 1 : platform.gpus;
    inverse_target_ = 1.0 / target;
    // stage_costs_[last * L + (last - first)]: for a fixed last layer, growing leftwards.
    stage_costs_.resize(static_cast<std::size_t>(L) * L);
    for (int last = 0; last < L; ++last) {
      for (int first = last; first >= 0; --first) {
        StageCost& c = stage_costs_[static_cast<std::size_t>(last) * L + (last - first)];
        c.load = costs.compute_ms(first, last);
        // A split backward's W runs wherever the GPU is idle: 1F1B* groups sum the rest.
        c.chain = c.load - costs.backward_weight_ms(first, last);
        c.link_in = first > 0 ? madpipe::partition::link_ms(costs, first - 1, platform) : 0.0;
        const madpipe::schedule::StageMemory terms =
            madpipe::schedule::stage_memory(costs, first, last, platform);
        c.weights = static_cast<double>(terms.weights);
        c.stored = static_cast<double>(terms.stored);
        c.buffers = static_cast<double>(terms.buffers);
        c.workspace = static_cast<double>(terms.workspace);
      }
    }
  }

  State root() const { return State{costs_.num_layers(), normal_gpus_, 0, 0, 0}; }

  double solve(const State& s) {
    if (cut_) return kInf;
    const double t = s.ti * dt_;
    if (s.j == 0) return t;
    const double lower = std::max(t, (prefix(s.j).load + t) / (s.p + 1));
    if (lower >= upper_bound_) return kInf;
    const std::uint64_t key = pack(s);
    if (const float* hit = memo_.find(key)) return *hit;
    const double value = evaluate(s, nullptr);
    if (cut_) return kInf;
    // Round up so that a memoised value is never optimistic.
    float stored = static_cast<float>(value);
    if (static_cast<double>(stored) < value) stored = std::nextafter(stored, INFINITY);
    memo_.insert(key, stored);
    return stored;
  }

  // Best choice at s (children come from the memo); value of the state.
  double evaluate(const State& s, Choice* best_choice) {
    if (out_of_time_ && ++since_check_ >= 4096) {
      since_check_ = 0;
      cut_ = (*out_of_time_)();
    }
    if (cut_) return kInf;
    ++states_;
    const double t = s.ti * dt_;
    const double m = s.mi * dm_;
    const double V = s.vi * dv_;
    const double M = static_cast<double>(platform_.memory_bytes);
    const int L = costs_.num_layers();
    const StageCost* row = &stage_costs_[static_cast<std::size_t>(s.j - 1) * L];
    double best = kInf;
    if (s.p == 0) {  // everything left goes to the special GPU, as one stage
      if (!allow_special_) return kInf;
      const StageCost& c = row[s.j - 1];
      auto fits = [&](double chain, double stored, double workspace) {
        return m + c.weights + (groups(V, chain) - 1) * stored + c.buffers + workspace <= M;
      };
      if (fits(c.chain, c.stored, c.workspace)) {
        if (best_choice) *best_choice = Choice{0, true, State{0, 0, s.ti, s.mi, s.vi}};
        return t + c.load;
      }
      if (!remat_) return kInf;
      const auto& options = remat_->of(0, s.j - 1);
      for (std::size_t o = 0; o < options.size(); ++o) {
        const double load = options[o].forward_ms + options[o].backward_ms;
        if (!fits(load, static_cast<double>(options[o].stored_bytes),
                  static_cast<double>(options[o].transient_bytes)))
          continue;
        if (best_choice)
          *best_choice = Choice{0, true, State{0, 0, s.ti, s.mi, s.vi}, static_cast<int>(o)};
        return t + load;
      }
      return kInf;
    }
    const double state_lower = std::max(t, (prefix(s.j).load + t) / (s.p + 1));
    // A complete allocation found from the root bounds the stages and special-GPU loads of every
    // state evaluated after it: a value is at least each of them, so what cannot beat the
    // incumbent is pruned, and a memoised value is exact whenever it beats the incumbent of its
    // time, which only falls.
    const bool at_root = s.j == L;
    for (int i = s.j - 1; i >= 0; --i) {
      if (best <= state_lower) break;  // nothing can beat a choice that reaches the bound
      const StageCost& c = row[s.j - 1 - i];
      const double bound = std::min({best, upper_bound_, incumbent_});
      if (c.load >= bound) break;
      if (c.link_in >= bound) continue;
      // Weights and kept activations only grow as the stage grows leftwards (rematerialization
      // keeps at least the stage's input).
      const double kept = remat_ ? static_cast<double>(costs_.activation_bytes(i - 1)) : c.stored;
      if (c.weights + (groups(V, c.chain) - 1) * kept > M) break;
      // Each of the two placements takes the fastest variant that fits its memory: plain first,
      // then the rematerialization options, fastest first.
      bool normal_placed = s.p < 1, special_placed = !allow_special_;
      auto consider = [&](double load, double chain, double stored, double workspace, int option) {
        if (load >= std::min({best, upper_bound_, incumbent_})) return false;
        const int g = groups(V, chain);
        const double next_delay = oplus(oplus(V, chain), c.link_in);
        const int vi = round_delay_up_ ? grid_up(next_delay, inverse_dv_, nv_ - 1)
                                       : grid(next_delay, inverse_dv_, nv_ - 1);
        if (!normal_placed && c.weights + g * stored + c.buffers + workspace <= M) {
          normal_placed = true;
          const State child{i, s.p - 1, s.ti, s.mi, vi};
          const double value = std::max({load, c.link_in, solve(child)});
          if (value < best) {
            best = value;
            if (at_root) tighten(best);
            if (best_choice) *best_choice = Choice{i, false, child, option};
          }
        }
        const double special_load = t + load;
        const double special_memory = m + c.weights + (g - 1) * stored + c.buffers;
        if (!special_placed && special_memory + workspace <= M) {
          special_placed = true;
          const int ti = static_cast<int>(special_load * inverse_dt_ + 0.5);
          if (special_load < std::min({best, upper_bound_, incumbent_}) && ti < nt_) {
            const State child{i, s.p, ti, grid(special_memory, inverse_dm_, nm_ - 1), vi};
            const double value = std::max({special_load, c.link_in, solve(child)});
            if (value < best) {
              best = value;
              if (at_root) tighten(best);
              if (best_choice) *best_choice = Choice{i, true, child, option};
            }
          }
        }
        return !(normal_placed && special_placed);
      };
      if (!consider(c.load, c.chain, c.stored, c.workspace, -1) || !remat_) continue;
      const auto& options = remat_->of(i, s.j - 1);
      for (std::size_t o = 0; o < options.size(); ++o) {
        const double load = options[o].forward_ms + options[o].backward_ms;
        if (!consider(load, load, static_cast<double>(options[o].stored_bytes),
                      static_cast<double>(options[o].transient_bytes), static_cast<int>(o)))
          break;
      }
    }
    return best;
  }

  long long states() const { return states_; }
  bool cut() const { return cut_; }

 private:
  // With a margin: the walk back from the root re-evaluates the states of the best allocation.
  void tighten(double incumbent) { incumbent_ = std::min(incumbent_, incumbent * (1 + 1e-6)); }

  std::uint64_t pack(const State& s) const {
    std::uint64_t key = static_cast<std::uint64_t>(s.j);
    key = key * (normal_gpus_ + 1) + s.p;
    key = key * nt_ + s.ti;
    key = key * nm_ + s.mi;
    key = key * nv_ + s.vi;
    return key;
  }
  static int grid(double value, double inverse_step, int max_index) {
    return std::min(max_index, static_cast<int>(value * inverse_step + 0.5));
  }
  static int grid_up(double value, double inverse_step, int max_index) {
    return std::min(max_index, static_cast<int>(std::ceil(value * inverse_step - 1e-6)));
  }
  const StageCost& prefix(int j) const {  // the stage [0, j - 1]
    return stage_costs_[static_cast<std::size_t>(j - 1) * costs_.num_layers() + (j - 1)];
  }
  int groups(double delay, double load) const {
    return std::max(1, static_cast<int>(std::ceil((delay + load) * inverse_target_ - 1e-9)));
  }
  // x (+) y of ch. 7.1.2: stay in the group of x if x + y fits it, else start the next group.
  double oplus(double x, double y) const {
    const double gx = std::ceil(x * inverse_target_ - 1e-9);
    const double gxy = std::ceil((x + y) * inverse_target_ - 1e-9);
    return gx == gxy ? x + y : target_ * gx + y;
  }

  const madpipe::ChainCosts& costs_;
  const madpipe::Platform& platform_;
  madpipe::partition::StageOptions* remat_;
  bool allow_special_;
  double target_;
  double upper_bound_;
  double incumbent_ = kInf;  // the best period found from the root so far, with a margin
  const std::function<bool()>* out_of_time_;
  int since_check_ = 0;
  bool cut_ = false;  // out of time: every value from then on is +inf and not memoised
  int nt_ = 1, nm_ = 1, nv_ = 2;
  double dt_ = 1, dm_ = 1, dv_ = 1;
  bool round_delay_up_ = false;  // on the grid aligned with T^ (many GPUs)
  double inverse_dt_ = 1, inverse_dm_ = 1, inverse_dv_ = 1, inverse_target_ = 1;
  std::vector<StageCost> stage_costs_;
  int normal_gpus_ = 0;
  StateMemo memo_;
  long long states_ = 0;
};
}  // namespace

madpipe::partition::DpResult madpipe::partition::madpipe_dp(
    const ChainCosts& costs, const Platform& platform, const Discretization& discretization,
    bool allow_special, double target_ms, double upper_bound_ms, StageOptions* remat,
    const std::function<bool()>& out_of_time) {
  DpResult result;
  if (costs.num_layers() == 0 || platform.gpus < 1) {
    result.period_ms = kInf;
    return result;
  }
  // With one GPU there is nothing to be special among: the special GPU's memory estimate (its
  // stages keep one micro-batch fewer than their groups, thesis 7.1) would count none for the
  // chain's only stage, and a plan that cannot run would hide the ones that recompute.
  Solver solver(costs, platform, discretization, allow_special && platform.gpus > 1, target_ms,
                upper_bound_ms, remat, &out_of_time);
  const State root = solver.root();
  result.period_ms = solver.solve(root);
  if (result.period_ms == kInf) {
    result.states = solver.states();
    result.cut = solver.cut();
    return result;
  }
  // Walk the decisions back from the root: stages come out from the last to the first.
  std::vector<std::tuple<int, bool, int>> stages;  // (first layer, on the special GPU, remat)
  State s = root;
  while (s.j > 0) {
    Choice choice;
    solver.evaluate(s, &choice);
    if (choice.first_layer < 0) break;
    stages.emplace_back(choice.first_layer, choice.special, choice.remat);
    s = choice.child;
  }
  std::reverse(stages.begin(), stages.end());
  int next_gpu = 0, special_gpu = -1;
  for (std::size_t k = 0; k < stages.size(); ++k) {
    const auto& [first, special, option] = stages[k];
    const int last =
        k + 1 < stages.size() ? std::get<0>(stages[k + 1]) - 1 : costs.num_layers() - 1;
    if (option >= 0)
      result.allocation.remat.emplace(std::make_pair(first, last), remat->of(first, last)[option]);
    result.allocation.first_layers.push_back(first);
    if (special) {
      if (special_gpu < 0) special_gpu = next_gpu++;
      result.allocation.gpus.push_back(special_gpu);
    } else {
      result.allocation.gpus.push_back(next_gpu++);
    }
  }
  result.allocation.estimated_period_ms = result.period_ms;
  result.states = solver.states();
  return result;
}

// Algorithm 8; returns (achieved max(T, T^), allocation) pairs, best first. *cut tells whether
// `out_of_time` stopped it before all its DP runs.
static std::vector<std::pair<double, madpipe::partition::Allocation>> algorithm8(
    const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
    const madpipe::partition::Discretization& discretization, bool allow_special,
    const std::function<void(const std::string&)>& progress, double upper_bound_ms,
    madpipe::partition::StageOptions* remat, const std::function<bool()>& out_of_time, bool* cut) {
  using namespace madpipe;
  using namespace madpipe::partition;
  const int L = costs.num_layers();
  double total_links = 0;
  for (int l = 0; l + 1 < L; ++l) total_links += link_ms(costs, l, platform);
  double lb = std::max(costs.total_compute_ms() / platform.gpus, costs.max_layer_compute_ms());
  // Without recomputation no period exceeds running everything in sequence; with it a period
  // can, so where nothing is found below that bound the search doubles it, a few times.
  constexpr int kMaxWidenings = 6;
  double cap = std::max(lb, std::min(costs.total_compute_ms() + total_links, upper_bound_ms));
  double ub = cap;
  double target = lb;
  std::vector<double> tried{target};
  std::vector<std::pair<double, Allocation>> found;
  *cut = false;
  for (int widened = 0;; ++widened) {
    for (int iter = 0; iter < discretization.iterations; ++iter) {
      if (iter > 0 && out_of_time && out_of_time()) {
        *cut = true;
        break;
      }
      // Prune what cannot beat the best max(T, T^) so far; keep a margin for discretization.
      const DpResult run = madpipe_dp(costs, platform, discretization, allow_special, target,
                                      ub * 1.0001, remat, out_of_time);
      if (run.cut) {
        *cut = true;
        break;
      }
      const double achieved = std::max(run.period_ms, target);
      if (progress) {
        std::ostringstream line;
        line << (allow_special ? "madpipe-dp" : "contiguous-dp") << " iteration " << iter + 1 << "/"
             << discretization.iterations << ": target " << format_ms(target) << " -> period "
             << (run.period_ms == kInf ? std::string("none") : format_ms(run.period_ms)) << " ("
             << run.states << " states)";
        progress(line.str());
      }
      if (run.period_ms < kInf) {
        bool duplicate = false;
        for (auto& [period, allocation] : found)
          if (allocation == run.allocation) {
            duplicate = true;
            period = std::min(period, achieved);
          }
        if (!duplicate) found.emplace_back(achieved, run.allocation);
      }
      lb = std::max(lb, std::min(run.period_ms, target));
      ub = std::min(ub, achieved);
      if (ub - lb <= 1e-3 * ub) break;  // converged: more iterations give the same allocations
      // When the DP met its target with room to spare, the best max(T, T^) may be reached at
      // T^ = T itself: try the lower bound first (DP(T^) does not increase with T^), else bisect.
      // Far apart on many GPUs (the first bound runs everything in sequence: about P times the
      // lower one), the bounds are bisected by ratio, which reaches a given relative gap in far
      // fewer runs.
      const double middle =
          platform.gpus >= kManyGpus && ub > 8 * lb ? std::sqrt(lb * ub) : 0.5 * (lb + ub);
      const double next = run.period_ms < target && lb < target ? lb : middle;
      // Never run the same target twice (a failed T^ = lb step would repeat): bisect instead.
      target = std::find(tried.begin(), tried.end(), next) == tried.end() ? next : middle;
      tried.push_back(target);
    }
    if (!found.empty() || remat == nullptr || !remat->enabled() || *cut ||
        widened == kMaxWidenings || cap >= upper_bound_ms)
      break;
    lb = cap;
    cap = std::min(2 * cap, upper_bound_ms);
    ub = cap;
    target = cap;
    tried = {target};
    if (progress)
      progress("no allocation with a period up to " + format_ms(lb) +
               ": with recomputation, searching up to " + format_ms(cap));
  }
  // Candidates beyond the search path, from targets spread over [lower bound, first bound].
  const double first_lb =
      std::max(costs.total_compute_ms() / platform.gpus, costs.max_layer_compute_ms());
  // Only allocations that may beat the best estimate by the scheduler's measure are of use: the
  // extra runs are pruned at 1.25 times Algorithm 8's final bound.
  const double extra_bound = 1.25 * ub;
  const double first_ub = std::max(first_lb, extra_bound);
  for (int e = 0; e < discretization.extra_targets && !*cut; ++e) {
    if (out_of_time && out_of_time()) {
      *cut = true;
      break;
    }
    const double fraction = discretization.extra_targets > 1
                                ? static_cast<double>(e) / (discretization.extra_targets - 1)
                                : 0.5;
    const double extra_target = first_lb * std::pow(first_ub / first_lb, fraction);
    const DpResult run = madpipe_dp(costs, platform, discretization, allow_special, extra_target,
                                    extra_bound, remat, out_of_time);
    *cut = *cut || run.cut;
    if (run.period_ms == kInf) continue;
    const double achieved = std::max(run.period_ms, extra_target);
    bool duplicate = false;
    for (const auto& entry : found) duplicate = duplicate || entry.second == run.allocation;
    if (!duplicate) found.emplace_back(achieved, run.allocation);
  }
  if (progress && discretization.extra_targets > 0)
    progress(std::to_string(found.size()) + " distinct candidate allocations");
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return found;
}

madpipe::partition::DpCandidates madpipe::partition::dp_candidates(
    const ChainCosts& costs, const Platform& platform, const Discretization& discretization,
    bool allow_special, const std::function<void(const std::string&)>& progress,
    double upper_bound_ms, StageOptions* remat, const std::function<bool()>& out_of_time) {
  DpCandidates out;
  for (auto& [period, allocation] :
       algorithm8(costs, platform, discretization, allow_special, progress, upper_bound_ms, remat,
                  out_of_time, &out.cut)) {
    out.best_period_ms = std::min(out.best_period_ms, period);
    out.allocations.push_back(std::move(allocation));
  }
  return out;
}

std::vector<madpipe::partition::Allocation> madpipe::partition::madpipe_allocations(
    const ChainCosts& costs, const Platform& platform, const Discretization& discretization,
    bool allow_special, const std::function<void(const std::string&)>& progress,
    double upper_bound_ms, StageOptions* remat) {
  return dp_candidates(costs, platform, discretization, allow_special, progress, upper_bound_ms,
                       remat)
      .allocations;
}

double madpipe::partition::contiguous_upper_bound(const ChainCosts& costs, const Platform& platform,
                                                  const Discretization& discretization,
                                                  StageOptions* remat) {
  return dp_candidates(costs, platform, discretization, false, {}, kInf, remat).best_period_ms;
}
