#pragma once

#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>

namespace madpipe {

// One entry of an enum's name table: the table is the one place where the enum's values and
// their names (in options, config files and records) meet, read in both directions.
template <typename Enum>
struct Named {
  Enum value;
  const char* name;
};

template <typename Enum, std::size_t N>
const char* name_of(const Named<Enum> (&table)[N], Enum value) {
  for (const Named<Enum>& entry : table)
    if (entry.value == value) return entry.name;
  MADPIPE_UNREACHABLE("value without a name");
}

// "a, b, c": the names of a table, for help texts and errors.
template <typename Enum, std::size_t N>
std::string names_of(const Named<Enum> (&table)[N]) {
  std::string names;
  for (const Named<Enum>& entry : table)
    names += std::string(names.empty() ? "" : ", ") + entry.name;
  return names;
}

// Case-insensitive lookup. Throws Error{InvalidInput} with field `field` ("--mode") saying
// "unknown <what> 'x' (valid: a, b)".
template <typename Enum, std::size_t N>
Enum value_named(const Named<Enum> (&table)[N], const std::string& name, const std::string& what,
                 const std::string& field) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Named<Enum>& entry : table)
    if (lower == entry.name) return entry.value;
  throw Error(ErrorKind::InvalidInput, "", field,
              "unknown " + what + " '" + name + "' (valid: " + names_of(table) + ")");
}

}  // namespace madpipe
