// Plans a model profile on 4 GPUs of 8 GiB linked at 12 GB/s with the installed planner library.
#include "madpipe.hpp"

#include <iostream>

int main(int argc, char** argv) try {
  using namespace madpipe;
  if (argc != 2) throw Error(ErrorKind::InvalidInput, "", "", "usage: embed_planner PROFILE.json");
  const Profile profile = read_profile(argv[1]);
  Platform platform;
  platform.gpus = 4;
  platform.memory_bytes = parse_bytes("8GiB");
  platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s");
  const partition::PlanResult result = partition::make_plan(profile, platform);
  if (!result.feasible) throw Error(ErrorKind::InvalidInput, argv[1], "", result.reason);
  std::cout << profile.name << ": period " << format_ms(result.plan.predicted.period_ms)
            << " per micro-batch, " << result.plan.stages.size() << " stages\n";
  for (const schedule::Stage& s : result.plan.stages)
    std::cout << "stage " << s.id << ": layers " << s.first_layer << "-" << s.last_layer
              << " on GPU " << s.gpu << '\n';
} catch (const std::exception& e) {
  std::cerr << "embed_planner: " << e.what() << '\n';
  return 1;
}
