#include "solver/mps.hpp"

#include "core/error.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

static std::string format_number(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  if (std::strtod(buf, nullptr) != x) std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

static std::string objective_row_name(const madpipe::solver::Model& model) {
  std::string name = "obj";
  for (;;) {
    bool taken = false;
    for (int r = 0; r < model.num_rows() && !taken; ++r) taken = model.row_name(r) == name;
    if (!taken) return name;
    name += "_";
  }
}

// The MPS row type of [lb, ub]: E, L, G (also for ranged rows) or N (free).
static char row_type(double lb, double ub) {
  const bool has_lb = std::isfinite(lb), has_ub = std::isfinite(ub);
  if (has_lb && has_ub) return lb == ub ? 'E' : 'G';
  if (has_ub) return 'L';
  if (has_lb) return 'G';
  return 'N';
}

static void write_bound(std::ostream& out, const char* type, const std::string& col) {
  out << ' ' << type << " BND " << col << '\n';
}

static void write_bound(std::ostream& out, const char* type, const std::string& col, double v) {
  out << ' ' << type << " BND " << col << ' ' << format_number(v) << '\n';
}

void madpipe::solver::write_mps(const Model& model, std::ostream& out) {
  const std::string obj = objective_row_name(model);
  out << "NAME madpipe\n";

  out << "ROWS\n";
  out << " N  " << obj << '\n';
  for (int r = 0; r < model.num_rows(); ++r)
    out << ' ' << row_type(model.row_lb(r), model.row_ub(r)) << "  " << model.row_name(r) << '\n';

  // Column-wise view of the row terms.
  std::vector<std::vector<std::pair<int, double>>> columns(
      static_cast<std::size_t>(model.num_vars()));
  for (int r = 0; r < model.num_rows(); ++r)
    for (const Term& t : model.row_terms(r))
      if (t.coeff != 0) columns[static_cast<std::size_t>(t.var)].emplace_back(r, t.coeff);

  out << "COLUMNS\n";
  bool in_integers = false;
  for (int v = 0; v < model.num_vars(); ++v) {
    if (model.var_integer(v) != in_integers) {
      in_integers = model.var_integer(v);
      out << "    MARKER  'MARKER'  " << (in_integers ? "'INTORG'" : "'INTEND'") << '\n';
    }
    const std::string& name = model.var_name(v);
    const double c = model.objective_coeff(v);
    const auto& entries = columns[static_cast<std::size_t>(v)];
    // A column with no entry at all still appears, or readers would drop it.
    if (c != 0 || entries.empty())
      out << "    " << name << "  " << obj << "  " << format_number(c) << '\n';
    for (const auto& [r, a] : entries)
      out << "    " << name << "  " << model.row_name(r) << "  " << format_number(a) << '\n';
  }
  if (in_integers) out << "    MARKER  'MARKER'  'INTEND'\n";

  out << "RHS\n";
  // MPS convention: the RHS of the objective row is minus the objective constant.
  if (model.objective_offset() != 0)
    out << "    RHS  " << obj << "  " << format_number(-model.objective_offset()) << '\n';
  for (int r = 0; r < model.num_rows(); ++r) {
    const double lb = model.row_lb(r), ub = model.row_ub(r);
    double rhs = 0;
    switch (row_type(lb, ub)) {
      case 'E':
      case 'G':
        rhs = lb;
        break;
      case 'L':
        rhs = ub;
        break;
      default:
        break;
    }
    if (rhs != 0) out << "    RHS  " << model.row_name(r) << "  " << format_number(rhs) << '\n';
  }

  bool ranges_open = false;
  for (int r = 0; r < model.num_rows(); ++r) {
    const double lb = model.row_lb(r), ub = model.row_ub(r);
    if (!std::isfinite(lb) || !std::isfinite(ub) || lb == ub) continue;
    if (!ranges_open) out << "RANGES\n";
    ranges_open = true;
    // A G row with range R spans [rhs, rhs + |R|].
    out << "    RNG  " << model.row_name(r) << "  " << format_number(ub - lb) << '\n';
  }

  bool bounds_open = false;
  for (int v = 0; v < model.num_vars(); ++v) {
    const double lb = model.var_lb(v), ub = model.var_ub(v);
    const bool integer = model.var_integer(v);
    const std::string& name = model.var_name(v);
    // The default [0, +inf) needs no line, except for integers (some readers make them binary).
    if (lb == 0 && ub == kInf && !integer) continue;
    if (!bounds_open) out << "BOUNDS\n";
    bounds_open = true;
    if (lb == ub) {
      write_bound(out, "FX", name, lb);
    } else if (integer && lb == 0 && ub == 1) {
      write_bound(out, "BV", name);
    } else if (lb == -kInf && ub == kInf) {
      write_bound(out, "FR", name);
    } else {
      if (lb == -kInf)
        write_bound(out, "MI", name);
      else if (lb != 0)
        write_bound(out, "LO", name, lb);
      if (ub != kInf)
        write_bound(out, "UP", name, ub);
      else if (integer)
        write_bound(out, "PL", name);
    }
  }
  out << "ENDATA\n";
}

void madpipe::solver::write_mps(const Model& model, const std::string& path) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    if (!out) throw Error(ErrorKind::Io, path, "", "cannot open for writing");
    write_mps(model, out);
    out.flush();
    if (!out) throw Error(ErrorKind::Io, path, "", "write failed");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw Error(ErrorKind::Io, path, "", "cannot rename the temporary file into place");
  }
}
