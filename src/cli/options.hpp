#pragma once

#include "core/error.hpp"
#include "core/names.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>
#include <boost/program_options/options_description.hpp>
#include <boost/program_options/value_semantic.hpp>
#include <boost/program_options/variables_map.hpp>

namespace madpipe::cli {

namespace po = boost::program_options;

// How a subcommand presents itself in its --help text.
struct CommandSyntax {
  std::string name;      // "plan"
  std::string synopsis;  // "--profile FILE --gpus N --memory SIZE --bandwidth RATE [options]"
  std::string summary;   // one paragraph
};

// An INI section of a --config file: "[platform] gpus = 4" sets the option "--gpus". `keys`
// lists every key the section may hold, including keys that only other subcommands use (those
// are ignored); any other key in the section is an error.
struct ConfigSection {
  std::string name;
  std::vector<std::string> keys;
};

// An option whose values are the names of `table`, stored into `target` as the enum; its default
// is the name of target's value. An unknown name throws Error{InvalidInput} for `option`
// ("--mode: unknown mode 'x' (valid: sync, 2bw)").
template <typename Enum, std::size_t N>
po::typed_value<std::string>* enum_value(Enum& target, const Named<Enum> (&table)[N],
                                         const std::string& what, const std::string& option) {
  return po::value<std::string>()
      ->value_name("NAME")
      ->default_value(name_of(table, target))
      ->notifier([&target, &table, what, option](const std::string& name) {
        target = value_named(table, name, what, option);
      });
}

// As enum_value, for a setting with no default: `target` stays empty unless the option is given.
template <typename Enum, std::size_t N>
po::typed_value<std::string>* optional_enum_value(std::optional<Enum>& target,
                                                  const Named<Enum> (&table)[N],
                                                  const std::string& what,
                                                  const std::string& option) {
  return po::value<std::string>()->value_name("NAME")->notifier(
      [&target, &table, what, option](const std::string& name) {
        target = value_named(table, name, what, option);
      });
}

// A number with no default: `target` stays empty unless the option is given.
template <typename T>
po::typed_value<T>* optional_value(std::optional<T>& target, const char* value_name = "X") {
  return po::value<T>()->value_name(value_name)->notifier([&target](const T& value) {
    target = value;
  });
}

// The long names of the options of a group, for a ConfigSection.
std::vector<std::string> option_names(const po::options_description& group);

// Parses a subcommand's arguments into the variables bound by `options`, adding --help and, when
// `config_sections` is not empty, --config FILE. The command line is stored first, then the
// config file, so the command line wins; then one notify() runs the notifiers and the checks of
// required options. Returns false when --help was given: the help text went to stdout and the
// command must not run. Throws boost::program_options::error or madpipe::Error. `parsed` (if
// set) receives what was parsed, for commands whose options depend on which others were given.
bool parse_options(const std::vector<std::string>& args, const CommandSyntax& syntax,
                   const po::options_description& options,
                   const std::vector<ConfigSection>& config_sections = {},
                   po::variables_map* parsed = nullptr);

// What `error` says, without boost's substitution of its placeholders ("%value%"), which loops
// forever where a value holds one: where some of `words` (the arguments, a config value) holds
// a '%', an error naming an option says "invalid value for 'OPTION'" (and the value, when
// `words` is that one value), or "'OPTION' is given more than once".
std::string option_error_text(const po::error& error, const std::vector<std::string>& words);

// `error` naming the config file, the section and the key where its field is an option
// ("--name") whose value --config gave (not the command line); else `error` itself.
madpipe::Error with_config_origin(const madpipe::Error& error);

// Whether `vm` holds `name` from the command line or a config file (not its default).
bool given(const po::variables_map& vm, const std::string& name);

// The --help text of a subcommand.
std::string help_text(const CommandSyntax& syntax, const po::options_description& options,
                      bool with_config);

}  // namespace madpipe::cli
