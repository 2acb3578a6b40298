// Loads a recipe: the file, its includes (depth first, base before child),
// then --set overrides; checks every entry against the schema; assigns the
// surviving values into a Recipe, last entry winning.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/schema.hpp"
#include "schema_check.hpp"
#include "meshrun/recipe/suggest.hpp"
#include "toml_flatten.hpp"

namespace fs = std::filesystem;

namespace meshrun {
namespace {

struct CheckedEntry {
  const FlatEntry* entry;
  Value value;
};

class Loader {
 public:
  explicit Loader(Diagnostics& diagnostics)
      : diagnostics_(diagnostics), errors_before_(diagnostics.error_count()) {}

  // Reads `file` and, first, what it includes. `site` is where it was named.
  void read_file(const std::string& file, const SourceLocation& site, const std::string& rule) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(file, ec);
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i] == canonical) {
        // "a.toml → b.toml → a.toml": the files being read, back to this one.
        std::string chain;
        for (size_t j = i; j < stack_.size(); ++j) chain += stack_names_[j] + " → ";
        diagnostics_.error(site, "schema.include", "include cycle: " + chain + file);
        return;
      }
    }
    // Each read counts, repeats included: a chain of files each including
    // the next twice would otherwise be applied 2^depth times.
    if (too_many_files_) return;
    if (++files_opened_ > kMaxRecipeFiles) {
      diagnostics_.error(site, "schema.include",
                         "more than " + std::to_string(kMaxRecipeFiles) +
                             " recipe files read, counting a file included twice twice: \"" + file + "\" is one too many",
                         "include a shared base once, from the top recipe");
      too_many_files_ = true;
      unreadable_ = true;
      return;
    }
    // A file included again (a shared base) is parsed once and applied again
    // where it is named.
    if (auto parsed = parsed_.find(canonical); parsed != parsed_.end()) {
      if (parsed->second) apply(parsed->second, file, canonical);
      return;
    }
    // A recipe is a page of text: 16 MiB bounds a path naming a device
    // (/dev/zero), a dataset or an endless pipe.
    constexpr std::size_t kMaxRecipeBytes = 16u << 20;
    const BoundedText read = read_bounded(file, kMaxRecipeBytes);
    if (read.status == BoundedText::Status::unreadable) {
      diagnostics_.error(site, rule, "cannot read recipe file \"" + file + "\"");
      unreadable_ = true;
      return;
    }
    if (!read.ok()) {
      diagnostics_.error(site, rule, "recipe file \"" + file + "\" " + read.problem(kMaxRecipeBytes) + ": not a recipe");
      unreadable_ = true;
      return;
    }
    read_text(read.text, file, canonical);
  }

  void read_text(std::string_view text, const std::string& file, const fs::path& canonical) {
    auto document = std::make_shared<FlatDocument>();
    std::string base_dir = fs::path(file).parent_path().lexically_normal().string();
    if (!flatten_toml(text, file, base_dir, *document, diagnostics_)) {
      files_read_.push_back(file);
      parsed_[canonical] = nullptr;  // reported once, not again where included again
      unreadable_ = true;
      return;
    }
    parsed_[canonical] = document;
    apply(document, file, canonical);
  }

  // Its includes first, then the document itself.
  void apply(const std::shared_ptr<const FlatDocument>& document, const std::string& file,
             const fs::path& canonical) {
    files_read_.push_back(file);
    stack_.push_back(canonical);
    stack_names_.push_back(file);
    for (const auto& entry : document->entries)
      if (entry.key == "include") read_includes(entry);
    stack_.pop_back();
    stack_names_.pop_back();
    documents_.push_back(document);
  }

  void read_override(const Override& override_value, int index) {
    const std::string& text = override_value.assignment;
    const std::string file = "--set[" + std::to_string(index) + "]";
    size_t eq = text.find('=');
    std::string key = eq == std::string::npos ? text : trim(text.substr(0, eq));
    if (eq == std::string::npos || !is_override_key(key)) {
      diagnostics_.error(SourceLocation{file, 1, 1}, "schema.override",
                         "override \"" + shortened(text) + "\" is not of the form section.key=value",
                         "e.g. --set launch.nodes=2 or --set roles.actor.model=builtin:tiny");
      return;
    }
    if (key == "include") {
      diagnostics_.error(SourceLocation{file, 1, 1}, "schema.override",
                         "include cannot be overridden: it decides which files are read",
                         "add the include to the recipe, or --set the keys themselves");
      return;
    }
    std::string value = trim(text.substr(eq + 1));
    // A TOML value as written; anything that is not one is a bare string.
    Diagnostics ignored;
    auto document = std::make_shared<FlatDocument>();
    // Written as "key=value", so columns match the argument as usually typed.
    if (!flatten_toml(key + "=" + value, file, "", *document, ignored) || document->entries.size() != 1) {
      document = std::make_shared<FlatDocument>();
      flatten_toml(key + "=" + toml_quote(value), file, "", *document, diagnostics_);
    }
    documents_.push_back(std::move(document));
  }

  std::optional<Recipe> build(const std::string& top_file) {
    const Schema& schema = recipe_schema();
    SchemaChecker checker(schema, diagnostics_);
    std::map<std::string, CheckedEntry> merged;
    Recipe recipe;
    recipe.file = top_file;
    recipe.included_files = files_read_;
    for (const auto& document : documents_) {
      checker.check_tables(*document);
      for (const auto& entry : document->entries) {
        if (entry.key == "include") continue;
        if (auto value = checker.check_entry(entry)) merged[entry.key] = CheckedEntry{&entry, std::move(*value)};
      }
      // A --set names a table without defining it: a header in a file stays
      // the table's location.
      const bool is_override = document->file.rfind("--set[", 0) == 0;
      for (const auto& table : document->tables) {
        if (is_override) recipe.locations.try_emplace(table.path, table.location);
        else recipe.locations[table.path] = table.location;
      }
    }
    for (const auto& [key, checked] : merged) recipe.locations[key] = checked.entry->key_location;
    // Absent, not merely invalid (the checker reported a bad value) nor
    // misspelt (the unknown key's "did you mean" already says it).
    bool algorithm_given = false;
    for (const auto& document : documents_)
      for (const auto& entry : document->entries)
        algorithm_given = algorithm_given || entry.key == "algorithm" ||
                          closest_match(entry.key, {"algorithm"}).has_value();
    if (!algorithm_given && !unreadable_) {
      diagnostics_.error(SourceLocation{top_file, 1, 1}, "schema.required",
                         "the recipe does not say which algorithm to run",
                         "add algorithm = \"sft\" or algorithm = \"ppo\" at the top level");
    }
    if (diagnostics_.error_count() > errors_before_) return std::nullopt;

    create_roles(recipe);
    for (const auto& [key, checked] : merged) {
      const KeySpec* spec = schema.find_key(key);
      spec->assign(recipe, role_of(key), checked.value);
    }
    resolve_defaults(recipe);
    return recipe;
  }

 private:
  void read_includes(const FlatEntry& entry) {
    auto include_one = [&](const toml::node& node) {
      const auto* name = node.as_string();
      if (!name) {
        diagnostics_.error(location_of(node.source(), entry.value_location.file), "schema.type",
                           "include must be a file name or a list of them, got " + describe_node(node));
        return;
      }
      fs::path target = fs::path(entry.base_dir) / name->get();
      read_file(target.lexically_normal().string(), location_of(node.source(), entry.value_location.file),
                "schema.include");
    };
    if (const auto* list = entry.value->as_array()) {
      for (const auto& node : *list) include_one(node);
    } else {
      include_one(*entry.value);
    }
  }

  // A RoleConfig per [roles.NAME] table present, its row resolved here once
  // (the schema checker refused a NAME no row has).
  static void create_roles(Recipe& recipe) {
    for (const RoleRow& row : kRoles) {
      if (row.role == Role::rollout) continue;  // the engines are [rollout]
      std::string prefix = "roles." + std::string(row.name);
      auto it = recipe.locations.lower_bound(prefix);
      bool present = it != recipe.locations.end() &&
                     (it->first == prefix || it->first.rfind(prefix + ".", 0) == 0);
      if (present) recipe.roles.emplace_back().role = row.role;
    }
  }

  static std::string role_of(const std::string& key) {
    if (key.rfind("roles.", 0) != 0) return {};
    size_t end = key.find('.', 6);
    return key.substr(6, end - 6);
  }

  static void resolve_defaults(Recipe& recipe) {
    if (!recipe.is_set("name")) recipe.name = fs::path(recipe.file).stem().string();
    for (auto& role : recipe.roles) {
      const std::string prefix = "roles." + role.name() + ".";
      if (!recipe.is_set(prefix + "nodes")) role.nodes = recipe.launch.nodes;
      if (!recipe.is_set(prefix + "procs_per_node")) role.procs_per_node = recipe.launch.procs_per_node;
      if (!recipe.is_set(prefix + "mesh.tp")) role.mesh.tp = recipe.mesh.tp;
      if (!recipe.is_set(prefix + "mesh.sp")) role.mesh.sp = recipe.mesh.sp;
      if (!recipe.is_set(prefix + "mesh.dp")) role.mesh.dp = recipe.mesh.dp;
      if (!recipe.is_set(prefix + "mesh.ep")) role.mesh.ep = recipe.mesh.ep;
    }
    if (!recipe.is_set("ppo.eps_clip_high")) recipe.ppo.eps_clip_high = recipe.ppo.eps_clip;
    // colocate.groups as rows; a name no row has is lint's to report
    // (colocate.unknown-role).
    for (const auto& names : recipe.colocate.group_names) {
      std::vector<Role>& group = recipe.colocate.groups.emplace_back();
      for (const std::string& name : names)
        if (const std::optional<Role> role = role_named(name)) group.push_back(*role);
    }
  }

  // bare-key(.bare-key)*, at most kMaxOverrideKeyLength characters. Checked
  // by hand: std::regex matches by recursion, one frame per character, and a
  // long key overflows the stack.
  static bool is_override_key(std::string_view key) {
    // The longest schema key is a few dozen characters.
    constexpr size_t kMaxOverrideKeyLength = 256;
    if (key.empty() || key.size() > kMaxOverrideKeyLength) return false;
    bool part_empty = true;
    for (char c : key) {
      if (c == '.') {
        if (part_empty) return false;
        part_empty = true;
      } else if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                 c == '-') {
        part_empty = false;
      } else {
        return false;
      }
    }
    return !part_empty;
  }

  // An argument of any length quoted in a one-line message.
  static std::string shortened(const std::string& text) {
    constexpr size_t kQuoted = 80;
    return text.size() <= kQuoted ? text : text.substr(0, kQuoted) + "… (" + std::to_string(text.size()) + " bytes)";
  }

  static std::string trim(std::string text) {
    size_t begin = text.find_first_not_of(" \t");
    size_t end = text.find_last_not_of(" \t");
    return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
  }

  static std::string toml_quote(const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }

  Diagnostics& diagnostics_;
  const int errors_before_;  // errors reported before this load began
  // A recipe and its includes are a handful of files.
  static constexpr int kMaxRecipeFiles = 64;

  std::vector<std::shared_ptr<const FlatDocument>> documents_;  // application order
  std::map<fs::path, std::shared_ptr<const FlatDocument>> parsed_;  // by canonical path; null: unreadable TOML
  int files_opened_ = 0;
  bool too_many_files_ = false;
  std::vector<fs::path> stack_;  // files being read, for cycle detection
  std::vector<std::string> stack_names_;  // the same, as named, for messages
  std::vector<std::string> files_read_;
  bool unreadable_ = false;  // a file was missing or not TOML: skip "required" checks
};

}  // namespace

std::optional<Recipe> load_recipe(const std::string& path, const std::vector<Override>& overrides,
                                  Diagnostics& diagnostics) {
  Loader loader(diagnostics);
  loader.read_file(path, SourceLocation{path, 0, 0}, "schema.file");
  for (size_t i = 0; i < overrides.size(); ++i) loader.read_override(overrides[i], static_cast<int>(i) + 1);
  return loader.build(path);
}

std::optional<Recipe> load_recipe_text(std::string_view text, const std::string& file_name,
                                       const std::vector<Override>& overrides,
                                       Diagnostics& diagnostics) {
  Loader loader(diagnostics);
  std::error_code ec;
  loader.read_text(text, file_name, fs::weakly_canonical(file_name, ec));
  for (size_t i = 0; i < overrides.size(); ++i) loader.read_override(overrides[i], static_cast<int>(i) + 1);
  return loader.build(file_name);
}

}  // namespace meshrun
