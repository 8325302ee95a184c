#include "partition/allocation.hpp"

#include <algorithm>
#include <map>
#include <utility>

bool madpipe::partition::operator==(const Allocation& a, const Allocation& b) {
  return a.first_layers == b.first_layers && a.gpus == b.gpus;
}

std::vector<madpipe::schedule::Stage> madpipe::partition::stages_of(const ChainCosts& costs,
                                                                    const Allocation& allocation) {
  std::vector<schedule::Stage> stages =
      schedule::make_stages(costs, allocation.first_layers, allocation.gpus);
  for (schedule::Stage& stage : stages) {
    const auto it = allocation.remat.find({stage.first_layer, stage.last_layer});
    if (it != allocation.remat.end()) apply_remat(stage, it->second);
  }
  return stages;
}

void madpipe::partition::apply_remat(schedule::Stage& stage, const remat::RematOption& option) {
  remat::RematChain chain = remat::make_remat_chain(stage.last_layer - stage.first_layer + 1);
  chain.first_layer = stage.first_layer;
  stage.forward_ms = option.forward_ms;
  stage.backward_ms = option.backward_ms;
  stage.stored_bytes = option.stored_bytes;
  stage.workspace_bytes = option.transient_bytes;
  stage.backward_weight_ms = 0;  // an operation sequence runs its backward whole
  stage.weight_kept_bytes = 0;
  int forwards = 0;
  bool offloads = false;
  for (const remat::RematOp& op : option.sequence) {
    forwards += op.kind == remat::RematOpKind::ForwardAll ||
                op.kind == remat::RematOpKind::ForwardCheckpoint ||
                op.kind == remat::RematOpKind::ForwardNone;
    offloads = offloads || op.kind == remat::RematOpKind::Offload;
  }
  stage.offload = offloads ? schedule::OffloadStrategy::Host : schedule::OffloadStrategy::None;
  stage.remat = forwards > chain.length() || !offloads ? schedule::RematStrategy::Rotor
                                                       : schedule::RematStrategy::None;
  stage.sequence = remat::to_string(option.sequence, chain);
}

double madpipe::partition::link_ms(const ChainCosts& costs, int layer, const Platform& platform) {
  return 2 * schedule::transfer_ms(costs.activation_bytes(layer), platform);
}

double madpipe::partition::fastest_link_ms(const ChainCosts& costs, int layer,
                                           const Platform& platform) {
  return link_ms(costs, layer, with_uniform_links(platform, fastest_link_bandwidth(platform)));
}

namespace {
// Bytes exchanged per micro-batch between two GPUs a < b (activations and gradients).
struct GpuPairTraffic {
  int a = 0;
  int b = 0;
  std::int64_t bytes = 0;
};

// Union-find over GPU ids with the size of each set.
class GpuClusters {
 public:
  explicit GpuClusters(int gpus) : parent_(gpus), size_(gpus, 1) {
    for (int g = 0; g < gpus; ++g) parent_[g] = g;
  }
  int find(int g) const {
    while (parent_[g] != g) g = parent_[g];
    return g;
  }
  int size(int g) const { return size_[find(g)]; }
  void merge(int x, int y) {  // the larger root joins the smaller one: deterministic
    x = find(x);
    y = find(y);
    if (x == y) return;
    if (y < x) std::swap(x, y);
    parent_[y] = x;
    size_[x] += size_[y];
  }

 private:
  std::vector<int> parent_;
  std::vector<int> size_;
};
}  // namespace

static std::vector<GpuPairTraffic> pair_traffic(const madpipe::ChainCosts& costs,
                                                const madpipe::partition::Allocation& allocation) {
  std::map<std::pair<int, int>, std::int64_t> bytes;
  const std::size_t n = allocation.gpus.size();
  for (std::size_t s = 0; s + 1 < n; ++s) {
    const int x = allocation.gpus[s], y = allocation.gpus[s + 1];
    if (x == y) continue;
    bytes[std::minmax(x, y)] += 2 * costs.activation_bytes(allocation.first_layers[s + 1] - 1);
  }
  std::vector<GpuPairTraffic> out;
  for (const auto& [pair, total] : bytes) out.push_back({pair.first, pair.second, total});
  return out;
}

// (slowest link's time, sum of the links' times) with GPU g renamed label[g].
static std::pair<double, double> link_score(const std::vector<GpuPairTraffic>& traffic,
                                            const madpipe::Platform& platform,
                                            const std::vector<int>& label) {
  double worst = 0, sum = 0;
  for (const GpuPairTraffic& t : traffic) {
    const double bandwidth = madpipe::link_bandwidth(platform, label[t.a], label[t.b]);
    const double ms = bandwidth > 0 ? static_cast<double>(t.bytes) / bandwidth : 0.0;
    worst = std::max(worst, ms);
    sum += ms;
  }
  return {worst, sum};
}

// Clusters of GPUs, heaviest pairs first, no larger than a node (Kruskal with a size cap); the
// clusters then go to the nodes first-fit, largest first; a cluster that fits no node is spread
// over the free slots. Returns the new id of every GPU.
static std::vector<int> node_labels(const std::vector<GpuPairTraffic>& traffic,
                                    const madpipe::Platform& platform,
                                    const std::vector<int>& used_in_order) {
  const int per_node = platform.gpus_per_node;
  GpuClusters clusters(platform.gpus);
  std::vector<GpuPairTraffic> heaviest = traffic;
  std::stable_sort(heaviest.begin(), heaviest.end(),
                   [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
  for (const GpuPairTraffic& t : heaviest)
    if (clusters.find(t.a) != clusters.find(t.b) &&
        clusters.size(t.a) + clusters.size(t.b) <= per_node)
      clusters.merge(t.a, t.b);
  // Members of each cluster in order of first use; clusters largest first, then by first use.
  std::map<int, std::vector<int>> members;
  std::vector<int> roots;
  for (int g : used_in_order) {
    const int root = clusters.find(g);
    if (members.find(root) == members.end()) roots.push_back(root);
    members[root].push_back(g);
  }
  std::stable_sort(roots.begin(), roots.end(),
                   [&](int x, int y) { return members[x].size() > members[y].size(); });
  const int nodes = madpipe::num_nodes(platform);
  std::vector<int> taken(nodes, 0);
  auto capacity = [&](int node) { return std::min(per_node, platform.gpus - node * per_node); };
  std::vector<int> label(platform.gpus, -1);
  auto place = [&](int gpu, int node) { label[gpu] = node * per_node + taken[node]++; };
  for (int root : roots) {
    const std::vector<int>& group = members[root];
    int target = -1;
    for (int node = 0; node < nodes && target < 0; ++node)
      if (capacity(node) - taken[node] >= static_cast<int>(group.size())) target = node;
    for (int gpu : group) {
      int node = target;
      for (int n = 0; n < nodes && node < 0; ++n)
        if (taken[n] < capacity(n)) node = n;
      place(gpu, node);
    }
  }
  // Idle GPUs take the slots left, in order.
  int next = 0;
  std::vector<bool> slot_taken(platform.gpus, false);
  for (int l : label)
    if (l >= 0) slot_taken[l] = true;
  for (int& l : label) {
    if (l >= 0) continue;
    while (slot_taken[next]) ++next;
    l = next;
    slot_taken[next] = true;
  }
  return label;
}

madpipe::partition::Allocation madpipe::partition::place_on_nodes(const ChainCosts& costs,
                                                                  const Platform& platform,
                                                                  const Allocation& allocation) {
  if (has_uniform_links(platform) || allocation.gpus.empty()) return allocation;
  const std::vector<GpuPairTraffic> traffic = pair_traffic(costs, allocation);
  if (traffic.empty()) return allocation;
  std::vector<int> used_in_order;
  for (int g : allocation.gpus)
    if (std::find(used_in_order.begin(), used_in_order.end(), g) == used_in_order.end())
      used_in_order.push_back(g);
  std::vector<int> identity(platform.gpus);
  for (int g = 0; g < platform.gpus; ++g) identity[g] = g;
  const std::vector<int> label = node_labels(traffic, platform, used_in_order);
  const auto before = link_score(traffic, platform, identity);
  const auto after = link_score(traffic, platform, label);
  const bool better =
      after.first < before.first * (1 - 1e-9) ||
      (after.first <= before.first * (1 + 1e-9) && after.second < before.second * (1 - 1e-9));
  if (!better) return allocation;
  Allocation placed = allocation;
  for (int& g : placed.gpus) g = label[g];
  return placed;
}
