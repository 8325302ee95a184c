#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace madpipe {

// Reads and parses a JSON file. Throws Error{Io} naming the file when it cannot be opened or
// read (a directory included) and Error{InvalidInput} with the position when it is not JSON.
nlohmann::json read_json_file(const std::string& path);

// Writes `text` to `path` atomically: a temporary file next to it, then a rename, so a reader
// never sees half a file. Throws Error{Io} naming the file; the temporary file is removed.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace madpipe
