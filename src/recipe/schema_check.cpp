#include "schema_check.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "meshrun/recipe/recipe.hpp"
#include "schema_internal.hpp"
#include "meshrun/recipe/suggest.hpp"

namespace fs = std::filesystem;

namespace meshrun {
namespace {

std::string parent_of(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

std::string last_of(const std::string& path) { return path.substr(path.rfind('.') + 1); }

std::string table_name(const std::string& path) {
  return path.empty() ? "the top level" : "[" + path + "]";
}

// "an integer", "a number", "an array of strings".
std::string with_article(ValueType type) {
  std::string name = value_type_name(type);
  return (name.find_first_of("aeiou") == 0 ? "an " : "a ") + name;
}

// Template variables nest a level or two; the bound keeps the conversion's
// recursion (and the renderer's) shallow whatever the recipe holds.
constexpr int kMaxTableDepth = 16;

// Names the chat template renderer sets itself for every render.
constexpr const char* kReservedTableNames[] = {"messages", "add_generation_prompt", "bos_token", "eos_token"};

}  // namespace

// A .jsonl / .json file name is a file even before it exists: the data rule
// then reports it missing where the recipe says, not in the cwd.
bool looks_like_path(const std::string& value) {
  const fs::path path(value);
  const std::string extension = path.extension().string();
  return path.is_absolute() || value.rfind("./", 0) == 0 || value.rfind("../", 0) == 0 || extension == ".jsonl" ||
         extension == ".json";
}

std::string resolve_recipe_path(const std::string& value, const std::string& base_dir, PathKind kind) {
  if (value.empty() || kind == PathKind::none) return value;
  fs::path path(value);
  if (value.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    return (fs::path(home ? home : "") / value.substr(2)).lexically_normal().string();
  }
  if (path.is_absolute()) return path.lexically_normal().string();
  fs::path relative = (fs::path(base_dir) / path).lexically_normal();
  if (kind == PathKind::file) return relative.string();
  std::error_code ec;
  if (looks_like_path(value) || fs::exists(relative, ec)) return relative.string();
  return value;  // a name: a public model, a dataset, "builtin:..."
}

// Prefixes are views into `key`: copying each parent would cost the square
// of the key's length per key.
bool SchemaChecker::under_rejected_table(const std::string& key) const {
  std::string_view parent(key);
  for (size_t dot = parent.rfind('.'); dot != std::string_view::npos; dot = parent.rfind('.')) {
    parent = parent.substr(0, dot);
    if (rejected_tables_.find(parent) != rejected_tables_.end()) return true;
  }
  return false;
}

void SchemaChecker::report_unknown(const std::string& path, const SourceLocation& where, bool is_table) {
  const std::string parent = parent_of(path);
  const std::string name = last_of(path);
  std::string what = is_table ? "unknown table [" + path + "]" : "unknown key \"" + name + "\" in " + table_name(parent);
  std::string suggestion;
  if (auto close = closest_match(name, schema_.names_in(parent))) {
    suggestion = "did you mean \"" + *close + "\"?";
  } else {
    // The right name in the wrong table: "tp" under [launch] belongs to [mesh].
    for (const auto& key : schema_.keys) {
      if (last_of(key.path) == name && key.path.find('*') == std::string::npos) {
        suggestion = "\"" + name + "\" is a key of " + table_name(parent_of(key.path));
        break;
      }
    }
  }
  diagnostics_.error(where, "schema.unknown-key", what, suggestion);
}

void SchemaChecker::check_tables(const FlatDocument& document) {
  for (const auto& table : document.tables) {
    if (under_rejected_table(table.path)) continue;
    if (const KeySpec* key = schema_.find_key(table.path)) {
      diagnostics_.error(table.location, "schema.type",
                         table.path + " must be " + with_article(key->type) + ", got a table");
      rejected_tables_.insert(table.path);
      continue;
    }
    bool known_section = schema_.find_section(table.path) != nullptr || table.path == "roles";
    if (table.path.rfind("roles.", 0) == 0 && parent_of(table.path) == "roles") {
      // [roles.NAME] for a row's name; the engines' row is [rollout].
      const std::optional<Role> role = role_named(last_of(table.path));
      known_section = role && *role != Role::rollout;
    }
    if (!known_section) {
      report_unknown(table.path, table.location, true);
      rejected_tables_.insert(table.path);
    }
  }
}

std::optional<Value> SchemaChecker::check_entry(const FlatEntry& entry) {
  if (under_rejected_table(entry.key)) return std::nullopt;
  const KeySpec* spec = schema_.find_key(entry.key);
  if (!spec) {
    if (schema_.find_section(entry.key) || entry.key == "roles") {
      diagnostics_.error(entry.value_location, "schema.type",
                         "[" + entry.key + "] is a table, got " + describe_node(*entry.value));
    } else {
      report_unknown(entry.key, entry.key_location, false);
    }
    return std::nullopt;
  }
  auto value = convert(*spec, entry);
  if (!value || !check_range(*spec, entry, *value)) return std::nullopt;
  if (spec->path_kind != PathKind::none) {
    if (auto* text = std::get_if<std::string>(&*value))
      *text = resolve_recipe_path(*text, entry.base_dir, spec->path_kind);
  }
  return value;
}

std::optional<Value> SchemaChecker::convert(const KeySpec& spec, const FlatEntry& entry) {
  const toml::node& node = *entry.value;
  auto mismatch = [&](const std::string& detail = {}) -> std::optional<Value> {
    diagnostics_.error(entry.value_location, "schema.type",
                       entry.key + " must be " + with_article(spec.type) + ", got " + describe_node(node) + detail);
    return std::nullopt;
  };
  switch (spec.type) {
    case ValueType::boolean:
      if (auto* v = node.as_boolean()) return Value{v->get()};
      return mismatch();
    case ValueType::integer:
      if (auto* v = node.as_integer()) return Value{static_cast<long long>(v->get())};
      return mismatch();
    case ValueType::number:
      if (auto* v = node.as_integer()) return Value{static_cast<double>(v->get())};
      if (auto* v = node.as_floating_point()) {
        if (!std::isfinite(v->get())) return mismatch(" (not finite)");
        return Value{v->get()};
      }
      return mismatch();
    case ValueType::string:
      if (auto* v = node.as_string()) return Value{v->get()};
      return mismatch();
    case ValueType::string_list: {
      const auto* array = node.as_array();
      if (!array) return mismatch();
      std::vector<std::string> out;
      for (const auto& item : *array) {
        if (!item.is_string()) return mismatch(" containing " + describe_node(item));
        out.push_back(item.as_string()->get());
      }
      return Value{out};
    }
    case ValueType::table: {
      const auto* table = node.as_table();
      if (!table) return mismatch();
      bool ok = true;
      for (auto&& [name, item] : *table) {
        for (const char* reserved : kReservedTableNames) {
          if (name.str() == reserved) {
            diagnostics_.error(location_of(name.source(), entry.value_location.file), "schema.reserved",
                               entry.key + "." + std::string(name.str()) +
                                   " is set by the chat template renderer itself and cannot be given here");
            ok = false;
          }
        }
      }
      nlohmann::ordered_json json;
      if (!table_json(entry, node, 1, json) || !ok) return std::nullopt;
      return Value{json.dump()};
    }
    case ValueType::string_list_list: {
      const auto* array = node.as_array();
      if (!array) return mismatch();
      std::vector<std::vector<std::string>> out;
      for (const auto& inner : *array) {
        const auto* list = inner.as_array();
        if (!list) return mismatch(" containing " + describe_node(inner));
        auto& group = out.emplace_back();
        for (const auto& item : *list) {
          if (!item.is_string()) return mismatch(" containing " + describe_node(item));
          group.push_back(item.as_string()->get());
        }
      }
      return Value{out};
    }
  }
  return mismatch();
}

bool SchemaChecker::table_json(const FlatEntry& entry, const toml::node& node, int depth, nlohmann::ordered_json& out) {
  const SourceLocation where = location_of(node.source(), entry.value_location.file);
  if (depth > kMaxTableDepth) {
    diagnostics_.error(where, "schema.type",
                       entry.key + " nests more than " + std::to_string(kMaxTableDepth) + " levels deep");
    return false;
  }
  switch (node.type()) {
    case toml::node_type::boolean: out = node.as_boolean()->get(); return true;
    case toml::node_type::integer: out = static_cast<long long>(node.as_integer()->get()); return true;
    case toml::node_type::floating_point: {
      const double value = node.as_floating_point()->get();
      if (!std::isfinite(value)) break;
      out = value;
      return true;
    }
    case toml::node_type::string: out = node.as_string()->get(); return true;
    case toml::node_type::array: {
      out = nlohmann::ordered_json::array();
      for (const auto& item : *node.as_array()) {
        nlohmann::ordered_json converted;
        if (!table_json(entry, item, depth + 1, converted)) return false;
        out.push_back(std::move(converted));
      }
      return true;
    }
    case toml::node_type::table: {
      out = nlohmann::ordered_json::object();
      for (auto&& [name, item] : *node.as_table()) {
        nlohmann::ordered_json converted;
        if (!table_json(entry, item, depth + 1, converted)) return false;
        out[std::string(name.str())] = std::move(converted);
      }
      return true;
    }
    default: break;
  }
  diagnostics_.error(where, "schema.type",
                     entry.key + " values must be booleans, numbers, strings, arrays or tables, got " +
                         describe_node(node) + (node.is_floating_point() ? " (not finite)" : ""));
  return false;
}

bool SchemaChecker::check_range(const KeySpec& spec, const FlatEntry& entry, const Value& value) {
  if (auto* text = std::get_if<std::string>(&value); text && !spec.choices.empty()) {
    for (const auto& choice : spec.choices)
      if (choice == *text) return true;
    std::optional<std::string> close;
    for (const auto& [written, meant] : spec.synonyms)
      if (written == *text) close = meant;
    if (!close) close = closest_match(*text, spec.choices);
    diagnostics_.error(entry.value_location, "schema.choice",
                       entry.key + " must be " + spec.constraint_text() + ", got \"" + *text + "\"",
                       close ? "did you mean \"" + *close + "\"?" : std::string());
    return false;
  }
  double number;
  if (auto* i = std::get_if<long long>(&value)) {
    for (long long allowed : spec.also_allowed)
      if (*i == allowed) return true;
    number = static_cast<double>(*i);
  } else if (auto* d = std::get_if<double>(&value)) {
    for (long long allowed : spec.also_allowed)
      if (*d == static_cast<double>(allowed)) return true;
    number = *d;
  } else {
    return true;
  }
  bool below = spec.min && (spec.min_exclusive ? number <= *spec.min : number < *spec.min);
  bool above = spec.max && (spec.max_exclusive ? number >= *spec.max : number > *spec.max);
  if (below || above) {
    // An integer as written: -4294967296, not -4.29497e+09.
    const auto* integer = std::get_if<long long>(&value);
    diagnostics_.error(entry.value_location, "schema.range",
                       entry.key + " must be " + spec.constraint_text() + ", got " +
                           (integer ? std::to_string(*integer) : schema_detail::number_text(number)));
    return false;
  }
  // Within the documented range but not the field's: launch.nodes =
  // 16666666666 wrapped to a negative int, and the rules' arithmetic on it
  // overflowed (found by fuzz/recipe_fuzz.cpp).
  if (auto* i = std::get_if<long long>(&value); i && (*i < spec.field_min || *i > spec.field_max)) {
    const std::string constraint = spec.constraint_text();
    diagnostics_.error(entry.value_location, "schema.range",
                       entry.key + " must be " + (constraint.empty() ? "" : constraint + " and ") +
                           (*i > spec.field_max ? "≤ " + std::to_string(spec.field_max)
                                                : "≥ " + std::to_string(spec.field_min)) +
                           ", got " + std::to_string(*i));
    return false;
  }
  return true;
}

}  // namespace meshrun
