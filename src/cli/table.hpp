#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace madpipe::cli {

enum class Align { Left, Right };

struct Column {
  std::string title;
  Align align = Align::Right;
};

// A text table for summaries: columns separated by two spaces, padded to the widest cell.
struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;
};

void print_table(const Table& table, std::ostream& out, const std::string& indent = "");
// Comma-separated values; cells containing a comma or a quote are quoted.
void print_csv(const Table& table, std::ostream& out);

// "41.70" for fixed(41.7, 2).
std::string fixed(double value, int decimals);

}  // namespace madpipe::cli
