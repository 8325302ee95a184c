#include "partition/memory_floor.hpp"

#include "partition/allocation.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

namespace {
constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();

// Memory of a stage [first, last] keeping nca micro-batches (schedule::stage_memory): plain, with
// the stage's least-memory option, and lower bounds that need no ROTOR table.
class StageMemoryBounds {
 public:
  StageMemoryBounds(const madpipe::ChainCosts& costs, const madpipe::Platform& platform,
                    madpipe::partition::StageOptions* remat)
      : costs_(costs), platform_(platform), remat_(remat && remat->enabled() ? remat : nullptr) {
    if (remat_ && remat_->settings().offload == madpipe::partition::OffloadStrategy::None)
      fill_peak_lower_bounds();
  }

  bool has_options() const { return remat_ != nullptr; }
  int layers() const { return costs_.num_layers(); }

  std::int64_t fixed(int first, int last) const { return terms(first, last).fixed(); }
  std::int64_t plain(int first, int last, int nca) const { return terms(first, last).total(nca); }
  // At most the memory of every way to run the stage. A single layer only recomputes nothing
  // (remat::least_memory_option); offloading may still lower it.
  std::int64_t lower_bound(int first, int last, int nca) const {
    const std::int64_t plain_bytes = plain(first, last, nca);
    if (!remat_ ||
        (first == last && remat_->settings().offload == madpipe::partition::OffloadStrategy::None))
      return plain_bytes;
    return std::min(plain_bytes, fixed(first, last) + peak_lower_bound(first, last));
  }
  // The least memory of the stage (plain or an option); `saves` tells which.
  std::int64_t least(int first, int last, int nca, bool* saves) {
    const std::int64_t plain_bytes = plain(first, last, nca);
    *saves = false;
    if (!remat_) return plain_bytes;
    const std::int64_t option = remat_->least_bytes(first, last, nca);
    if (option < 0 || fixed(first, last) + option >= plain_bytes) return plain_bytes;
    *saves = true;
    return fixed(first, last) + option;
  }
  // Whether the stage fits `budget` in some way. Options are looked at only when `may_compute`
  // allows it (their first use may build a ROTOR table); otherwise *unknown is set.
  bool fits(int first, int last, int nca, std::int64_t budget,
            const std::function<bool()>& may_compute, bool* unknown) {
    if (plain(first, last, nca) <= budget) return true;
    if (!remat_ || lower_bound(first, last, nca) > budget) return false;
    if (!may_compute()) {
      *unknown = true;
      return false;
    }
    bool saves = false;
    return least(first, last, nca, &saves) <= budget;
  }

 private:
  madpipe::schedule::StageMemory terms(int first, int last) const {
    return madpipe::schedule::stage_memory(costs_, first, last, platform_);
  }
  std::size_t index(int first, int last) const {
    return static_cast<std::size_t>(first) * costs_.num_layers() + last;
  }

  // Every ROTOR sequence of the stage holds, at the F^all and at the B of each layer l, the
  // stage's input, l's input (beyond the first layer), what F^all keeps for l and, at B_l, the
  // gradients of l's output and input and l's backward workspace (remat::replay_sequence).
  // Without offloading, nothing else can go below that.
  void fill_peak_lower_bounds() {
    const int L = costs_.num_layers();
    peak_lower_bound_.assign(static_cast<std::size_t>(L) * L, 0);
    auto need = [&](int l, std::int64_t in, std::int64_t out) {
      const std::int64_t saved = costs_.stored_bytes(l, l) - costs_.activation_bytes(l - 1);
      return in + saved + out +
             std::max(out + in + costs_.backward_workspace_bytes(l),
                      costs_.forward_workspace_bytes(l));
    };
    for (int first = 0; first < L; ++first) {
      std::int64_t inner = 0;  // layers strictly between first and last
      for (int last = first; last < L; ++last) {
        if (last - 1 > first)
          inner = std::max(inner, need(last - 1, costs_.activation_bytes(last - 2),
                                       costs_.activation_bytes(last - 1)));
        std::int64_t bound = need(first, 0, last > first ? costs_.activation_bytes(first) : 0);
        if (last > first)
          bound = std::max({bound, inner, need(last, costs_.activation_bytes(last - 1), 0)});
        peak_lower_bound_[index(first, last)] = costs_.activation_bytes(first - 1) + bound;
      }
    }
  }
  std::int64_t peak_lower_bound(int first, int last) const {
    if (peak_lower_bound_.empty()) return 0;  // offloading may send anything to the host
    return peak_lower_bound_[index(first, last)];
  }

  const madpipe::ChainCosts& costs_;
  const madpipe::Platform& platform_;
  madpipe::partition::StageOptions* remat_;
  std::vector<std::int64_t> peak_lower_bound_;
};

// Min-max over contiguous partitions into at most P stages of `stage_bytes(first, last, nca)`:
// O(P L^2). Returns the least maximum (kNone when nothing partitions) and the partition's first
// layers.
std::int64_t min_max_partition(int L, int P, const madpipe::partition::InFlight& in_flight,
                               const std::function<std::int64_t(int, int, int)>& stage_bytes,
                               std::vector<int>* first_layers) {
  // best[q][i]: least max for layers i..L-1 cut into exactly q stages; next[q][i]: first layer of
  // the second of them.
  const auto size = static_cast<std::size_t>(L + 1);
  std::vector<std::vector<std::int64_t>> best(P + 1, std::vector<std::int64_t>(size, kNone));
  std::vector<std::vector<int>> next(P + 1, std::vector<int>(size, -1));
  best[0][L] = 0;
  for (int q = 1; q <= P; ++q) {
    const int nca = std::max(1, in_flight(q));
    for (int i = L - q; i >= 0; --i) {
      for (int j = i; j <= L - q; ++j) {
        const std::int64_t rest = best[q - 1][j + 1];
        if (rest >= best[q][i]) continue;
        const std::int64_t value = std::max(stage_bytes(i, j, nca), rest);
        if (value < best[q][i]) {
          best[q][i] = value;
          next[q][i] = j + 1;
        }
      }
    }
  }
  int best_q = -1;
  for (int q = 1; q <= P; ++q)
    if (best[q][0] != kNone && (best_q < 0 || best[q][0] < best[best_q][0])) best_q = q;
  if (best_q < 0) return kNone;
  first_layers->clear();
  for (int q = best_q, i = 0; q > 0; i = next[q][i], --q) first_layers->push_back(i);
  return best[best_q][0];
}

// Whether layers 0..L-1 cut into at most P stages that each fit `budget` (with options); the
// first layers of such a cut. Depth first, failures remembered. Sets
// *unknown when a stage's options were needed but `may_compute` refused them.
bool partition_fits(StageMemoryBounds& memory, int P, const madpipe::partition::InFlight& in_flight,
                    std::int64_t budget, const std::function<bool()>& may_compute,
                    std::vector<int>* first_layers, bool* unknown) {
  const int L = memory.layers();
  std::vector<std::vector<char>> failed(P + 1,
                                        std::vector<char>(static_cast<std::size_t>(L + 1), 0));
  std::function<bool(int, int)> cut = [&](int i, int q) {  // layers i.. in exactly q stages
    if (q == 0) return i == L;
    if (L - i < q || failed[q][i]) return false;
    const int nca = std::max(1, in_flight(q));
    // Plain stages first, longest first; then stages that need an option, shortest first (their
    // ROTOR tables are the cheapest).
    for (int j = L - q; j >= i; --j) {
      if (memory.plain(i, j, nca) > budget || !cut(j + 1, q - 1)) continue;
      first_layers->push_back(i);
      return true;
    }
    for (int j = i; j <= L - q; ++j) {
      if (memory.plain(i, j, nca) <= budget) continue;  // tried above
      if (!memory.fits(i, j, nca, budget, may_compute, unknown) || !cut(j + 1, q - 1)) continue;
      first_layers->push_back(i);
      return true;
    }
    failed[q][i] = 1;
    return false;
  };
  // Most stages first: shorter stages fit more easily and have cheaper options.
  for (int q = P; q >= 1; --q) {
    first_layers->clear();
    if (cut(0, q)) {
      std::reverse(first_layers->begin(), first_layers->end());
      return true;
    }
  }
  return false;
}
}  // namespace

madpipe::partition::MemoryFloor madpipe::partition::memory_floor(
    const ChainCosts& costs, const Platform& platform, const InFlight& in_flight,
    StageOptions* remat, const std::function<bool()>& out_of_time) {
  MemoryFloor floor;
  const int L = costs.num_layers();
  if (L == 0) return floor;
  const int P = std::max(1, std::min(platform.gpus, L));
  StageMemoryBounds plain_memory(costs, platform, nullptr);
  StageMemoryBounds memory(costs, platform, remat);
  std::vector<int> first_layers;
  // Without options the min-max is exact; with them it bounds the floor from above (plain
  // stages) and from below (each stage at its lower bound), and a bisection between the two
  // looks at the options of the stages that may fit.
  floor.bytes = min_max_partition(
      L, P, in_flight, [&](int i, int j, int nca) { return plain_memory.plain(i, j, nca); },
      &first_layers);
  if (memory.has_options()) {
    std::vector<int> unused;
    std::int64_t lo = min_max_partition(
        L, P, in_flight, [&](int i, int j, int nca) { return memory.lower_bound(i, j, nca); },
        &unused);
    std::int64_t hi = floor.bytes;  // fits
    const std::function<bool()> may_compute = [&] { return !out_of_time || !out_of_time(); };
    // To 1/1000 of the floor: the options are rounded to ROTOR slots (1/200 of a stage's peak)
    // anyway, and each step below the floor looks at many stages' options.
    // The lower bound itself first: often a layer that no option shrinks binds, and it is exact.
    bool first_step = true;
    while (hi - lo > hi / 1000) {
      const std::int64_t mid = first_step ? lo : lo + (hi - lo) / 2;
      first_step = false;
      std::vector<int> cut;
      bool unknown = false;
      if (partition_fits(memory, P, in_flight, mid, may_compute, &cut, &unknown)) {
        hi = mid;
        first_layers = std::move(cut);
      } else if (unknown) {
        floor.cut = true;
        break;  // out of time: the floor is somewhere in [lo, hi]
      } else {
        lo = mid + 1;
      }
    }
    floor.bytes = hi;
    floor.at_least_bytes = lo;
  } else {
    floor.at_least_bytes = floor.bytes;
  }
  floor.fits = true;
  // The stage that needs the floor: the fullest of the cut that fits it (after a bisection the
  // floor is within its precision of that stage's need, not always equal to it).
  const int stages = static_cast<int>(first_layers.size());
  std::int64_t fullest = -1;
  for (int s = 0; s < stages; ++s) {
    const int first = first_layers[s];
    const int last = s + 1 < stages ? first_layers[s + 1] - 1 : L - 1;
    const int nca = std::max(1, in_flight(stages - s));
    bool saves = false;
    const std::int64_t need = memory.least(first, last, nca, &saves);
    if (need <= fullest) continue;
    fullest = need;
    floor.binding_first = first;
    floor.binding_last = last;
    floor.binding_saves_memory = saves;
    floor.binding_in_flight = nca;
  }
  // Without rematerialization a GPU keeps each of its layers' weights, what one micro-batch of
  // each keeps, and its layers' largest workspace.
  if (!memory.has_options()) {
    std::int64_t largest_layer = 0, everything = 0;
    for (int l = 0; l < L; ++l) {
      const madpipe::schedule::StageMemory layer =
          madpipe::schedule::stage_memory(costs, l, l, platform);
      largest_layer =
          std::max(largest_layer, madpipe::schedule::layer_alone_bytes(costs, l, platform));
      everything += layer.weights + layer.stored;
    }
    // A tied weight is held once at least, though each of its layers counts it.
    for (const madpipe::TiedWeight& group : costs.tied_weights())
      everything -=
          platform.weight_copies * static_cast<std::int64_t>(group.layers.size() - 1) * group.bytes;
    const std::int64_t spread = (everything + platform.gpus - 1) / platform.gpus;
    floor.any_allocation_bytes = std::min(floor.bytes, std::max(largest_layer, spread));
  }
  return floor;
}
