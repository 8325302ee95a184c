#pragma once

#include "core/profile.hpp"
#include "plan/plan.hpp"

#include <string>
#include <vector>

namespace madpipe::plan {

struct Violation {
  std::string field;    // JSON pointer into the plan, e.g. "/pattern/ops/3/start_ms"
  std::string problem;  // lower-case, no trailing period
};

// Checks every rule of FORMATS.md: stages cover the chain in order, each stage's F and B appear k
// times with shifts covering every residue mod k, transfers exactly where neighbouring stages sit
// on different GPUs with the right link, durations match the stages, dependencies hold for every
// micro-batch, no two ops overlap on a GPU or a link, and predicted memory lies between the
// pattern's requirement and the platform memory. Returns all violations, not just the first.
std::vector<Violation> validate(const Plan& plan);
// Also checks that stage costs match the profile the plan claims to be for.
std::vector<Violation> validate(const Plan& plan, const Profile& profile);

// Throws Error{InvalidInput} listing the violations when there are any.
void throw_if_invalid(const std::vector<Violation>& violations, const std::string& file = "");

}  // namespace madpipe::plan
