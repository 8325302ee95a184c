#include "runtime/config/launcher_check.hpp"

#include "core/error.hpp"

#include <cstdlib>
#include <string>

namespace {
bool is_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}
}  // namespace

void madpipe::runtime::check_started_by_an_mpi_launcher() {
  // Open MPI, MPICH/Hydra, PMIx (srun --mpi=pmix) and Slurm's PMI-2 each set one of these.
  for (const char* mpi : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (is_set(mpi)) return;
  if (!is_set("TORCHELASTIC_RUN_ID")) return;  // a single process, or a launcher we do not know
  const char* world = std::getenv("WORLD_SIZE");
  const std::string ranks = world != nullptr && *world != '\0' ? world : "N";
  throw Error(ErrorKind::InvalidInput, "", "launcher",
              "madpipe train was started by torchrun, which starts no MPI job: its processes "
              "would each train alone. Start it with mpirun -np " +
                  ranks + " madpipe train ... (or srun under Slurm); see docs/runtime.md");
}
