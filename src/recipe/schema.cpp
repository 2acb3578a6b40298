#include "meshrun/recipe/schema.hpp"

#include <sstream>

#include "meshrun/recipe/recipe.hpp"
#include "schema_internal.hpp"

namespace meshrun {

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::boolean: return "boolean";
    case ValueType::integer: return "integer";
    case ValueType::number: return "number";
    case ValueType::string: return "string";
    case ValueType::string_list: return "array of strings";
    case ValueType::string_list_list: return "array of arrays of strings";
    case ValueType::table: return "table";
  }
  return "value";
}

std::string schema_detail::number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string KeySpec::constraint_text() const {
  if (!choices.empty()) {
    std::string out = "one of ";
    for (size_t i = 0; i < choices.size(); ++i) {
      if (i) out += ", ";
      out += "\"" + choices[i] + "\"";
    }
    return out;
  }
  std::string out;
  if (min && max) {
    out = (min_exclusive ? "> " : "≥ ") + schema_detail::number_text(*min) + (max_exclusive ? " and < " : " and ≤ ") +
          schema_detail::number_text(*max);
  } else if (min) {
    out = (min_exclusive ? "> " : "≥ ") + schema_detail::number_text(*min);
  } else if (max) {
    out = (max_exclusive ? "< " : "≤ ") + schema_detail::number_text(*max);
  }
  for (long long v : also_allowed) out += " or " + std::to_string(v);
  return out;
}

std::string schema_pattern(std::string_view dotted) {
  std::string path(dotted);
  if (path.rfind("roles.", 0) == 0) {
    size_t end = path.find('.', 6);
    if (end == std::string::npos) end = path.size();
    path.replace(6, end - 6, "*");
  }
  return path;
}

const KeySpec* Schema::find_key(std::string_view dotted) const {
  std::string pattern = schema_pattern(dotted);
  for (const auto& key : keys)
    if (key.path == pattern) return &key;
  return nullptr;
}

const SectionSpec* Schema::find_section(std::string_view dotted) const {
  std::string pattern = schema_pattern(dotted);
  for (const auto& section : sections)
    if (section.path == pattern) return &section;
  return nullptr;
}

std::vector<std::string> Schema::names_in(std::string_view table_path) const {
  std::string prefix = schema_pattern(table_path);
  if (!prefix.empty()) prefix += ".";
  std::vector<std::string> names;
  auto add = [&](const std::string& path) {
    if (path.size() <= prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return;
    std::string rest = path.substr(prefix.size());
    std::string first = rest.substr(0, rest.find('.'));
    if (first == "*") return;
    for (const auto& n : names)
      if (n == first) return;
    names.push_back(first);
  };
  for (const auto& key : keys) add(key.path);
  for (const auto& section : sections) add(section.path);
  if (prefix == "roles.")
    for (auto role : kRoleNames) names.emplace_back(role);
  return names;
}

const Schema& recipe_schema() {
  static const Schema schema = [] {
    Schema s;
    schema_detail::bind_all_keys(s);
    return s;
  }();
  return schema;
}

}  // namespace meshrun
