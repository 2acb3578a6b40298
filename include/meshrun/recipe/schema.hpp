// Schema: the registry of every recipe key: its type, default, range and
// documentation, and how it is stored into a Recipe.
//
// The loader accepts exactly the keys listed here (anything else is an
// unknown-key error with a suggestion), docs/recipes.md is generated from it
// (`meshrun docs recipes`), and a test keeps the two equal. Keys under
// [roles.NAME] are registered once with "*" standing for the role name.
// The rules that check keys are rows of the rule tables (recipe/rules.hpp);
// the docs list, for every key, each rule that reads it.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace meshrun {

struct Recipe;
struct RuleRow;  // meshrun/recipe/rules.hpp

// `table`: a free-form TOML table (template variables) that the loader does
// not flatten into keys; its Value is the table as canonical JSON text.
enum class ValueType { boolean, integer, number, string, string_list, string_list_list, table };

const char* value_type_name(ValueType type);

// A value after its type was checked against the key's ValueType.
using Value = std::variant<bool, long long, double, std::string, std::vector<std::string>,
                           std::vector<std::vector<std::string>>>;

enum class PathKind {
  none,       // not a path
  file,       // always a path: made absolute against the defining file's folder
  reference,  // a path when it looks like one ("/", "./", "../", "~/", a .json or
              // .jsonl file name) or exists there; otherwise a name (a public
              // model, a dataset, "builtin:...")
};

struct KeySpec {
  std::string path;  // dotted, "*" for the role name: "roles.*.model"
  ValueType type = ValueType::string;
  std::string default_text;  // as documented
  std::string type_text;     // documented type when it is more than `type` says
  // Values users write for a choice that mean another: {"gpu", "cuda"}.
  std::vector<std::pair<std::string, std::string>> synonyms;
  std::string doc;
  std::vector<std::string> choices;  // for strings: the allowed values
  std::optional<double> min, max;    // for numbers: inclusive bounds
  bool min_exclusive = false;
  bool max_exclusive = false;
  std::vector<long long> also_allowed;  // integers accepted outside [min,max]
  // For integers: what the field they are stored in can hold (an int field
  // cannot hold 2^40: it would wrap). Checked like min/max, not documented.
  long long field_min = std::numeric_limits<long long>::min();
  long long field_max = std::numeric_limits<long long>::max();
  PathKind path_kind = PathKind::none;
  bool required = false;
  std::function<void(Recipe&, std::string_view role, const Value&)> assign;
  // The value a loaded Recipe holds for the key (defaults and inherited
  // values included), as a recipe would write it; for role keys, of the role
  // named. Empty for keys that are not stored (include).
  std::function<Value(const Recipe&, std::string_view role)> read;

  // "≥ 1", "one of \"a\", \"b\"", "≥ 1 or -1", ... ; empty when unconstrained.
  std::string constraint_text() const;
};

struct SectionSpec {
  std::string path;  // "launch", "roles.*", "roles.*.mesh"
  std::string doc;
};

class Schema {
 public:
  std::vector<SectionSpec> sections;
  std::vector<KeySpec> keys;

  // `dotted` may name a concrete role ("roles.actor.model").
  const KeySpec* find_key(std::string_view dotted) const;
  const SectionSpec* find_section(std::string_view dotted) const;
  // The key names allowed directly inside a table (for suggestions), and the
  // names of its sub-tables.
  std::vector<std::string> names_in(std::string_view table_path) const;
};

// The recipe schema (built once, immutable afterwards).
const Schema& recipe_schema();

// "roles.actor.mesh.tp" -> "roles.*.mesh.tp"; other paths unchanged.
std::string schema_pattern(std::string_view dotted);

// Whether a reference value is a path by its form (absolute, "./", "../",
// a .json or .jsonl file name) even before the file exists: the one rule
// the loader's path resolution, the resolved recipe and lint's file checks
// share.
bool looks_like_path(const std::string& value);

// docs/recipes.md, generated: every key, with the rules of `rules` that read
// it, and the rules (lint's rule_catalog()).
std::string schema_markdown(const std::vector<const RuleRow*>& rules);

}  // namespace meshrun
