// Checks flattened TOML entries against the schema: known key, right type,
// value in range or among the choices; converts accepted values and resolves
// relative paths. Every problem is reported, none stops the check.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "meshrun/recipe/diagnostics.hpp"
#include "meshrun/recipe/schema.hpp"
#include "toml_flatten.hpp"

namespace meshrun {

class SchemaChecker {
 public:
  SchemaChecker(const Schema& schema, Diagnostics& diagnostics)
      : schema_(schema), diagnostics_(diagnostics) {}

  // Unknown tables ([lanch], [roles.actr]) and tables where a value belongs.
  void check_tables(const FlatDocument& document);
  // The entry's value, converted, or nullopt after reporting why not.
  std::optional<Value> check_entry(const FlatEntry& entry);

 private:
  bool under_rejected_table(const std::string& key) const;
  void report_unknown(const std::string& path, const SourceLocation& where, bool is_table);
  std::optional<Value> convert(const KeySpec& spec, const FlatEntry& entry);
  // A free-form table's value as JSON; false after reporting why not.
  bool table_json(const FlatEntry& entry, const toml::node& node, int depth, nlohmann::ordered_json& out);
  bool check_range(const KeySpec& spec, const FlatEntry& entry, const Value& value);

  const Schema& schema_;
  Diagnostics& diagnostics_;
  std::set<std::string, std::less<>> rejected_tables_;  // their keys are not reported again
};

// Makes a relative path absolute against `base_dir` as PathKind asks.
std::string resolve_recipe_path(const std::string& value, const std::string& base_dir, PathKind kind);
// looks_like_path: meshrun/recipe/schema.hpp.

}  // namespace meshrun
