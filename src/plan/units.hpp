// How the planner writes sizes for people: bytes as GiB with two decimals
// (1 GiB = 2^30 bytes, as device memory is quoted) and parameter counts with
// a K/M/B suffix.
#pragma once

#include <cstdint>
#include <string>

namespace meshrun::plan_detail {

std::string gib_text(int64_t bytes);              // "17.50"
std::string parameter_count_text(int64_t count);  // "68.98B", "494.03M", "72.32K", "950"

}  // namespace meshrun::plan_detail
