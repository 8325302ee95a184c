#include "schedule/k_periodic.hpp"

#include "core/error.hpp"

static int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

madpipe::schedule::Pattern madpipe::schedule::drop_every_kth_plus_one(const Pattern& one_periodic,
                                                                      int k) {
  if (one_periodic.k != 1 || k < 1)
    throw Error(ErrorKind::Internal, "", "", "k-periodic variant needs a 1-periodic pattern");
  if (k == 1) return one_periodic;
  Pattern out;
  out.k = k;
  out.period_ms = (k + 1) * one_periodic.period_ms;
  for (int r = 0; r <= k; ++r) {
    for (const Op& op : one_periodic.ops) {
      // Copy r of the op processes original micro-batch J*(k+1) + r + shift in new period J.
      const int offset = r + op.shift;
      const int group = floor_div(offset, k + 1);
      const int position = offset - group * (k + 1);
      if (position == k) continue;  // the dropped micro-batch
      Op copy = op;
      copy.start_ms = op.start_ms + r * one_periodic.period_ms;
      copy.shift = group * k + position;
      out.ops.push_back(copy);
    }
  }
  normalize(out);
  sort_ops(out);
  return out;
}
