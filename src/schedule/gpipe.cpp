#include "schedule/gpipe.hpp"

#include <algorithm>
#include <map>

madpipe::schedule::Pattern madpipe::schedule::gpipe(const std::vector<Stage>& stages,
                                                    const Platform& platform, int micro_batches) {
  const std::vector<Op> chain = micro_batch_chain(stages, platform);
  const std::size_t half = chain.size() / 2;
  std::map<int, double> resource_free;
  std::vector<double> ready(micro_batches, 0.0);
  Pattern pattern;
  pattern.k = micro_batches;
  double end = 0;
  auto place = [&](std::size_t first, std::size_t last) {
    for (std::size_t c = first; c < last; ++c) {
      for (int m = 0; m < micro_batches; ++m) {
        Op op = chain[c];
        double& free = resource_free[resource_of(op, platform.gpus)];
        op.start_ms = std::max(free, ready[m]);
        op.shift = m;
        free = ready[m] = op.start_ms + op.duration_ms;
        end = std::max(end, ready[m]);
        pattern.ops.push_back(op);
      }
    }
  };
  place(0, half);             // all forwards (fill)
  place(half, chain.size());  // then all backwards (drain)
  pattern.period_ms = end;
  normalize(pattern);  // a zero-length last op may start exactly at the period's end
  sort_ops(pattern);
  return pattern;
}
