// The resolved recipe: every key of a loaded Recipe written out (includes
// merged, --set applied, defaults and inherited values explicit, paths
// absolute), in schema order, as TOML that `meshrun lint` accepts and that
// loads back into the same Recipe.
//
// A run keeps it as logging.dir/resolved.toml; checkpoints keep its keys and
// their fingerprint so that a resume under a different recipe can say which
// keys changed.
//
// Invariants: load(resolved_recipe_toml(r)) has the same resolved_keys as r;
// resolved_keys lists role keys only for the roles present; a key whose value
// is empty (an unset path or name) and whose default is empty too is left
// out, as an empty value is never a valid path.
#pragma once

#include <string>
#include <vector>

namespace meshrun {

struct Recipe;

struct ResolvedKey {
  std::string key;    // dotted: "roles.actor.mesh.tp"
  std::string value;  // as TOML writes it: 2, "adamw", ["actor", "ref"]
};

std::vector<ResolvedKey> resolved_keys(const Recipe& recipe);

// The TOML text: a header comment naming the files it was resolved from,
// then top-level keys, then each table in schema order.
std::string resolved_recipe_toml(const Recipe& recipe);

// A short stable hash of the keys and values (hex).
std::string recipe_fingerprint(const std::vector<ResolvedKey>& keys);

// All three from one pass over the schema (what the plan keeps).
struct ResolvedRecipe {
  std::vector<ResolvedKey> keys;
  std::string fingerprint;
  std::string toml;
};
ResolvedRecipe resolve_recipe(const Recipe& recipe);

struct KeyChange {
  std::string key;
  std::string before, after;  // "(absent)" where one side has no such key
};
std::vector<KeyChange> diff_resolved(const std::vector<ResolvedKey>& before, const std::vector<ResolvedKey>& after);

}  // namespace meshrun
