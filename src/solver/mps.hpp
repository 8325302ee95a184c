#pragma once

#include "solver/model.hpp"

#include <ostream>
#include <string>

namespace madpipe::solver {

// Writes the model in free MPS (minimization; needs no backend). Sections: NAME, ROWS (N obj, then
// L/G/E/N per row; a row with two finite, different bounds is G with a RANGES entry), COLUMNS
// (integer columns between MARKER INTORG/INTEND), RHS (the objective offset as -offset on obj),
// RANGES, BOUNDS (FX, BV, FR, MI, LO, UP, PL where the default [0, +inf) does not hold), ENDATA.
// Names are written as given; the objective row is "obj" unless a row holds that name.
void write_mps(const Model& model, std::ostream& out);
// Same, to a file (temporary file, then rename); throws Error(Io) naming the path.
void write_mps(const Model& model, const std::string& path);

}  // namespace madpipe::solver
