// The rules a HookBatch must follow before Lua sees it. Breaking one is a
// bug of the C++ caller, not of the script, hence std::invalid_argument.
#include <algorithm>
#include <array>
#include <set>
#include <stdexcept>
#include <string>

#include "hook_batch_binding.hpp"

namespace meshrun::hooks_detail {
namespace {

constexpr std::array lua_keywords = {"and",   "break", "do",       "else", "elseif", "end",
                                     "false", "for",   "function", "goto", "if",     "in",
                                     "local", "nil",   "not",      "or",   "repeat", "return",
                                     "then",  "true",  "until",    "while"};

// Members of the batch object itself (batch_runtime.lua).
constexpr std::array reserved_names = {"size", "prompt_text", "response_text", "label", "drop"};

bool is_identifier(const std::string& name) {
  if (name.empty()) return false;
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9'); });
}

template <std::size_t N>
bool is_one_of(const std::string& name, const std::array<const char*, N>& names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

void check_name(const std::string& name, const char* what, std::set<std::string>& seen) {
  if (!is_identifier(name) || is_one_of(name, lua_keywords)) {
    throw std::logic_error("hook batch: " + std::string(what) + " name \"" + name +
                           "\" is not a Lua identifier");
  }
  if (is_one_of(name, reserved_names)) {
    throw std::logic_error("hook batch: " + std::string(what) + " name \"" + name +
                           "\" is taken by the batch object (batch." + name + ")");
  }
  if (!seen.insert(name).second) {
    throw std::logic_error("hook batch: the name \"" + name + "\" is used twice");
  }
}

// Lua sees sizes as doubles: beyond 2^53 they would not be exact.
constexpr int64_t largest_exact_size = int64_t{1} << 53;

void check_array(const HookArray& array) {
  const std::string where = "hook batch: array \"" + array.name + "\"";
  if (array.shape.size() != 1 && array.shape.size() != 2) {
    throw std::logic_error(where + " has " + std::to_string(array.shape.size()) +
                           " dimensions; views are 1-D or 2-D");
  }
  int64_t elements = 1;
  for (int64_t extent : array.shape) {
    if (extent < 0 || extent > largest_exact_size) {
      throw std::logic_error(where + " has an extent of " + std::to_string(extent));
    }
    elements = extent == 0 ? 0
                           : (elements > largest_exact_size / extent ? largest_exact_size + 1
                                                                     : elements * extent);
  }
  if (elements > largest_exact_size) {
    throw std::logic_error(where + " has more than 2^53 elements");
  }
  if (element_type_name(array.type) == nullptr) {
    throw std::logic_error(where + " has an unknown element type " +
                           std::to_string(static_cast<int>(array.type)));
  }
  if (elements > 0 && array.data == nullptr) {
    throw std::logic_error(where + " has elements but no data");
  }
}

}  // namespace

void check_hook_batch(const HookBatch& batch) {
  if (batch.size < 0 || batch.size > largest_exact_size) {
    throw std::logic_error("hook batch: size " + std::to_string(batch.size) +
                           " is out of range");
  }
  std::set<std::string> seen;
  for (const HookArray& array : batch.arrays) {
    check_name(array.name, "array", seen);
    check_array(array);
  }
  for (const auto& [name, value] : batch.fields) check_name(name, "field", seen);
}

}  // namespace meshrun::hooks_detail
