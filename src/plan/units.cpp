#include "units.hpp"

#include <fmt/format.h>

namespace meshrun::plan_detail {

std::string gib_text(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
}

std::string parameter_count_text(int64_t count) {
  const double value = static_cast<double>(count);
  if (count >= 1'000'000'000) return fmt::format("{:.2f}B", value / 1e9);
  if (count >= 1'000'000) return fmt::format("{:.2f}M", value / 1e6);
  if (count >= 1'000) return fmt::format("{:.2f}K", value / 1e3);
  return std::to_string(count);
}

}  // namespace meshrun::plan_detail
