#pragma once

namespace madpipe::runtime {

// Throws Error{InvalidInput} when `madpipe train` was started by torchrun (torch.distributed's
// launcher, which starts no MPI job: every process would train alone) rather than by mpirun, srun
// or another MPI launcher. Reads the environment; call it before MPI starts.
void check_started_by_an_mpi_launcher();

}  // namespace madpipe::runtime
