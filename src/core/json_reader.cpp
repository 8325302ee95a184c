#include "core/json_reader.hpp"

#include "core/error.hpp"

#include <climits>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

using nlohmann::json;

static constexpr std::size_t kMaxShownChars = 60;

void madpipe::JsonReader::fail(const std::string& pointer, const std::string& problem) const {
  throw_invalid(file, pointer, problem);
}

std::string madpipe::JsonReader::show(const json& value) const {
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    const double number = value.get<double>();  // dump() would print null
    return std::isnan(number) ? style.nan : (number < 0 ? "-inf" : "inf");
  }
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxShownChars) text = text.substr(0, style.cut_to) + "...";
  return text;
}

std::string madpipe::JsonReader::show_wrong_type(const json& value) const {
  return style.name_wrong_type ? std::string(value.type_name()) : show(value);
}

const json* madpipe::JsonReader::find(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

const json& madpipe::JsonReader::require(const json& object, const std::string& pointer,
                                         const char* key) const {
  const json* value = find(object, key);
  if (value == nullptr) fail(pointer + "/" + key, "missing required field");
  return *value;
}

void madpipe::JsonReader::require_document(const json& j) const {
  if (!j.is_object()) fail("", "must be a JSON object, got " + show_wrong_type(j));
}

void madpipe::JsonReader::require_format(const json& j, const char* format) const {
  const json& value = require(j, "", "format");
  if (!value.is_string() || value.get_ref<const std::string&>() != format)
    fail("/format", std::string("must be \"") + format + "\", got " + show(value));
}

const json& madpipe::JsonReader::object_value(const json& value, const std::string& pointer) const {
  if (!value.is_object()) fail(pointer, "must be an object, got " + show_wrong_type(value));
  return value;
}

const json& madpipe::JsonReader::object_member(const json& object, const std::string& pointer,
                                               const char* key) const {
  return object_value(require(object, pointer, key), pointer + "/" + key);
}

const json& madpipe::JsonReader::array_member(const json& object, const std::string& pointer,
                                              const char* key) const {
  const json& value = require(object, pointer, key);
  if (!value.is_array())
    fail(pointer + "/" + key, "must be an array, got " + show_wrong_type(value));
  return value;
}

std::string madpipe::JsonReader::string_value(const json& value, const std::string& pointer) const {
  if (!value.is_string()) fail(pointer, "must be a string, got " + show_wrong_type(value));
  return value.get<std::string>();
}

std::string madpipe::JsonReader::string_member(const json& object, const std::string& pointer,
                                               const char* key) const {
  return string_value(require(object, pointer, key), pointer + "/" + key);
}

std::string madpipe::JsonReader::optional_string(const json& object, const char* key,
                                                 std::string fallback) const {
  const json* value = find(object, key);
  return value == nullptr ? std::move(fallback) : string_value(*value, std::string("/") + key);
}

double madpipe::JsonReader::number_value(const json& value, const std::string& pointer,
                                         Sign sign) const {
  const char* requirement = sign == Sign::Positive      ? "must be a finite number > 0"
                            : sign == Sign::NonNegative ? "must be a finite number >= 0"
                                                        : "must be a finite number";
  if (!value.is_number())
    fail(pointer, std::string(requirement) + ", got " + show_wrong_type(value));
  const double number = value.get<double>();
  const bool ok =
      std::isfinite(number) && (sign == Sign::Any || (sign == Sign::NonNegative && number >= 0) ||
                                (sign == Sign::Positive && number > 0));
  if (!ok) fail(pointer, std::string(requirement) + ", got " + show(value));
  return number;
}

double madpipe::JsonReader::number_member(const json& object, const std::string& pointer,
                                          const char* key, Sign sign) const {
  return number_value(require(object, pointer, key), pointer + "/" + key, sign);
}

std::int64_t madpipe::JsonReader::integer_value(const json& value, std::int64_t min,
                                                std::int64_t max, const std::string& requirement,
                                                const std::string& pointer) const {
  if (!value.is_number())
    fail(pointer, "must be " + requirement + ", got " + show_wrong_type(value));
  bool integral = false;
  std::int64_t number = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    integral = u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    number = integral ? static_cast<std::int64_t>(u) : 0;
  } else if (value.is_number_integer()) {
    integral = true;
    number = value.get<std::int64_t>();
  } else {
    const double d = value.get<double>();
    integral = std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= style.max_integral_float;
    number = integral ? static_cast<std::int64_t>(d) : 0;
  }
  if (!integral || number < min || number > max)
    fail(pointer, "must be " + requirement + ", got " + show(value));
  return number;
}

std::int64_t madpipe::JsonReader::int64_value(const json& value, const std::string& pointer,
                                              std::int64_t min) const {
  return integer_value(value, min, std::numeric_limits<std::int64_t>::max(),
                       "an integer >= " + std::to_string(min), pointer);
}

std::int64_t madpipe::JsonReader::int64_member(const json& object, const std::string& pointer,
                                               const char* key, std::int64_t min) const {
  return int64_value(require(object, pointer, key), pointer + "/" + key, min);
}

int madpipe::JsonReader::int_member(const json& object, const std::string& pointer, const char* key,
                                    int min) const {
  return static_cast<int>(integer_value(require(object, pointer, key), min, INT_MAX,
                                        "an integer >= " + std::to_string(min),
                                        pointer + "/" + key));
}
