#include "schedule/search.hpp"

#include "schedule/k_periodic.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/period_bound.hpp"
#include "schedule/retime.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>

using Generator = std::function<std::optional<madpipe::schedule::Pattern>(double)>;

namespace {
// A family's 1-periodic patterns by period, each generated once with what the memory test of
// its k-periodic variants needs: the search asks for the same periods at many k.
class GeneratedPatterns {
 public:
  struct Generated {
    madpipe::schedule::Pattern pattern;
    madpipe::schedule::InFlightPeaks peaks;
  };
  GeneratedPatterns(Generator generate, int num_stages,
                    madpipe::schedule::ScheduleSearchStats& stats)
      : generate_(std::move(generate)), num_stages_(num_stages), stats_(stats) {}
  madpipe::schedule::ScheduleSearchStats& stats() { return stats_; }
  // Records in *most_seen the largest in-flight count of the patterns generated.
  const Generated* at(double period, int* most_seen) {
    auto it = by_period_.find(period);
    if (it == by_period_.end()) {
      std::optional<Generated> generated;
      ++stats_.patterns_generated;
      if (std::optional<madpipe::schedule::Pattern> pattern = generate_(period)) {
        madpipe::schedule::InFlightPeaks peaks =
            madpipe::schedule::in_flight_peaks(*pattern, num_stages_);
        generated = Generated{std::move(*pattern), std::move(peaks)};
      }
      it = by_period_.emplace(period, std::move(generated)).first;
    }
    if (!it->second) return nullptr;
    if (most_seen)
      for (int c : it->second->peaks.stored) *most_seen = std::max(*most_seen, c);
    return &*it->second;
  }

 private:
  Generator generate_;
  int num_stages_;
  madpipe::schedule::ScheduleSearchStats& stats_;
  std::map<double, std::optional<Generated>> by_period_;
};
}  // namespace

// The family's 1-periodic pattern at period T if its k-periodic variant fits in memory (built
// only where its memory cannot be told from the 1-periodic one's).
static const madpipe::schedule::Pattern* fitting_variant(
    GeneratedPatterns& generated, double period, int k,
    const std::vector<madpipe::schedule::Stage>& stages, const madpipe::Platform& platform,
    int* most_seen = nullptr) {
  using namespace madpipe::schedule;
  const GeneratedPatterns::Generated* base = generated.at(period, most_seen);
  if (!base) return nullptr;
  std::optional<bool> fits = k_variant_fits_memory(stages, base->peaks, k, platform);
  if (!fits) {
    ++generated.stats().variants_measured;
    fits = k_variant_fits(stages, base->pattern, k, platform);
  }
  if (!*fits) return nullptr;
  return &base->pattern;
}

// Keeps the k-periodic variant of `base` (retimed when that fits) if it beats `best`. Retiming
// closes up what the dropped micro-batch leaves idle, a few percent at most in practice: where
// the 1-periodic period alone is no shorter than the best pattern's, a variant (k > 1) is not
// built. (Building and retiming a variant costs O(k) times a 1-periodic pattern: at 64 stages, most
// of the search's time.)
static void consider(std::optional<madpipe::schedule::ScheduledPattern>& best,
                     const madpipe::schedule::Pattern& base, int k, const std::string& method,
                     const std::vector<madpipe::schedule::Stage>& stages,
                     const madpipe::Platform& platform,
                     madpipe::schedule::ScheduleSearchStats& stats) {
  using namespace madpipe::schedule;
  if (k > 1 && best && base.period_ms >= best->pattern.normalized_period_ms()) return;
  const Pattern candidate = drop_every_kth_plus_one(base, k);
  if (!fits_memory(stages, candidate, platform)) return;  // k_variant_fits_memory said it fits
  ++stats.candidates_retimed;
  std::optional<Pattern> tight = retime(candidate, stages, platform);
  const Pattern& chosen = (tight && fits_memory(stages, *tight, platform)) ? *tight : candidate;
  if (!best || chosen.normalized_period_ms() < best->pattern.normalized_period_ms() * (1 - 1e-9))
    best = ScheduledPattern{chosen, method};
}

double madpipe::schedule::busiest_resource_ms(const std::vector<Stage>& stages,
                                              const Platform& platform) {
  std::map<int, double> load;
  for (const PipelineResource& r : pipeline_resources(stages, platform))
    load[resource_of(r.forward, platform.gpus)] += r.load_ms();
  double busiest = 0;
  for (const auto& [resource, busy] : load) busiest = std::max(busiest, busy);
  return busiest;
}

std::optional<madpipe::schedule::ScheduledPattern> madpipe::schedule::schedule_under_memory(
    const std::vector<Stage>& stages, const Platform& platform,
    const ScheduleSearchOptions& options) {
  const std::vector<PipelineResource> resources = pipeline_resources(stages, platform);
  double total = 0;
  for (const PipelineResource& r : resources) total += r.load_ms();
  const double lo = busiest_resource_ms(stages, platform);
  if (lo >= options.give_up_at_ms) return std::nullopt;
  if (options.give_up_at_ms < std::numeric_limits<double>::infinity() &&
      memory_period_bound_ms(stages, platform) >= options.give_up_at_ms)
    return std::nullopt;
  const double hi_start = std::max(total, lo) * (1 + 1e-9);
  const int max_k = options.max_k > 0 ? options.max_k : static_cast<int>(resources.size());

  const auto out_of_time = [&options] { return options.out_of_time && options.out_of_time(); };
  ScheduleSearchStats ignored;
  ScheduleSearchStats& stats = options.stats ? *options.stats : ignored;
  std::optional<ScheduledPattern> best;
  for (PatternFamily family : options.families) {
    Generator generate;
    std::string name;
    if (family == PatternFamily::OneFOneBStar) {
      if (!is_contiguous_allocation(stages)) continue;
      generate = [&](double T) { return one_f_one_b_star(stages, platform, T); };
      name = "1f1b*";
    } else if (family == PatternFamily::GuidedModulo) {
      if (is_contiguous_allocation(stages)) continue;  // it is 1F1B* there
      generate = [&](double T) { return guided_modulo_schedule(stages, platform, T); };
      name = "guided-modulo";
    } else {
      const bool late = family == PatternFamily::ModuloLate;
      generate = [&stages, &platform, late](double T) {
        return modulo_schedule(
            stages, platform, T,
            late ? ModuloDirection::AsLateAsPossible : ModuloDirection::AsSoonAsPossible);
      };
      name = late ? "modulo-alap" : "modulo";
    }
    GeneratedPatterns generated(std::move(generate), static_cast<int>(stages.size()), stats);
    // A k-periodic variant drops one micro-batch in k + 1, which lowers the memory of the stages
    // that keep more than k in flight: k only goes up to the most any 1-periodic pattern of the
    // family keeps (at the busiest resource's load, and wherever the k = 1 search looked).
    if (out_of_time()) {
      if (best) return best;
      if (auto found = fitting_variant(generated, hi_start, 1, stages, platform))
        consider(best, *found, 1, name, stages, platform, stats);
      continue;
    }
    int most_seen = 0;
    fitting_variant(generated, lo, 1, stages, platform, &most_seen);
    for (int k = 1; k <= max_k; ++k) {
      if (k > 1 && k >= most_seen) break;
      if (best && out_of_time()) return best;
      int* record = k == 1 ? &most_seen : nullptr;
      const std::string method = k == 1 ? name : name + ", k=" + std::to_string(k);
      double hi = hi_start;
      const Pattern* found = fitting_variant(generated, hi, k, stages, platform, record);
      if (!found) {
        if (k == 1 && family == PatternFamily::OneFOneBStar) break;  // one group is the least
        continue;
      }
      double low = lo;
      for (int iter = 0; iter < 30 && hi - low > 1e-5 * hi; ++iter) {
        if (out_of_time()) {
          consider(best, *found, k, method, stages, platform, stats);
          return best;
        }
        const double mid = 0.5 * (low + hi);
        if (auto p = fitting_variant(generated, mid, k, stages, platform, record)) {
          hi = mid;
          found = p;
        } else {
          low = mid;
        }
      }
      if (family != PatternFamily::OneFOneBStar && k == 1) {
        // Greedy placement is not monotone in T: probe a grid below the binary search's answer.
        const int probes = 24;
        for (int i = 0; i < probes && !out_of_time(); ++i) {
          const double T = lo + (hi - lo) * i / probes;
          if (auto p = fitting_variant(generated, T, k, stages, platform, record))
            consider(best, *p, k, name, stages, platform, stats);
        }
      }
      consider(best, *found, k, method, stages, platform, stats);
      // Nothing beats the busiest resource's load.
      if (best && best->pattern.normalized_period_ms() <= lo * (1 + 1e-9)) return best;
    }
  }
  return best;
}
