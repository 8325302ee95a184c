#pragma once

// Factories of the backends compiled in (MADPIPE_HAVE_CBC, MADPIPE_HAVE_GLPK). Internal to the
// solver layer; no CBC or GLPK header leaks out of src/solver/backends/*.cpp.

#include "solver/solve.hpp"

#include <memory>

namespace madpipe::solver::detail {

#ifdef MADPIPE_HAVE_CBC
std::unique_ptr<Backend> make_cbc_backend();
#endif
#ifdef MADPIPE_HAVE_GLPK
std::unique_ptr<Backend> make_glpk_backend();
#endif

}  // namespace madpipe::solver::detail
