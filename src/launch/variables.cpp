// Reading launch variables: presence, strict integer parsing and ports, each
// failure naming the variable and quoting its value.
#include <charconv>
#include <climits>
#include <string>

#include "launch_internal.hpp"

namespace meshrun::launch_detail {
namespace {

enum class ParsedKind { number, negative, not_a_number, too_large };

struct Parsed {
  ParsedKind kind = ParsedKind::not_a_number;
  int value = 0;
};

Parsed parse_int(std::string_view text) {
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool all_digits_read = end == text.data() + text.size();
  if (ec == std::errc::result_out_of_range) {
    return {text.starts_with('-') ? ParsedKind::negative : ParsedKind::too_large, 0};
  }
  if (ec != std::errc() || !all_digits_read) return {ParsedKind::not_a_number, 0};
  if (value < 0) return {ParsedKind::negative, 0};
  if (value > INT_MAX) return {ParsedKind::too_large, 0};
  return {ParsedKind::number, static_cast<int>(value)};
}

}  // namespace

std::string quoted_variable(std::string_view name, std::string_view value) {
  std::string text(name);
  text += "='";
  text += value;
  text += "'";
  return text;
}

std::optional<std::string> read_variable(const Environment& environment, std::string_view name) {
  std::optional<std::string> value = environment.get(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

bool variable_is_set(const Environment& environment, std::string_view name) {
  return read_variable(environment, name).has_value();
}

void require_variables(const Environment& environment, std::span<const std::string_view> names,
                       std::string_view reason) {
  std::string missing;
  std::string present;
  int missing_count = 0;
  for (std::string_view name : names) {
    if (std::optional<std::string> value = read_variable(environment, name)) {
      if (!present.empty()) present += ", ";
      present += quoted_variable(name, *value);
    } else {
      if (!missing.empty()) missing += ", ";
      missing += name;
      ++missing_count;
    }
  }
  if (missing_count == 0) return;
  std::string message(reason);
  message += missing_count == 1 ? ", but this variable is not set: "
                                : ", but these variables are not set: ";
  message += missing;
  if (!present.empty()) message += " (set: " + present + ")";
  throw LaunchEnvError(message);
}

int parse_non_negative(std::string_view name, std::string_view value) {
  Parsed parsed = parse_int(value);
  switch (parsed.kind) {
    case ParsedKind::number:
      return parsed.value;
    case ParsedKind::negative:
      throw LaunchEnvError(quoted_variable(name, value) + " is negative");
    case ParsedKind::too_large:
      throw LaunchEnvError(quoted_variable(name, value) + " is too large");
    case ParsedKind::not_a_number:
      break;
  }
  throw LaunchEnvError(quoted_variable(name, value) + " is not a number");
}

int parse_positive(std::string_view name, std::string_view value) {
  const int parsed = parse_non_negative(name, value);
  if (parsed < 1) throw LaunchEnvError(quoted_variable(name, value) + " must be at least 1");
  return parsed;
}

int parse_port(std::string_view name, std::string_view value) {
  Parsed parsed = parse_int(value);
  if (parsed.kind != ParsedKind::number || parsed.value < 1 || parsed.value > 65535) {
    throw LaunchEnvError(quoted_variable(name, value) + " is not a port number (1-65535)");
  }
  return parsed.value;
}

int read_non_negative(const Environment& environment, std::string_view name) {
  return parse_non_negative(name, read_variable(environment, name).value_or(""));
}

int read_positive(const Environment& environment, std::string_view name) {
  return parse_positive(name, read_variable(environment, name).value_or(""));
}

void set_master_port_from_variable_or_recipe(const Environment& environment,
                                             const LaunchConfig& config, LaunchInfo& info) {
  if (std::optional<std::string> port = read_variable(environment, "MASTER_PORT")) {
    info.master_port = parse_port("MASTER_PORT", *port);
    info.master_port_source = "MASTER_PORT";
    return;
  }
  if (config.master_port < 1 || config.master_port > 65535) {
    throw LaunchEnvError("launch.master_port = " + std::to_string(config.master_port) +
                         " is not a port number (1-65535)");
  }
  info.master_port = config.master_port;
  info.master_port_source = "recipe";
}

}  // namespace meshrun::launch_detail
