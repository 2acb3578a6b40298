#include "toml_flatten.hpp"

#include <sstream>

namespace meshrun {

SourceLocation location_of(const toml::source_region& region, const std::string& file) {
  return SourceLocation{file, static_cast<int>(region.begin.line), static_cast<int>(region.begin.column)};
}

namespace {

void flatten_table(const toml::table& table, const std::string& prefix, FlatDocument& out,
                   const std::string& base_dir) {
  for (auto&& [key, node] : table) {
    std::string path = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    SourceLocation key_location = location_of(key.source(), out.file);
    if (const toml::table* sub = node.as_table()) {
      // Implicit parent tables ("[roles.actor]" creates "roles") have no
      // source of their own; use the first key's position.
      SourceLocation where = key.source().begin.line ? key_location : location_of(sub->source(), out.file);
      out.tables.push_back({path, where});
      flatten_table(*sub, path, out, base_dir);
    } else {
      out.entries.push_back({path, &node, key_location, location_of(node.source(), out.file), base_dir});
    }
  }
}

}  // namespace

bool flatten_toml(std::string_view text, const std::string& file, const std::string& base_dir,
                  FlatDocument& out, Diagnostics& diagnostics) {
  out.file = file;
  try {
    out.root = std::make_shared<toml::table>(toml::parse(text, file));
  } catch (const toml::parse_error& error) {
    diagnostics.error(location_of(error.source(), file), "schema.syntax",
                      "invalid TOML: " + std::string(error.description()));
    return false;
  }
  flatten_table(*out.root, "", out, base_dir);
  return true;
}

std::string describe_node(const toml::node& node) {
  std::ostringstream out;
  switch (node.type()) {
    case toml::node_type::string: out << "string \"" << node.as_string()->get() << "\""; break;
    case toml::node_type::integer: out << "integer " << node.as_integer()->get(); break;
    case toml::node_type::floating_point: out << "float " << node.as_floating_point()->get(); break;
    case toml::node_type::boolean: out << (node.as_boolean()->get() ? "true" : "false"); break;
    case toml::node_type::array: out << "array"; break;
    case toml::node_type::table: out << "table"; break;
    case toml::node_type::date: out << "date"; break;
    case toml::node_type::time: out << "time"; break;
    case toml::node_type::date_time: out << "date-time"; break;
    default: out << "value"; break;
  }
  return out.str();
}

}  // namespace meshrun
