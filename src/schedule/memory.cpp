#include "schedule/memory.hpp"

#include "core/error.hpp"
#include "schedule/k_periodic.hpp"
#include "schedule/residue_table.hpp"
#include "schedule/shared_weights.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace {
// One residue class of micro-batches of a stage: it starts holding memory at f_start + j*T (the
// start of its F, or the end of its B for what W keeps) and holds it for `span` ms.
struct FlightClass {
  double f_start = 0;
  double span = 0;
  int shift = 0;  // of the F op whose micro-batches these are
};
}  // namespace

// a * b, saturated at the limits of std::int64_t (see saturated_add).
static std::int64_t saturated_mul(std::int64_t a, std::int64_t b) {
  std::int64_t product = 0;
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) == (b < 0) ? INT64_MAX : INT64_MIN;
}

// shift mod k in [0, k), without overflow for any shift and k >= 1.
static int residue(int shift, int k) {
  const int r = shift % k;
  return r < 0 ? r + k : r;
}

// Micro-batches of the class in flight at time t (start <= t < end, ends within eps count as
// ended so that back-to-back B/F pairs are not double counted).
static int in_flight_at(const FlightClass& c, double t, double period) {
  const double eps = 1e-9 * period;
  const double x = t - c.f_start + eps;
  const double count = std::floor(x / period) - std::floor((x - c.span) / period);
  // Bounded so that the sums of counts fit: shifts far apart (a plan read from a file) give
  // spans of billions of periods, or infinite ones.
  constexpr double kLimit = 1 << 20;
  if (!(count > -kLimit)) return -static_cast<int>(kLimit);
  return count < kLimit ? static_cast<int>(count) : static_cast<int>(kLimit);
}

// The first op of `kind` of each stage and residue mod k: at(stage, r), null where none.
class OpsByResidue {
 public:
  OpsByResidue(const madpipe::schedule::Pattern& pattern, madpipe::schedule::OpKind kind,
               int num_stages, int k)
      : ops_(num_stages, k, nullptr) {
    for (const auto& op : pattern.ops)
      if (op.kind == kind) ops_.set_if_empty(op.stage, residue(op.shift, k), &op);
  }
  const madpipe::schedule::Op* at(int stage, int r) const { return ops_.get(stage, r); }

 private:
  madpipe::schedule::ResidueTable<const madpipe::schedule::Op*> ops_;
};

// Time from the start of `from` to the end of `to` for the same micro-batch: micro-batch i runs
// an op of shift s in period (i - s) / k.
static double span_between(const madpipe::schedule::Op& from, const madpipe::schedule::Op& to,
                           double period, int k) {
  const double periods_between =
      (static_cast<double>(from.shift) - static_cast<double>(to.shift)) / k;
  return periods_between * period + to.start_ms + to.duration_ms - from.start_ms;
}

// Per stage, the residue classes of micro-batches holding its stored bytes (from the start of F
// to the end of B) and, with `kept`, those holding its weight_kept_bytes (from the end of B to
// the end of W, split stages only).
static std::vector<std::vector<FlightClass>> flight_classes(
    const madpipe::schedule::Pattern& pattern, int num_stages, bool kept = false) {
  using madpipe::schedule::OpKind;
  std::vector<std::vector<FlightClass>> classes(num_stages);
  const int k = std::max(1, pattern.k);
  const double T = pattern.period_ms;
  const OpsByResidue backwards(pattern, OpKind::B, num_stages, k);
  std::optional<OpsByResidue> weights;
  if (kept) weights.emplace(pattern, OpKind::W, num_stages, k);
  for (const auto& f : pattern.ops) {
    if (f.kind != OpKind::F || f.stage < 0 || f.stage >= num_stages) continue;
    const int r = residue(f.shift, k);
    const madpipe::schedule::Op* b = backwards.at(f.stage, r);
    if (!b) continue;
    if (!kept) {
      classes[f.stage].push_back(FlightClass{f.start_ms, span_between(f, *b, T, k), f.shift});
      continue;
    }
    const madpipe::schedule::Op* w = weights->at(f.stage, r);
    if (!w) continue;
    madpipe::schedule::Op b_end = *b;
    b_end.start_ms += b->duration_ms;
    b_end.duration_ms = 0;
    classes[f.stage].push_back(FlightClass{b_end.start_ms, span_between(b_end, *w, T, k), f.shift});
  }
  return classes;
}

namespace {
// Classes of micro-batches that each hold `weight` bytes while in flight.
struct WeightedClasses {
  const std::vector<FlightClass>* classes = nullptr;
  std::int64_t weight = 0;
};
}  // namespace

// The largest sum of weight x in-flight count at the start of a class (in flight only grows when
// a class starts), each class counted at every start (quadratic): the way for spans too long for
// the sweep's arithmetic.
static std::int64_t peak_by_probing(const std::vector<WeightedClasses>& sets, double period) {
  std::int64_t peak = INT64_MIN;
  for (const WeightedClasses& probed : sets) {
    for (const FlightClass& probe : *probed.classes) {
      std::int64_t bytes = 0;
      for (const WeightedClasses& set : sets) {
        std::int64_t count = 0;
        for (const FlightClass& c : *set.classes) count += in_flight_at(c, probe.f_start, period);
        bytes = madpipe::schedule::saturated_add(bytes, saturated_mul(count, set.weight));
      }
      peak = std::max(peak, bytes);
    }
  }
  return peak == INT64_MIN ? 0 : peak;
}

// Same as peak_by_probing in O(m log m) for m classes. A class is in flight at t for each
// integer j with f_start - eps + jT <= t < f_start + span - eps + jT (in_flight_at): counted
// exactly at the first probe p0, its count changes by +1 at (f_start - eps) mod T and by -1 at
// (f_start + span - eps) mod T; a sweep over one period from p0 visits every probe.
static std::int64_t peak_in_flight(const std::vector<WeightedClasses>& sets, double period) {
  constexpr double kLongestSpanInPeriods = 1 << 20;
  const FlightClass* first = nullptr;
  for (const WeightedClasses& set : sets) {
    for (const FlightClass& c : *set.classes) {
      if (!std::isfinite(c.f_start) || !std::isfinite(c.span) ||
          std::fabs(c.span) > kLongestSpanInPeriods * period ||
          std::fabs(c.f_start) > kLongestSpanInPeriods * period)
        return peak_by_probing(sets, period);
      if (!first) first = &c;
    }
  }
  if (!first) return 0;
  const double p0 = first->f_start;
  const double eps = 1e-9 * period;
  const auto after_p0 = [&](double t) {
    const double d = t - p0;
    const double wrapped = d - std::floor(d / period) * period;
    return wrapped >= period ? 0.0 : wrapped;
  };
  struct Event {
    double at = 0;       // time after p0, in [0, T)
    bool probe = false;  // at equal times, counts change before a probe reads them
    std::int64_t delta = 0;
  };
  std::vector<Event> events;
  std::int64_t bytes = 0;
  for (const WeightedClasses& set : sets) {
    std::int64_t count = 0;
    for (const FlightClass& c : *set.classes) {
      count += in_flight_at(c, p0, period);
      events.push_back(Event{after_p0(c.f_start - eps), false, set.weight});
      events.push_back(Event{after_p0(c.f_start + c.span - eps), false, -set.weight});
      events.push_back(Event{after_p0(c.f_start), true, 0});
    }
    bytes = madpipe::schedule::saturated_add(bytes, saturated_mul(count, set.weight));
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.at != b.at ? a.at < b.at : a.probe < b.probe;
  });
  std::int64_t peak = bytes;
  for (const Event& event : events) {
    if (event.at <= 0) continue;  // at p0 itself: already in the exact count
    if (event.probe)
      peak = std::max(peak, bytes);
    else
      bytes = madpipe::schedule::saturated_add(bytes, event.delta);
  }
  return peak;
}

std::vector<int> madpipe::schedule::concurrent_activations(const Pattern& pattern, int num_stages) {
  return in_flight_peaks(pattern, num_stages).stored;
}

// The one formula of the memory model's terms.
static madpipe::schedule::StageMemory stage_terms(
    std::int64_t weight_bytes, std::int64_t stored_bytes, std::int64_t workspace_bytes,
    std::int64_t received_bytes, std::int64_t sent_bytes, const madpipe::Platform& platform) {
  madpipe::schedule::StageMemory memory;
  memory.weights = saturated_mul(platform.weight_copies, weight_bytes);
  memory.buffers = madpipe::schedule::saturated_add(saturated_mul(2, received_bytes),
                                                    saturated_mul(2, sent_bytes));
  memory.workspace = workspace_bytes;
  memory.stored = stored_bytes;
  return memory;
}

std::int64_t madpipe::schedule::StageMemory::total(std::int64_t in_flight) const noexcept {
  return saturated_add(saturated_add(fixed(), saturated_mul(in_flight, stored)), workspace);
}

madpipe::schedule::StageMemory madpipe::schedule::stage_memory(const ChainCosts& costs, int first,
                                                               int last, const Platform& platform) {
  return stage_terms(costs.weight_bytes(first, last), costs.stored_bytes(first, last),
                     costs.workspace_bytes(first, last),
                     first > 0 ? costs.activation_bytes(first - 1) : 0,
                     last + 1 < costs.num_layers() ? costs.activation_bytes(last) : 0, platform);
}

std::int64_t madpipe::schedule::layer_alone_bytes(const ChainCosts& costs, int layer,
                                                  const Platform& platform) {
  StageMemory terms = stage_memory(costs, layer, layer, platform);
  terms.buffers = 0;
  return terms.total(1);
}

madpipe::schedule::StageMemory madpipe::schedule::stage_memory(const std::vector<Stage>& stages,
                                                               int s, const Platform& platform) {
  const Stage& stage = stages[s];
  const bool receives = s > 0 && stages[s - 1].gpu != stage.gpu;
  const bool sends = s + 1 < static_cast<int>(stages.size()) && stages[s + 1].gpu != stage.gpu;
  return stage_terms(stage.weight_bytes, stage.stored_bytes, stage.workspace_bytes,
                     receives ? stages[s - 1].output_bytes : 0, sends ? stage.output_bytes : 0,
                     platform);
}

// Adds a stage's static terms to its GPU's: weights and buffers add up, the workspace is the
// largest.
static void add_static_terms(madpipe::schedule::GpuMemory& memory,
                             const madpipe::schedule::StageMemory& terms) {
  using madpipe::schedule::saturated_add;
  memory.weights = saturated_add(memory.weights, terms.weights);
  memory.buffers = saturated_add(memory.buffers, terms.buffers);
  memory.workspace = std::max(memory.workspace, terms.workspace);
}

madpipe::schedule::GpuMemory madpipe::schedule::static_memory(const std::vector<Stage>& stages,
                                                              int gpu, const Platform& platform) {
  GpuMemory memory;
  for (int s = 0; s < static_cast<int>(stages.size()); ++s)
    if (stages[s].gpu == gpu) add_static_terms(memory, stage_memory(stages, s, platform));
  memory.weights -= saturated_mul(platform.weight_copies, repeated_shared_bytes(stages, gpu));
  return memory;
}

// static_memory of every GPU, in one pass over the stages (stages on no GPU of the platform left
// out).
static std::vector<madpipe::schedule::GpuMemory> static_memory_of_gpus(
    const std::vector<madpipe::schedule::Stage>& stages, const madpipe::Platform& platform) {
  std::vector<madpipe::schedule::GpuMemory> memory(platform.gpus);
  for (int s = 0; s < static_cast<int>(stages.size()); ++s)
    if (stages[s].gpu >= 0 && stages[s].gpu < platform.gpus)
      add_static_terms(memory[stages[s].gpu], madpipe::schedule::stage_memory(stages, s, platform));
  // A GPU holds each tied weight once, however many of its stages use it.
  std::vector<bool> holds_shared(memory.size(), false);
  for (const madpipe::schedule::Stage& stage : stages)
    if (!stage.shared_weights.empty() && stage.gpu >= 0 && stage.gpu < platform.gpus)
      holds_shared[stage.gpu] = true;
  for (int gpu = 0; gpu < platform.gpus; ++gpu)
    if (holds_shared[gpu])
      memory[gpu].weights -= saturated_mul(platform.weight_copies,
                                           madpipe::schedule::repeated_shared_bytes(stages, gpu));
  return memory;
}

// Per-GPU memory of stages whose micro-batches are in flight as `classes` (stored bytes) and
// `kept` (what W keeps) in a pattern of period `period`; stops at the first GPU whose total
// exceeds `stop_above` (the GPUs after it are left at zero).
static std::vector<madpipe::schedule::GpuMemory> memory_of_classes(
    const std::vector<madpipe::schedule::Stage>& stages,
    const std::vector<std::vector<FlightClass>>& classes,
    const std::vector<std::vector<FlightClass>>& kept, double period,
    const madpipe::Platform& platform, std::int64_t stop_above) {
  using namespace madpipe::schedule;
  const int n = static_cast<int>(stages.size());
  std::vector<std::vector<int>> stages_on(platform.gpus);
  for (int s = 0; s < n; ++s)
    if (stages[s].gpu >= 0 && stages[s].gpu < platform.gpus) stages_on[stages[s].gpu].push_back(s);
  const std::vector<GpuMemory> statics = static_memory_of_gpus(stages, platform);
  std::vector<GpuMemory> memory(platform.gpus);
  for (int g = 0; g < platform.gpus; ++g) {
    memory[g] = statics[g];
    if (memory[g].total() > stop_above) return memory;
  }
  if (period <= 0) return memory;
  for (int g = 0; g < platform.gpus; ++g) {
    std::vector<WeightedClasses> on_gpu;
    for (int s : stages_on[g]) {
      on_gpu.push_back(WeightedClasses{&classes[s], stages[s].stored_bytes});
      on_gpu.push_back(WeightedClasses{&kept[s], stages[s].weight_kept_bytes});
    }
    const std::int64_t peak = std::max<std::int64_t>(0, peak_in_flight(on_gpu, period));
    memory[g].activations = peak;
    if (memory[g].total() > stop_above) return memory;
  }
  return memory;
}

// evaluate_memory, which stops at the first GPU whose total exceeds `stop_above`.
static std::vector<madpipe::schedule::GpuMemory> memory_until(
    const std::vector<madpipe::schedule::Stage>& stages, const madpipe::schedule::Pattern& pattern,
    const madpipe::Platform& platform, std::int64_t stop_above) {
  const int n = static_cast<int>(stages.size());
  if (pattern.period_ms <= 0)
    return memory_of_classes(stages, {}, {}, pattern.period_ms, platform, stop_above);
  return memory_of_classes(stages, flight_classes(pattern, n), flight_classes(pattern, n, true),
                           pattern.period_ms, platform, stop_above);
}

// The classes of drop_every_kth_plus_one(one_periodic, k) from those of the 1-periodic pattern:
// copy r of a class starts r periods later, and the copy of the micro-batch the variant drops
// is left out (as there: copy r of an op of shift s holds micro-batch r + s of each k + 1).
static std::vector<std::vector<FlightClass>> k_variant_classes(
    const std::vector<std::vector<FlightClass>>& one_periodic, int k, double period) {
  std::vector<std::vector<FlightClass>> out(one_periodic.size());
  for (std::size_t s = 0; s < one_periodic.size(); ++s) {
    for (const FlightClass& c : one_periodic[s]) {
      for (int r = 0; r <= k; ++r) {
        const int offset = r + c.shift;
        const int position = residue(offset, k + 1);
        if (position == k) continue;
        const int shift = (offset - position) / (k + 1) * k + position;
        out[s].push_back(FlightClass{c.f_start + r * period, c.span, shift});
      }
    }
  }
  return out;
}

std::vector<madpipe::schedule::GpuMemory> madpipe::schedule::evaluate_memory(
    const std::vector<Stage>& stages, const Pattern& pattern, const Platform& platform) {
  return memory_until(stages, pattern, platform, INT64_MAX);
}

bool madpipe::schedule::fits_memory(const std::vector<Stage>& stages, const Pattern& pattern,
                                    const Platform& platform) {
  for (const GpuMemory& m : memory_until(stages, pattern, platform, platform.memory_bytes))
    if (m.total() > platform.memory_bytes) return false;
  return true;
}

std::vector<madpipe::schedule::GpuMemory> madpipe::schedule::evaluate_k_variant_memory(
    const std::vector<Stage>& stages, const Pattern& one_periodic, int k, const Platform& platform,
    std::int64_t stop_above) {
  if (one_periodic.k != 1 || k < 1)
    throw Error(ErrorKind::Internal, "", "", "k-periodic variant needs a 1-periodic pattern");
  if (k == 1 || one_periodic.period_ms <= 0)
    return memory_until(stages, one_periodic, platform, stop_above);
  const int n = static_cast<int>(stages.size());
  const double T = one_periodic.period_ms;
  return memory_of_classes(stages, k_variant_classes(flight_classes(one_periodic, n), k, T),
                           k_variant_classes(flight_classes(one_periodic, n, true), k, T),
                           (k + 1) * T, platform, stop_above);
}

bool madpipe::schedule::k_variant_fits(const std::vector<Stage>& stages,
                                       const Pattern& one_periodic, int k,
                                       const Platform& platform) {
  for (const GpuMemory& m :
       evaluate_k_variant_memory(stages, one_periodic, k, platform, platform.memory_bytes))
    if (m.total() > platform.memory_bytes) return false;
  return true;
}

madpipe::schedule::InFlightPeaks madpipe::schedule::in_flight_peaks(const Pattern& one_periodic,
                                                                    int num_stages) {
  InFlightPeaks peaks;
  peaks.stored.assign(num_stages, 0);
  peaks.kept.assign(num_stages, 0);
  if (one_periodic.period_ms <= 0) return peaks;
  const auto stored = flight_classes(one_periodic, num_stages);
  const auto kept = flight_classes(one_periodic, num_stages, true);
  const auto peak = [&one_periodic](const std::vector<FlightClass>& classes) {
    const std::int64_t count =
        peak_in_flight({WeightedClasses{&classes, 1}}, one_periodic.period_ms);
    return static_cast<int>(std::clamp<std::int64_t>(count, 0, INT_MAX));
  };
  for (int s = 0; s < num_stages; ++s) {
    peaks.stored[s] = peak(stored[s]);
    peaks.kept[s] = peak(kept[s]);
  }
  return peaks;
}

std::optional<bool> madpipe::schedule::k_variant_fits_memory(const std::vector<Stage>& stages,
                                                             const InFlightPeaks& peaks, int k,
                                                             const Platform& platform) {
  const int n = static_cast<int>(stages.size());
  if (k < 1 || static_cast<int>(peaks.stored.size()) != n ||
      static_cast<int>(peaks.kept.size()) != n)
    return std::nullopt;
  for (const Stage& stage : stages)
    if (stage.gpu < 0 || stage.gpu >= platform.gpus) return std::nullopt;
  // Of c consecutive micro-batches, the variant keeps at most c - floor(c / (k + 1)) and at least
  // c - ceil(c / (k + 1)); both grow with c. k = 1 is the pattern itself.
  const auto most_kept = [k](std::int64_t c) { return k == 1 ? c : c - c / (k + 1); };
  const auto least_kept = [k](std::int64_t c) { return k == 1 ? c : c - (c + k) / (k + 1); };
  std::vector<GpuMemory> most = static_memory_of_gpus(stages, platform);
  std::vector<GpuMemory> least = most;
  std::vector<int> stages_on(platform.gpus, 0);
  for (int s = 0; s < n; ++s) {
    const int g = stages[s].gpu;
    ++stages_on[g];
    // Upper bound: every stage at its own peak. Lower bound: the stage alone at its peak.
    most[g].activations = saturated_add(
        most[g].activations,
        saturated_add(saturated_mul(most_kept(peaks.stored[s]), stages[s].stored_bytes),
                      saturated_mul(most_kept(peaks.kept[s]), stages[s].weight_kept_bytes)));
    least[g].activations = std::max(
        least[g].activations, saturated_mul(least_kept(peaks.stored[s]), stages[s].stored_bytes));
  }
  bool all_fit = true;
  for (int g = 0; g < platform.gpus; ++g) {
    if (least[g].total() > platform.memory_bytes) return false;
    if (most[g].total() > platform.memory_bytes) all_fit = false;
  }
  if (all_fit) return true;
  // One stage on a GPU, nothing kept for W: its micro-batches in flight are consecutive and some
  // period of the variant aligns them with the fewest dropped, so the upper bound is its memory.
  for (int s = 0; s < n; ++s)
    if (stages_on[stages[s].gpu] != 1 || stages[s].weight_kept_bytes != 0) return std::nullopt;
  return false;
}

std::vector<std::int64_t> madpipe::schedule::totals(const std::vector<GpuMemory>& memory) {
  std::vector<std::int64_t> out;
  for (const GpuMemory& m : memory) out.push_back(m.total());
  return out;
}
