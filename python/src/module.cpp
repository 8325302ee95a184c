// The compiled core of the `madpipe` Python package: the planner library behind functions that
// take and return madpipe.profile/1 and madpipe.plan/1 documents as JSON text. The modules of
// python/madpipe/ wrap them in the package's Python API; errors become madpipe.Error with the
// messages the command line prints, its options named as keyword arguments (_errors.py).
#include "plan_views.hpp"
#include "planning_request.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/compare.hpp"
#include "partition/infeasible.hpp"
#include "partition/plan_or_explain.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/torch_schedule.hpp"
#include "plan/validate.hpp"
#include "schedule/pattern.hpp"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

namespace nb = nanobind;
using nlohmann::json;

namespace {

// JSON text from Python: a parse error names the document, as the file readers do.
json parse(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    madpipe::throw_invalid(what, "", std::string("invalid JSON: ") + e.what());
  }
}

madpipe::Profile profile_of(const std::string& text, const std::string& file) {
  return madpipe::profile_from_json(parse(text, file), file);
}

madpipe::plan::Plan plan_of(const std::string& text, const std::string& file) {
  return madpipe::plan::plan_from_json(parse(text, file), file);
}

const char* kind_name(madpipe::ErrorKind kind) {
  switch (kind) {
    case madpipe::ErrorKind::InvalidInput:
      return "invalid_input";
    case madpipe::ErrorKind::Io:
      return "io";
    case madpipe::ErrorKind::Unsupported:
      return "unsupported";
    case madpipe::ErrorKind::Solver:
      return "solver";
    case madpipe::ErrorKind::Runtime:
      return "runtime";
    case madpipe::ErrorKind::Internal:
      return "internal";
  }
  return "internal";
}

// Sets the Python error madpipe/_errors.py makes of `e`: a madpipe.Error, or its subclass
// madpipe.NoPlanFits.
void raise_madpipe_error(const madpipe::Error& e, bool no_plan_fits = false) {
  nb::object error =
      nb::module_::import_("madpipe._errors")
          .attr("error_from_planner")(e.what(), nb::arg("kind") = kind_name(e.kind()),
                                      nb::arg("file") = e.file(), nb::arg("field") = e.field(),
                                      nb::arg("problem") = e.problem(),
                                      nb::arg("no_plan_fits") = no_plan_fits);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
}

// Progress lines go to the Python callable; Ctrl-C stops planning between two lines.
std::function<void(const std::string&)> progress_to(nb::object callback) {
  return [callback](const std::string& line) {
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (!callback.is_none()) callback(line);
  };
}

nb::dict result_dict(const madpipe::partition::PlanResult& result) {
  nb::dict out;
  out["feasible"] = result.feasible;
  out["plan"] = result.feasible ? madpipe::plan::plan_to_json(result.plan).dump() : std::string();
  out["reason"] = result.reason;
  out["notes"] = result.notes;
  out["planning_seconds"] = result.planning_seconds;
  out["cut_by_time_limit"] = result.cut_by_time_limit;
  std::vector<std::pair<std::string, double>> phases;
  for (const madpipe::partition::PhaseTime& phase : result.phases)
    phases.emplace_back(phase.phase, phase.seconds);
  out["phases"] = phases;
  return out;
}

madpipe::partition::PlanningRequest request_of(const std::string& request_text) {
  return madpipe::python::planning_request_from_json(parse(request_text, "request"));
}

nb::dict make_plan(const std::string& profile_text, const std::string& profile_file,
                   const std::string& request_text, nb::object progress) {
  const madpipe::Profile profile = profile_of(profile_text, profile_file);
  madpipe::partition::PlanningRequest request = request_of(request_text);
  request.options.progress = progress_to(std::move(progress));
  return result_dict(madpipe::partition::make_plan(profile, request.platform, request.options));
}

// madpipe.plan(): the plan, or madpipe.Error with the command's message; madpipe.NoPlanFits when
// the planner found no plan, after which the only error plan_or_explain() throws is its
// explanation.
nb::dict plan_or_explain(const std::string& profile_text, const std::string& profile_file,
                         const std::string& request_text, nb::object progress) {
  const madpipe::Profile profile = profile_of(profile_text, profile_file);
  madpipe::partition::PlanningRequest request = request_of(request_text);
  request.options.progress = progress_to(std::move(progress));
  bool found_none = false;
  madpipe::partition::Explaining explaining;
  explaining.announce = [&](const std::string& reason) {
    found_none = true;
    request.options.progress(reason + "; searching for what would fit");
  };
  try {
    return result_dict(madpipe::partition::plan_or_explain(profile, request.platform,
                                                           request.options, explaining));
  } catch (const madpipe::Error& e) {
    if (!found_none) throw;
    raise_madpipe_error(e, true);
    throw nb::python_error();
  }
}

// madpipe.compare(): each algorithm gets the whole time limit and plans with the options as they
// are (rematerialization included); one dict per algorithm, in order.
nb::list compare(const std::string& profile_text, const std::string& profile_file,
                 const std::string& request_text, const std::vector<std::string>& algorithms,
                 nb::object progress) {
  const madpipe::Profile profile = profile_of(profile_text, profile_file);
  const madpipe::partition::PlanningRequest request = request_of(request_text);
  std::vector<madpipe::partition::Algorithm> compared;
  for (const std::string& name : algorithms) {
    madpipe::partition::PlannerOptions options;
    madpipe::partition::set_request_field(options, "algorithm", name, "algorithm");
    compared.push_back(options.algorithm);
  }
  madpipe::partition::ComparisonSettings settings;
  settings.shared_time_limit = false;
  settings.remat_apart = false;
  settings.progress_of = [&progress](madpipe::partition::Algorithm) {
    return progress_to(progress);
  };
  const madpipe::partition::Comparison comparison = madpipe::partition::compare_algorithms(
      profile, request.platform, request.options, compared, settings);
  nb::list rows;
  for (const madpipe::partition::ComparisonRow& row : comparison.rows) {
    nb::dict out = result_dict(row.plan);
    out["ratio_to_best"] = row.ratio_to_best;
    out["ratio_to_lower_bound"] = row.ratio_to_lower_bound;
    rows.append(out);
  }
  return rows;
}

std::vector<std::string> names_of(const std::vector<madpipe::partition::Algorithm>& algorithms) {
  std::vector<std::string> names;
  for (madpipe::partition::Algorithm a : algorithms)
    names.emplace_back(madpipe::partition::to_string(a));
  return names;
}

// The defaults of madpipe.plan()'s keywords that the planner owns.
nb::dict planning_defaults() {
  const madpipe::partition::PlanningRequest defaults;
  nb::dict out;
  out["time_limit"] = defaults.options.time_limit_s;
  out["remat_slots"] = defaults.options.remat.slots;
  out["weight_copies"] = defaults.platform.weight_copies;
  out["compared_algorithms"] = names_of(madpipe::partition::compared_algorithms());
  return out;
}

std::string explain_infeasible(const std::string& reason, const std::string& profile_text,
                               const std::string& profile_file, const std::string& request_text,
                               double time_left_s) {
  const madpipe::Profile profile = profile_of(profile_text, profile_file);
  madpipe::partition::PlanningRequest request =
      madpipe::python::planning_request_from_json(parse(request_text, "request"));
  request.options.time_limit_s = time_left_s;
  return madpipe::partition::explain_infeasible(reason, profile, request.platform, request.options);
}

std::vector<std::pair<std::string, std::string>> validate(
    const std::string& plan_text, const std::string& plan_file,
    const std::optional<std::string>& profile_text, const std::string& profile_file) {
  const madpipe::plan::Plan plan = plan_of(plan_text, plan_file);
  const std::vector<madpipe::plan::Violation> violations =
      profile_text ? madpipe::plan::validate(plan, profile_of(*profile_text, profile_file))
                   : madpipe::plan::validate(plan);
  std::vector<std::pair<std::string, std::string>> out;
  for (const madpipe::plan::Violation& v : violations) out.emplace_back(v.field, v.problem);
  return out;
}

nb::dict simulate(const std::string& plan_text, const std::string& plan_file, int micro_batches,
                  const std::string& policy) {
  const madpipe::plan::Plan plan = plan_of(plan_text, plan_file);
  madpipe::plan::throw_if_invalid(madpipe::plan::validate(plan), plan_file);
  madpipe::plan::SimOptions options;
  if (micro_batches < 0) madpipe::throw_invalid("", "micro_batches", "must be >= 0");
  options.micro_batches = micro_batches;
  if (policy == "asap") {
    options.policy = madpipe::plan::StartPolicy::Asap;
  } else if (policy != "timetable") {
    madpipe::throw_invalid("", "policy",
                           "unknown policy '" + policy + "' (valid: timetable, asap)");
  }
  const madpipe::plan::SimResult result = madpipe::plan::simulate(plan, options);
  nb::dict out;
  out["micro_batches"] = result.micro_batches;
  out["step_ms"] = result.step_ms;
  out["steady_period_ms"] = result.steady_period_ms;
  out["steady_normalized_ms"] = result.steady_normalized_ms;
  out["peak_memory_bytes"] = result.peak_memory_bytes;
  nb::list ops;
  for (const madpipe::plan::SimOp& op : result.ops) {
    nb::dict o;
    o["kind"] = madpipe::schedule::to_string(op.kind);
    o["stage"] = op.stage;
    o["micro_batch"] = op.micro_batch;
    o["resource"] = op.resource;
    o["start_ms"] = op.start_ms;
    o["end_ms"] = op.end_ms;
    ops.append(o);
  }
  out["ops"] = ops;
  return out;
}

double lower_bound(const std::string& profile_text, const std::string& profile_file,
                   const std::string& request_text) {
  const madpipe::partition::PlanningRequest request =
      madpipe::python::planning_request_from_json(parse(request_text, "request"));
  return madpipe::partition::lower_bound_period_ms(profile_of(profile_text, profile_file),
                                                   request.platform);
}

std::int64_t smallest_feasible_memory(const std::string& profile_text,
                                      const std::string& profile_file,
                                      const std::string& request_text) {
  const madpipe::partition::PlanningRequest request =
      madpipe::python::planning_request_from_json(parse(request_text, "request"));
  return madpipe::partition::smallest_feasible_memory(profile_of(profile_text, profile_file),
                                                      request.platform, request.options);
}

nb::dict export_torch(const std::string& plan_text, const std::string& plan_file,
                      int micro_batches) {
  const madpipe::plan::Plan plan = plan_of(plan_text, plan_file);
  madpipe::plan::throw_if_invalid(madpipe::plan::validate(plan), plan_file);
  const madpipe::plan::TorchSchedule schedule = madpipe::plan::torch_schedule(plan, micro_batches);
  nb::dict out;
  out["actions"] = schedule.actions;
  out["stage_to_rank"] = schedule.stage_to_rank;
  out["csv"] = madpipe::plan::torch_schedule_csv(schedule);
  out["stages"] = madpipe::plan::torch_stages_text(plan, schedule);
  return out;
}

// Plan.summary()'s figures (plan_views.hpp); `profile_text` None: without the profile's.
nb::dict plan_details(const std::string& plan_text, const std::string& plan_file,
                      const std::optional<std::string>& profile_text,
                      const std::string& profile_file) {
  const madpipe::plan::Plan plan = plan_of(plan_text, plan_file);
  madpipe::plan::throw_if_invalid(madpipe::plan::validate(plan), plan_file);
  if (!profile_text) return madpipe::python::plan_details(plan, nullptr);
  const madpipe::Profile profile = profile_of(*profile_text, profile_file);
  return madpipe::python::plan_details(plan, &profile);
}

std::string plan_svg(const std::string& plan_text, const std::string& plan_file,
                     int micro_batches) {
  const madpipe::plan::Plan plan = plan_of(plan_text, plan_file);
  madpipe::plan::throw_if_invalid(madpipe::plan::validate(plan), plan_file);
  if (micro_batches < 0) madpipe::throw_invalid("", "micro_batches", "must be >= 0");
  return madpipe::python::plan_svg(plan, micro_batches);
}

std::vector<std::string> algorithm_names() {
  return names_of(madpipe::partition::all_algorithms());
}

}  // namespace

NB_MODULE(_madpipe, m) {
  m.doc() = "madpipe's planner (C++); use the functions of the madpipe package instead";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const madpipe::Error& e) {
      raise_madpipe_error(e);
    }
  });

  m.def(
      "read_json_file",
      [](const std::string& path) { return madpipe::read_json_file(path).dump(); },
      nb::arg("path"));
  m.def("write_file_atomically", &madpipe::write_file_atomically, nb::arg("path"), nb::arg("text"));
  m.def(
      "check_profile",
      [](const std::string& text, const std::string& file) {
        return madpipe::profile_to_json(profile_of(text, file)).dump();
      },
      nb::arg("text"), nb::arg("file"));
  m.def(
      "check_plan",
      [](const std::string& text, const std::string& file) {
        return madpipe::plan::plan_to_json(plan_of(text, file)).dump();
      },
      nb::arg("text"), nb::arg("file"));
  m.def(
      "parse_bytes",
      [](const std::string& text, const std::string& field) {
        return madpipe::parse_bytes(text, field);
      },
      nb::arg("text"), nb::arg("field"));
  m.def(
      "parse_bandwidth",
      [](const std::string& text, const std::string& field) {
        return madpipe::parse_bandwidth(text, field);
      },
      nb::arg("text"), nb::arg("field"));
  m.def("format_bytes", [](double bytes) { return madpipe::format_bytes(bytes); });
  m.def("format_bandwidth",
        [](double bytes_per_ms) { return madpipe::format_bandwidth(bytes_per_ms); });
  m.def("format_ms", [](double ms) { return madpipe::format_ms(ms); });
  m.def("make_plan", &make_plan, nb::arg("profile"), nb::arg("profile_file"), nb::arg("request"),
        nb::arg("progress").none());
  m.def("plan_or_explain", &plan_or_explain, nb::arg("profile"), nb::arg("profile_file"),
        nb::arg("request"), nb::arg("progress").none());
  m.def("compare", &compare, nb::arg("profile"), nb::arg("profile_file"), nb::arg("request"),
        nb::arg("algorithms"), nb::arg("progress").none());
  m.def("planning_defaults", &planning_defaults);
  m.def("explain_infeasible", &explain_infeasible, nb::arg("reason"), nb::arg("profile"),
        nb::arg("profile_file"), nb::arg("request"), nb::arg("time_left_s"));
  m.def("validate", &validate, nb::arg("plan"), nb::arg("plan_file"), nb::arg("profile").none(),
        nb::arg("profile_file"));
  m.def("simulate", &simulate, nb::arg("plan"), nb::arg("plan_file"), nb::arg("micro_batches"),
        nb::arg("policy"));
  m.def("lower_bound", &lower_bound, nb::arg("profile"), nb::arg("profile_file"),
        nb::arg("request"));
  m.def("smallest_feasible_memory", &smallest_feasible_memory, nb::arg("profile"),
        nb::arg("profile_file"), nb::arg("request"));
  m.def("export_torch", &export_torch, nb::arg("plan"), nb::arg("plan_file"),
        nb::arg("micro_batches"));
  m.def("plan_details", &plan_details, nb::arg("plan"), nb::arg("plan_file"),
        nb::arg("profile").none(), nb::arg("profile_file"));
  m.def("plan_svg", &plan_svg, nb::arg("plan"), nb::arg("plan_file"), nb::arg("micro_batches"));
  m.def("algorithm_names", &algorithm_names);
  m.def("version", [] { return std::string(MADPIPE_VERSION); });
}
