#include "cli/options.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <utility>

#include <boost/program_options/parsers.hpp>
#include <boost/program_options/variables_map.hpp>

namespace po = boost::program_options;

static constexpr unsigned kLineLength = 100;

// Long options only, no abbreviations: "--mem" is not "--memory".
static constexpr int kCommandLineStyle =
    po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

static po::options_description generic_options(bool with_config) {
  po::options_description generic("General options", kLineLength);
  generic.add_options()("help,h", "print this help and exit");
  if (with_config) {
    generic.add_options()("config", po::value<std::string>()->value_name("FILE"),
                          "read options from an INI file; the command line wins");
  }
  return generic;
}

std::vector<std::string> madpipe::cli::option_names(const po::options_description& group) {
  std::vector<std::string> names;
  for (const auto& option : group.options()) names.push_back(option->long_name());
  return names;
}

std::string madpipe::cli::help_text(const CommandSyntax& syntax,
                                    const po::options_description& options, bool with_config) {
  po::options_description all(kLineLength);
  all.add(options).add(generic_options(with_config));
  std::ostringstream out;
  out << "usage: madpipe " << syntax.name << ' ' << syntax.synopsis << "\n\n"
      << syntax.summary << all;
  if (with_config) {
    out << "\nA --config file is an INI file: [platform] holds gpus, memory, bandwidth and\n"
           "weight-copies, [planner] the planner options, one \"key = value\" a line.\n";
  }
  return out.str();
}

static const madpipe::cli::ConfigSection* find_section(
    const std::vector<madpipe::cli::ConfigSection>& sections, const std::string& name) {
  for (const auto& section : sections)
    if (section.name == name) return &section;
  return nullptr;
}

static std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// The sections of every command's --config: one file may serve several commands, each reading
// its own sections and skipping the others'. Any other section is a mistake (a misspelling, a
// capital letter) whose keys would otherwise be dropped without a word.
static const char* const kSectionsOfAnyCommand[] = {"platform", "planner", "model", "training",
                                                    "output",   "profile", "sweep", "scale"};

// Throws Error{InvalidInput} naming the file, the line and the section when a "[name]" header of
// `in` is a section no command reads; rewinds `in`.
static void check_section_names(std::istream& in, const std::string& path,
                                const std::vector<madpipe::cli::ConfigSection>& sections) {
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::size_t open = line.find_first_not_of(" \t");
    if (open == std::string::npos || line[open] != '[') continue;
    const std::size_t close = line.find(']', open);
    const std::string name =
        line.substr(open + 1, close == std::string::npos ? std::string::npos : close - open - 1);
    if (std::find(std::begin(kSectionsOfAnyCommand), std::end(kSectionsOfAnyCommand), name) !=
        std::end(kSectionsOfAnyCommand))
      continue;
    std::vector<std::string> own, others;
    for (const auto& section : sections) own.push_back("[" + section.name + "]");
    for (const char* other : kSectionsOfAnyCommand)
      if (!find_section(sections, other)) others.push_back("[" + std::string(other) + "]");
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, path,
                         "line " + std::to_string(number) + " [" + name + "]",
                         "unknown section: its keys would be ignored (this command reads " +
                             join(own) + "; other commands read " + join(others) +
                             "; names are lower case)");
  }
  in.clear();
  in.seekg(0);
}

// Where --config gave each option (by long name) its value in this process: the file and its
// "[section] key", for the errors about that value found after parsing (with_config_origin).
static std::map<std::string, std::pair<std::string, std::string>>& config_origins() {
  static std::map<std::string, std::pair<std::string, std::string>> origins;
  return origins;
}

// Reads an INI file and turns "[section] key = value" into the option "key" of `options`, then
// stores it: values already stored from the command line are kept.
static void store_config_file(const std::string& path, const po::options_description& options,
                              const std::vector<madpipe::cli::ConfigSection>& sections,
                              po::variables_map& vm) {
  std::ifstream in(path);
  if (!in) {
    throw madpipe::Error(madpipe::ErrorKind::Io, path, "",
                         std::string("cannot open config file: ") + std::strerror(errno));
  }
  check_section_names(in, path, sections);
  const po::options_description nothing;
  const po::parsed_options parsed = po::parse_config_file(in, nothing, true);
  po::parsed_options translated(&options);
  std::vector<std::string> section_names;
  for (const auto& section : sections) section_names.push_back("[" + section.name + "]");
  for (const po::option& entry : parsed.options) {
    const std::string& dotted = entry.string_key;
    const std::size_t dot = dotted.find('.');
    if (dot == std::string::npos) {
      throw madpipe::Error(madpipe::ErrorKind::InvalidInput, path, dotted,
                           "key outside a section (sections: " + join(section_names) + ")");
    }
    const std::string section_name = dotted.substr(0, dot);
    const std::string key = dotted.substr(dot + 1);
    const madpipe::cli::ConfigSection* section = find_section(sections, section_name);
    if (!section) continue;  // a section other subcommands read
    if (std::find(section->keys.begin(), section->keys.end(), key) == section->keys.end()) {
      throw madpipe::Error(madpipe::ErrorKind::InvalidInput, path, "[" + section_name + "] " + key,
                           "unknown key (known: " + join(section->keys) + ")");
    }
    if (!options.find_nothrow(key, false)) continue;  // a key of another subcommand
    if (!madpipe::cli::given(vm, key))
      config_origins()[key] = {path, "[" + section_name + "] " + key};
    po::option option(key, entry.value);
    option.original_tokens = {key};
    option.original_tokens.insert(option.original_tokens.end(), entry.value.begin(),
                                  entry.value.end());
    translated.options.push_back(std::move(option));
  }
  try {
    po::store(translated, vm);
  } catch (const po::error_with_option_name& e) {
    std::string name = e.get_option_name();
    name.erase(0, name.find_first_not_of('-'));
    const auto origin = config_origins().find(name);
    if (origin == config_origins().end()) throw;
    // Every value the file gives the option (a key may repeat): any of them may be the bad one.
    std::vector<std::string> values;
    for (const po::option& option : translated.options)
      if (option.string_key == name)
        values.insert(values.end(), option.value.begin(), option.value.end());
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, origin->second.first,
                         origin->second.second, madpipe::cli::option_error_text(e, values));
  }
}

std::string madpipe::cli::option_error_text(const po::error& error,
                                            const std::vector<std::string>& words) {
  const auto* named = dynamic_cast<const po::error_with_option_name*>(&error);
  const bool placeholder = std::any_of(words.begin(), words.end(), [](const std::string& word) {
    return word.find('%') != std::string::npos;
  });
  if (!named || !placeholder) return error.what();
  if (dynamic_cast<const po::multiple_occurrences*>(&error))
    return "'" + named->get_option_name() + "' is given more than once";
  std::string text = "invalid value for '" + named->get_option_name() + "'";
  if (words.size() == 1) text += ": '" + words.front() + "'";
  return text;
}

madpipe::Error madpipe::cli::with_config_origin(const madpipe::Error& error) {
  if (!error.file().empty() || error.field().rfind("--", 0) != 0) return error;
  const auto origin = config_origins().find(error.field().substr(2));
  if (origin == config_origins().end()) return error;
  return madpipe::Error(error.kind(), origin->second.first, origin->second.second, error.problem());
}

bool madpipe::cli::parse_options(const std::vector<std::string>& args, const CommandSyntax& syntax,
                                 const po::options_description& options,
                                 const std::vector<ConfigSection>& config_sections,
                                 po::variables_map* parsed) {
  const bool with_config = !config_sections.empty();
  po::options_description all(kLineLength);
  all.add(options).add(generic_options(with_config));
  // Subcommands take no positional arguments; collect them to name the first in the error.
  po::options_description hidden;
  hidden.add_options()("unexpected-argument", po::value<std::vector<std::string>>());
  po::options_description parsed_options(all);
  parsed_options.add(hidden);
  po::positional_options_description positionals;
  positionals.add("unexpected-argument", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args)
                .options(parsed_options)
                .positional(positionals)
                .style(kCommandLineStyle)
                .run(),
            vm);
  if (vm.count("unexpected-argument")) {
    const std::string& word = vm["unexpected-argument"].as<std::vector<std::string>>().front();
    throw_invalid("", "",
                  "unexpected argument '" + word + "' (options start with --; see 'madpipe " +
                      syntax.name + " --help')");
  }
  if (vm.count("help")) {
    std::cout << help_text(syntax, options, with_config);
    return false;
  }
  if (with_config && vm.count("config")) {
    store_config_file(vm["config"].as<std::string>(), all, config_sections, vm);
  }
  po::notify(vm);
  if (parsed) *parsed = vm;
  return true;
}

bool madpipe::cli::given(const po::variables_map& vm, const std::string& name) {
  return vm.count(name) > 0 && !vm[name].defaulted();
}
