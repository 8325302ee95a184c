#pragma once

#include "schedule/pattern.hpp"

namespace madpipe::schedule {

// The k-periodic variant of a 1-periodic pattern (thesis ch. 5.2.2): unroll it k + 1 times and
// drop every (k+1)-th micro-batch. The result has period (k+1) T, processes k micro-batches per
// period and keeps fewer micro-batches in flight on the stages that had k + 1 or more. For k = 1
// the input is returned unchanged.
Pattern drop_every_kth_plus_one(const Pattern& one_periodic, int k);

}  // namespace madpipe::schedule
