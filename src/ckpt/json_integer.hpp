// Integers read from checkpoint JSON (manifests, shard maps). nlohmann's
// get<int64_t>() converts any number: a float beyond the type's range is
// undefined behaviour (found by fuzz/ckpt_fuzz.cpp) and a large integer is
// silently truncated, so a damaged file is refused here, naming the key.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshrun/bounded_json.hpp"
#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun::ckpt_detail {

// `value` as an Int; otherwise a CheckpointError "WHAT is VALUE, not a
// 64-bit integer" (`what` names the file and the key).
template <typename Int>
Int integer_value(const nlohmann::json& value, const std::string& what) {
  if (const std::optional<Int> n = json_integer<Int>(value)) return *n;
  throw CheckpointError(what + " is " + json_excerpt(value) + ", not a " + std::to_string(sizeof(Int) * 8) + "-bit integer");
}

// object[key] the same way; a missing key is nlohmann's out_of_range, which
// the callers turn into their "not readable" message.
template <typename Int>
Int integer_at(const nlohmann::json& object, const char* key, const std::string& what) {
  return integer_value<Int>(object.at(key), what + key);
}

// A list of them: object[key][i].
inline std::vector<std::int64_t> integer_list_at(const nlohmann::json& object, const char* key,
                                                 const std::string& what) {
  const nlohmann::json& list = object.at(key);
  if (!list.is_array()) throw CheckpointError(what + key + " is " + json_excerpt(list) + ", not a list of integers");
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < list.size(); ++i)
    out.push_back(integer_value<std::int64_t>(list[i], what + key + "[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace meshrun::ckpt_detail
