#include "schedule/search.hpp"

#include "schedule/k_periodic.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/retime.hpp"

#include <algorithm>
#include <functional>
#include <map>

using Generator = std::function<std::optional<madpipe::schedule::Pattern>(double)>;

// The most micro-batches any stage keeps in flight in a 1-periodic pattern.
static int most_in_flight(const madpipe::schedule::Pattern& pattern, int num_stages) {
  const std::vector<int> nca = madpipe::schedule::concurrent_activations(pattern, num_stages);
  return nca.empty() ? 0 : *std::max_element(nca.begin(), nca.end());
}

// The k-periodic variant of the family's pattern at period T, if it fits in memory. Records in
// *most_seen the largest in-flight count of the 1-periodic patterns generated.
static std::optional<madpipe::schedule::Pattern> fitting_variant(
    const Generator& generate, double period, int k,
    const std::vector<madpipe::schedule::Stage>& stages, const madpipe::Platform& platform,
    int* most_seen = nullptr) {
  std::optional<madpipe::schedule::Pattern> base = generate(period);
  if (!base) return std::nullopt;
  if (most_seen)
    *most_seen = std::max(*most_seen, most_in_flight(*base, static_cast<int>(stages.size())));
  madpipe::schedule::Pattern variant = madpipe::schedule::drop_every_kth_plus_one(*base, k);
  if (!madpipe::schedule::fits_memory(stages, variant, platform)) return std::nullopt;
  return variant;
}

static void consider(std::optional<madpipe::schedule::ScheduledPattern>& best,
                     const madpipe::schedule::Pattern& candidate, const std::string& method,
                     const std::vector<madpipe::schedule::Stage>& stages,
                     const madpipe::Platform& platform) {
  using namespace madpipe::schedule;
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
  const double hi_start = std::max(total, lo) * (1 + 1e-9);
  const int max_k = options.max_k > 0 ? options.max_k : static_cast<int>(resources.size());

  const auto out_of_time = [&options] { return options.out_of_time && options.out_of_time(); };
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
    // A k-periodic variant drops one micro-batch in k + 1, which lowers the memory of the stages
    // that keep more than k in flight: k only goes up to the most any 1-periodic pattern of the
    // family keeps (at the busiest resource's load, and wherever the k = 1 search looked).
    if (out_of_time()) {
      if (best) return best;
      if (auto found = fitting_variant(generate, hi_start, 1, stages, platform))
        consider(best, *found, name, stages, platform);
      continue;
    }
    int most_seen = 0;
    fitting_variant(generate, lo, 1, stages, platform, &most_seen);
    for (int k = 1; k <= max_k; ++k) {
      if (k > 1 && k >= most_seen) break;
      if (best && out_of_time()) return best;
      int* record = k == 1 ? &most_seen : nullptr;
      const std::string method = k == 1 ? name : name + ", k=" + std::to_string(k);
      double hi = hi_start;
      std::optional<Pattern> found = fitting_variant(generate, hi, k, stages, platform, record);
      if (!found) {
        if (k == 1 && family == PatternFamily::OneFOneBStar) break;  // one group is the least
        continue;
      }
      double low = lo;
      for (int iter = 0; iter < 30 && hi - low > 1e-5 * hi; ++iter) {
        if (out_of_time()) {
          consider(best, *found, method, stages, platform);
          return best;
        }
        const double mid = 0.5 * (low + hi);
        if (auto p = fitting_variant(generate, mid, k, stages, platform, record)) {
          hi = mid;
          found = std::move(p);
        } else {
          low = mid;
        }
      }
      if (family != PatternFamily::OneFOneBStar && k == 1) {
        // Greedy placement is not monotone in T: probe a grid below the binary search's answer.
        const int probes = 24;
        for (int i = 0; i < probes && !out_of_time(); ++i) {
          const double T = lo + (hi - lo) * i / probes;
          if (auto p = fitting_variant(generate, T, k, stages, platform, record))
            consider(best, *p, name, stages, platform);
        }
      }
      consider(best, *found, method, stages, platform);
      // Nothing beats the busiest resource's load.
      if (best && best->pattern.normalized_period_ms() <= lo * (1 + 1e-9)) return best;
    }
  }
  return best;
}
