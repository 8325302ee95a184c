#pragma once

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "schedule/shared_weights.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::partition {

// Data parallelism over pipelines: G GPUs run D replicas of a P-GPU pipeline (G = D * P). Global
// rank r runs pipeline position r % P of replica r / P, so the GPUs of one pipeline are
// consecutive and the D replicas of a position are P ranks apart. A training step processes
// `global_batch` samples: m micro-batches of the profile's batch per replica, a flush, then every
// stage all-reduces its gradients over its D replicas.

struct DataParallelOptions {
  int global_batch = 0;  // samples per training step, over all replicas
  // Latency of one message of a ring all-reduce, which sends 2 (D - 1) of them.
  double all_reduce_latency_ms = schedule::kCollectiveStepLatencyMs;
  // How each replica's pipeline is planned; `planner.progress` gets a line per choice of D.
  // planner.time_limit_s bounds the whole request: each choice plans with an even share of
  // what the choices before it left.
  PlannerOptions planner;
};

// One way to split the GPUs: D replicas of a P-GPU pipeline.
struct DataParallelChoice {
  int replicas = 0;       // D
  int pipeline_gpus = 0;  // P = G / D
  int micro_batches = 0;  // m per replica and step; 0 when the global batch does not split
  bool feasible = false;
  std::string reason;   // why the choice is rejected, when not feasible
  std::string warning;  // a feasible choice to look at twice (m < P: mostly fill and drain)
  plan::Plan plan;      // one replica's pipeline, plan.replicas = D; when feasible
  std::vector<std::string> notes;  // make_plan's notes on that plan

  double period_ms = 0;      // normalized period of the pipeline
  double pipeline_ms = 0;    // m micro-batches with a flush, simulated
  double fill_drain_ms = 0;  // pipeline_ms - m * period_ms
  double all_reduce_ms = 0;  // the busiest GPU's all-reduces, end to end
  double all_reduce_exposed_ms =
      0;                     // what of them (and of a tied weight's exchange) runs past the flush
  double step_ms = 0;        // pipeline_ms + all_reduce_exposed_ms
  double samples_per_s = 0;  // global_batch / step
  std::int64_t peak_memory_bytes = 0;  // the fullest GPU (all-reducing adds nothing)
  double planning_seconds = 0;

  // The share of the pipeline time spent filling and draining it.
  double bubble() const noexcept { return pipeline_ms > 0 ? fill_drain_ms / pipeline_ms : 0.0; }
};

struct DataParallelResult {
  // Feasible choices by decreasing throughput (ties: more replicas first), the chosen one first;
  // then the rejected ones by decreasing D.
  std::vector<DataParallelChoice> choices;
  double planning_seconds = 0;

  bool feasible() const noexcept { return !choices.empty() && choices.front().feasible; }
};

// Tries every D dividing platform.gpus and plans the pipeline of each with make_plan(). A choice
// is rejected (with its reason) when the global batch does not split into m >= 1 micro-batches per
// replica, when P exceeds the number of layers, or when no plan of P GPUs fits. Throws
// Error{InvalidInput} for a global batch that is not a positive multiple of the profile's batch,
// or an invalid platform.
DataParallelResult plan_data_parallel(const Profile& profile, const Platform& platform,
                                      const DataParallelOptions& options);

// The platform of one replica's P GPUs under the rank layout: its own node structure when every
// replica sits the same way on the nodes (inside one node, or on whole nodes), else every link at
// the slowest bandwidth, which no replica is slower than. `aligned`, when given, says which.
Platform replica_platform(const Platform& platform, int pipeline_gpus, bool* aligned = nullptr);

// The bandwidth of the ring all-reducing pipeline position `position` over its replicas: within a
// node when all of them share one, else between nodes.
double all_reduce_bandwidth(const Platform& platform, int pipeline_gpus, int position);

// Ring all-reduce of `bytes` over `replicas` ranks: 2 (D - 1) / D * bytes / bandwidth plus
// 2 (D - 1) messages of `latency_ms`; 0 for one replica.
using schedule::ring_all_reduce_ms;

// The step of one replica's plan: m micro-batches with a flush (simulated, ops as soon as they
// can run in the pattern's order), then each stage all-reduces its gradients from the end of its
// last backward, one stage after the other on each GPU. Fills the timing fields of `choice`
// (from period_ms to samples_per_s) from choice.plan, micro_batches and replicas.
void estimate_step(DataParallelChoice& choice, const Platform& platform, int global_batch,
                   double all_reduce_latency_ms);

}  // namespace madpipe::partition
