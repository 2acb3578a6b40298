// MetricsRecord: ordered keys and exact JSON numbers.
#include <charconv>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "meshrun/metrics/metrics.hpp"

namespace meshrun {

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[64];
  // Without a format, to_chars gives the shortest text that reads back to
  // exactly `value`; it is always valid JSON ("1e-05", "0.1", "3").
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

const MetricsRecord::Value* MetricsRecord::find(std::string_view key) const {
  for (const auto& [name, value] : values_) {
    if (name == key) return &value;
  }
  return nullptr;
}

MetricsRecord& MetricsRecord::set_value(std::string_view key, Value value) {
  if (key.empty()) throw std::logic_error("metrics: a key must not be empty");
  if (key == "step") throw std::logic_error("metrics: \"step\" is the record's own key, set when it is created");
  for (auto& [name, existing] : values_) {
    if (name == key) {
      existing = std::move(value);
      return *this;
    }
  }
  values_.emplace_back(std::string(key), std::move(value));
  return *this;
}

std::string MetricsRecord::to_json() const {
  std::string text = "{\"step\":" + std::to_string(step_);
  for (const auto& [name, value] : values_) {
    text += ',';
    text += nlohmann::json(name).dump();
    text += ':';
    if (const auto* number = std::get_if<double>(&value)) {
      text += json_number(*number);
    } else if (const auto* integer = std::get_if<int64_t>(&value)) {
      text += std::to_string(*integer);
    } else if (const auto* flag = std::get_if<bool>(&value)) {
      text += *flag ? "true" : "false";
    } else {
      // Replacing invalid UTF-8 keeps a bad label from making the line unreadable.
      text += nlohmann::json(std::get<std::string>(value)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return text + '}';
}

}  // namespace meshrun
