#include "cli/table.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>

static std::string padded(const std::string& text, std::size_t width, madpipe::cli::Align align) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return align == madpipe::cli::Align::Left ? text + fill : fill + text;
}

// Column widths count bytes; the few non-ASCII characters we print are in free text, not tables.
void madpipe::cli::print_table(const Table& table, std::ostream& out, const std::string& indent) {
  std::vector<std::size_t> widths;
  for (const Column& column : table.columns) widths.push_back(column.title.size());
  for (const auto& row : table.rows)
    for (std::size_t c = 0; c < row.size() && c < widths.size(); ++c)
      widths[c] = std::max(widths[c], row[c].size());
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line = indent;
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const bool last = c + 1 == table.columns.size();
      if (c > 0) line += "  ";
      line += last && table.columns[c].align == Align::Left
                  ? cell
                  : padded(cell, widths[c], table.columns[c].align);
    }
    out << line << '\n';
  };
  std::vector<std::string> titles;
  for (const Column& column : table.columns) titles.push_back(column.title);
  print_row(titles);
  for (const auto& row : table.rows) print_row(row);
}

static std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

void madpipe::cli::print_csv(const Table& table, std::ostream& out) {
  auto print_row = [&](const std::vector<std::string>& cells) {
    for (std::size_t c = 0; c < cells.size(); ++c) out << (c ? "," : "") << csv_cell(cells[c]);
    out << '\n';
  };
  std::vector<std::string> titles;
  for (const Column& column : table.columns) titles.push_back(column.title);
  print_row(titles);
  for (const auto& row : table.rows) print_row(row);
}

std::string madpipe::cli::fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}
