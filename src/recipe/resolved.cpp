// The resolved recipe (meshrun/recipe/resolved.hpp), read key by key through
// the schema's getters so that a new key is written out with no code here.
#include "meshrun/recipe/resolved.hpp"

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/schema.hpp"
#include "schema_check.hpp"

namespace fs = std::filesystem;

namespace meshrun {
namespace {

template <class T>
std::string toml_text(const T& value) {
  std::ostringstream out;
  out << toml::value<T>(value);
  return out.str();
}

std::string toml_text(const Value& value) {
  if (auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (auto* i = std::get_if<long long>(&value)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&value)) {
    // The shortest text that reads back as the same double (toml++ prints
    // 17 significant digits: 3.0000000000000001e-06); TOML wants a point or
    // an exponent in a float, and spells infinities inf / -inf.
    char buffer[64];
    const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, *d);
    std::string text(buffer, error == std::errc() ? end : buffer);
    if (text.find_first_of(".en") == std::string::npos) text += ".0";
    return text;
  }
  if (auto* s = std::get_if<std::string>(&value)) return toml_text(*s);
  toml::array array;
  if (auto* list = std::get_if<std::vector<std::string>>(&value)) {
    for (const auto& item : *list) array.push_back(item);
  } else {
    for (const auto& inner : std::get<std::vector<std::vector<std::string>>>(value)) {
      toml::array row;
      for (const auto& item : inner) row.push_back(item);
      array.push_back(std::move(row));
    }
  }
  std::ostringstream out;
  out << array;
  return out.str();
}

// Bare when TOML allows it, quoted otherwise.
std::string toml_key(const std::string& name) {
  const bool bare = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  return bare ? name : toml_text(name);
}

// A free-form table's JSON (as the schema checker wrote it, from TOML, so no
// nulls and at most 16 deep) as a TOML inline table that reads back the same.
std::string toml_inline(const nlohmann::ordered_json& json) {
  if (json.is_boolean()) return json.get<bool>() ? "true" : "false";
  if (json.is_number_integer()) return std::to_string(json.get<long long>());
  if (json.is_number_float()) return toml_text(Value{json.get<double>()});
  if (json.is_string()) return toml_text(json.get<std::string>());
  const bool object = json.is_object();
  std::string text = object ? "{ " : "[";
  bool first = true;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!first) text += ", ";
    first = false;
    if (object) text += toml_key(it.key()) + " = ";
    text += toml_inline(it.value());
  }
  return text + (object ? (first ? "}" : " }") : "]");
}

bool is_empty(const Value& value) {
  if (auto* s = std::get_if<std::string>(&value)) return s->empty();
  if (auto* list = std::get_if<std::vector<std::string>>(&value)) return list->empty();
  if (auto* lists = std::get_if<std::vector<std::vector<std::string>>>(&value)) return lists->empty();
  return false;
}

// Paths as the loader left them are relative to the working directory; the
// resolved file lives elsewhere, so they are written absolute.
Value absolute_paths(const KeySpec& spec, Value value) {
  auto* text = std::get_if<std::string>(&value);
  if (!text || text->empty() || spec.path_kind == PathKind::none) return value;
  const fs::path path(*text);
  if (path.is_absolute()) return value;
  std::error_code ec;
  const bool path_like = spec.path_kind == PathKind::file || looks_like_path(*text) || fs::exists(path, ec);
  if (path_like) return fs::absolute(path, ec).lexically_normal().string();
  return value;
}

// The dotted key with "*" replaced by the role's name.
std::string concrete(const std::string& pattern, const std::string& role) {
  const size_t star = pattern.find('*');
  return star == std::string::npos ? pattern : pattern.substr(0, star) + role + pattern.substr(star + 1);
}

struct KeyOfSection {
  std::string section;  // "" for top-level, "roles.actor.mesh"
  std::string name;
  std::string value;
};

std::vector<KeyOfSection> collect(const Recipe& recipe) {
  // Defaults with the same roles, for comparing empty values.
  Recipe defaults;
  for (const RoleConfig& role : recipe.roles) defaults.roles.emplace_back().role = role.role;
  std::vector<KeyOfSection> out;
  const Schema& schema = recipe_schema();
  const auto add = [&](const KeySpec& spec, const std::string& role) {
    const Value value = absolute_paths(spec, spec.read(recipe, role));
    // An empty value stands for "none": written out only when the default
    // is something else (the user emptied it).
    if (is_empty(value) && is_empty(spec.read(defaults, role))) return;
    const std::string dotted = concrete(spec.path, role);
    const size_t dot = dotted.rfind('.');
    out.push_back({dot == std::string::npos ? "" : dotted.substr(0, dot),
                   dot == std::string::npos ? dotted : dotted.substr(dot + 1),
                   spec.type == ValueType::table ? toml_inline(nlohmann::ordered_json::parse(std::get<std::string>(value)))
                                                 : toml_text(value)});
  };
  // Sections in schema order; where the first role section stands, every
  // role's tables, one role after another.
  std::vector<std::string> role_sections;
  for (const SectionSpec& section : schema.sections)
    if (section.path.rfind("roles.*", 0) == 0) role_sections.push_back(section.path);
  std::vector<std::string> key_sections;  // each key's table, in schema.keys order
  for (const KeySpec& spec : schema.keys) {
    const size_t dot = spec.path.rfind('.');
    key_sections.push_back(dot == std::string::npos ? "" : spec.path.substr(0, dot));
  }
  const auto add_section = [&](const std::string& section, const std::string& role) {
    for (size_t i = 0; i < schema.keys.size(); ++i)
      if (schema.keys[i].read && key_sections[i] == section) add(schema.keys[i], role);
  };
  for (const SectionSpec& section : schema.sections) {
    if (section.path.rfind("roles.*", 0) != 0) {
      add_section(section.path, "");
    } else if (section.path == role_sections.front()) {
      for (const RoleConfig& role : recipe.roles)
        for (const std::string& role_section : role_sections) add_section(role_section, role.name());
    }
  }
  return out;
}

std::vector<ResolvedKey> keys_of(const std::vector<KeyOfSection>& items) {
  std::vector<ResolvedKey> keys;
  for (const auto& item : items)
    keys.push_back({item.section.empty() ? item.name : item.section + "." + item.name, item.value});
  return keys;
}

}  // namespace

std::vector<ResolvedKey> resolved_keys(const Recipe& recipe) { return keys_of(collect(recipe)); }

std::string resolved_recipe_toml(const Recipe& recipe) { return resolve_recipe(recipe).toml; }

ResolvedRecipe resolve_recipe(const Recipe& recipe) {
  ResolvedRecipe resolved;
  const std::vector<KeyOfSection> items = collect(recipe);
  resolved.keys = keys_of(items);
  resolved.fingerprint = recipe_fingerprint(resolved.keys);
  std::string& text = resolved.toml;
  text = "# The resolved recipe: includes merged, --set applied, defaults written out.\n";
  if (!recipe.included_files.empty()) {
    text += "# Resolved from:";
    for (const std::string& file : recipe.included_files) {
      std::error_code ec;
      text += " " + fs::absolute(file, ec).lexically_normal().string();
    }
    text += "\n";
  }
  text += "# Fingerprint: " + resolved.fingerprint + "\n";
  // Keys grouped by their table, tables in the order collected.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const KeyOfSection*>> by_section;
  for (const auto& item : items) {
    if (!by_section.count(item.section)) order.push_back(item.section);
    by_section[item.section].push_back(&item);
  }
  for (const std::string& section : order) {
    if (!section.empty()) text += "\n[" + section + "]\n";
    for (const KeyOfSection* item : by_section[section]) text += item->name + " = " + item->value + "\n";
  }
  return resolved;
}

std::string recipe_fingerprint(const std::vector<ResolvedKey>& keys) {
  std::string canonical;
  for (const ResolvedKey& key : keys) canonical += key.key + "=" + key.value + "\n";
  const XXH128_hash_t hash = XXH3_128bits(canonical.data(), canonical.size());
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(hash.high64),
                static_cast<unsigned long long>(hash.low64));
  return hex;
}

std::vector<KeyChange> diff_resolved(const std::vector<ResolvedKey>& before, const std::vector<ResolvedKey>& after) {
  std::map<std::string, std::string> old_values;
  for (const ResolvedKey& key : before) old_values[key.key] = key.value;
  std::vector<KeyChange> changes;
  for (const ResolvedKey& key : after) {
    auto it = old_values.find(key.key);
    if (it == old_values.end()) {
      changes.push_back({key.key, "(absent)", key.value});
    } else {
      if (it->second != key.value) changes.push_back({key.key, it->second, key.value});
      old_values.erase(it);
    }
  }
  for (const ResolvedKey& key : before)
    if (old_values.count(key.key)) changes.push_back({key.key, key.value, "(absent)"});
  return changes;
}

}  // namespace meshrun
