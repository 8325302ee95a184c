#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace madpipe {

// How a reader words its messages. The readers' messages are part of their interface (tests and
// users match them), and they differ in these details.
struct JsonReaderStyle {
  // A value of the wrong JSON type appears as its type ("got string") instead of its text
  // ("got \"abc\"").
  bool name_wrong_type = false;
  // How a NaN appears (nlohmann's dump() would print null).
  const char* nan = "nan";
  // A value whose text is longer than 60 characters keeps its first `cut_to`, then "...".
  std::size_t cut_to = 60;
  // The largest magnitude of an integral floating-point number read as an integer (below 2^63,
  // so that the conversion to std::int64_t is defined). The default is the double just below
  // 9.2e18.
  double max_integral_float = 9199999999999998976.0;
};

// Where the values of a JSON document are being read: its file and style, for messages.
// Pointers are JSON pointers ("/layers/3"); the document itself is at "". Every failure throws
// Error{InvalidInput} "<file>: <pointer>: <problem>".
struct JsonReader {
  const std::string& file;
  JsonReaderStyle style;

  enum class Sign { Any, NonNegative, Positive };

  [[noreturn]] void fail(const std::string& pointer, const std::string& problem) const;

  // A JSON value as it appears in a message, shortened when long: -1.5, "abc", [1,2]. Invalid
  // UTF-8 in strings is replaced, so showing a value never throws.
  std::string show(const nlohmann::json& value) const;
  // A value that has the wrong JSON type, as the style says: its type or show(value).
  std::string show_wrong_type(const nlohmann::json& value) const;

  // The member `key` of `object`, or nullptr when absent.
  static const nlohmann::json* find(const nlohmann::json& object, const char* key);
  // The member `key` of the object at `pointer`; "missing required field" when absent.
  const nlohmann::json& require(const nlohmann::json& object, const std::string& pointer,
                                const char* key) const;

  // The document `j`: "must be a JSON object" unless it is one.
  void require_document(const nlohmann::json& j) const;
  // The document's "format" member must be the string `format`.
  void require_format(const nlohmann::json& j, const char* format) const;

  const nlohmann::json& object_value(const nlohmann::json& value, const std::string& pointer) const;
  const nlohmann::json& object_member(const nlohmann::json& object, const std::string& pointer,
                                      const char* key) const;
  const nlohmann::json& array_member(const nlohmann::json& object, const std::string& pointer,
                                     const char* key) const;

  std::string string_value(const nlohmann::json& value, const std::string& pointer) const;
  std::string string_member(const nlohmann::json& object, const std::string& pointer,
                            const char* key) const;
  // The string member `key` of the document, or `fallback` when absent.
  std::string optional_string(const nlohmann::json& object, const char* key,
                              std::string fallback) const;

  // A finite number of the given sign: "must be a finite number[ >= 0| > 0], got ...".
  double number_value(const nlohmann::json& value, const std::string& pointer, Sign sign) const;
  double number_member(const nlohmann::json& object, const std::string& pointer, const char* key,
                       Sign sign) const;

  // An integer in [min, max] (an integral floating-point value is accepted too); `requirement`
  // completes "must be ..., got ..." in the message.
  std::int64_t integer_value(const nlohmann::json& value, std::int64_t min, std::int64_t max,
                             const std::string& requirement, const std::string& pointer) const;
  // An integer >= min: "must be an integer >= <min>, got ...".
  std::int64_t int64_value(const nlohmann::json& value, const std::string& pointer,
                           std::int64_t min) const;
  std::int64_t int64_member(const nlohmann::json& object, const std::string& pointer,
                            const char* key, std::int64_t min) const;
  // An integer in [min, INT_MAX]: "must be an integer >= <min>, got ...".
  int int_member(const nlohmann::json& object, const std::string& pointer, const char* key,
                 int min) const;
};

}  // namespace madpipe
