// Reads one TOML document into a flat list of located entries.
//
// toml++ drops source positions when nodes are copied, so recipes are never
// merged as trees: each file is parsed once, kept alive, and flattened into
// dotted keys ("launch.nodes") that point into it. Includes and --set
// overrides are then applied as "last entry wins" over these lists.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "meshrun/recipe/diagnostics.hpp"

namespace meshrun {

struct FlatEntry {
  std::string key;  // dotted path of a non-table value
  const toml::node* value = nullptr;
  SourceLocation key_location;
  SourceLocation value_location;
  std::string base_dir;  // folder that relative paths in this value are relative to
};

struct FlatTable {
  std::string path;  // dotted path of a table
  SourceLocation location;
};

struct FlatDocument {
  std::string file;  // as given, used in locations
  std::shared_ptr<toml::table> root;
  std::vector<FlatEntry> entries;  // depth first, keys in name order (toml++ keeps tables sorted)
  std::vector<FlatTable> tables;
};

SourceLocation location_of(const toml::source_region& region, const std::string& file);

// Parses `text` (named `file` in locations; `base_dir` for relative paths).
// Returns false after reporting a schema.syntax error.
bool flatten_toml(std::string_view text, const std::string& file, const std::string& base_dir,
                  FlatDocument& out, Diagnostics& diagnostics);

// Describes a node for messages: `integer 3`, `string "x"`, `table`, ...
std::string describe_node(const toml::node& node);

}  // namespace meshrun
