#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace madpipe {

// Reads and parses a JSON file. Throws Error{Io} naming the file when it cannot be opened or
// read (a directory included) and Error{InvalidInput} with the position when it is not JSON.
nlohmann::json read_json_file(const std::string& path);

// Writes `text` to `path` atomically and durably: a temporary file next to it, flushed to the
// disk, then a rename and a flush of the directory, so a reader never sees half a file and a
// crash of the machine after the call keeps it. Throws Error{Io} naming the file; the temporary
// file is removed.
void write_file_atomically(const std::string& path, const std::string& text);

// fsync of a file or a directory (the directory of a rename, so that the rename survives a
// crash). Throws Error{Io} naming the path when it cannot be opened or flushed.
void sync_to_disk(const std::string& path);

}  // namespace madpipe
