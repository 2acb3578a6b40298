// Test helpers for the recipe subsystem: find a diagnostic by rule and check
// where it points, load recipe text, and write recipe files to a temporary
// folder. Header-only, shared by the tests of tests/recipe and tests/lint.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "meshrun/lint/lint.hpp"
#include "meshrun/recipe/diagnostics.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "support/temp_dir.hpp"

namespace doctest {
template <>
struct StringMaker<meshrun::SourceLocation> {
  static String convert(const meshrun::SourceLocation& where) {
    return ("{\"" + where.file + "\", " + std::to_string(where.line) + ", " + std::to_string(where.column) + "}")
        .c_str();
  }
};
}  // namespace doctest

namespace meshrun::test {

// The diagnostics of one rule, in sorted (file, line, column) order.
inline std::vector<Diagnostic> with_rule(const Diagnostics& diagnostics, std::string_view rule) {
  std::vector<Diagnostic> out;
  for (const auto& d : diagnostics.sorted())
    if (d.rule == rule) out.push_back(d);
  return out;
}

inline bool has_rule(const Diagnostics& diagnostics, std::string_view rule) {
  return !with_rule(diagnostics, rule).empty();
}

// The first diagnostic of `rule` at line:column (any file), or null.
inline const Diagnostic* find_at(const std::vector<Diagnostic>& found, int line, int column) {
  for (const auto& d : found)
    if (d.where.line == line && d.where.column == column) return &d;
  return nullptr;
}

// Where the diagnostics of `rule` are, "line:col" each, for failure messages.
inline std::string positions_of(const Diagnostics& diagnostics, std::string_view rule) {
  std::string out;
  for (const auto& d : with_rule(diagnostics, rule))
    out += (out.empty() ? "" : ", ") + std::to_string(d.where.line) + ":" + std::to_string(d.where.column);
  return out.empty() ? "none" : out;
}

}  // namespace meshrun::test

// Checks that `diagnostics` holds a diagnostic of `rule` at `line`:`column`,
// printing every diagnostic when it does not. Evaluates to a copy of the
// diagnostic (or nullopt) so that a test can go on to check its message.
#define FIND_DIAGNOSTIC(diagnostics, rule, line, column)                                          \
  [&]() -> std::optional<::meshrun::Diagnostic> {                                                 \
    const auto found_ = ::meshrun::test::with_rule((diagnostics), (rule));                         \
    const ::meshrun::Diagnostic* hit_ = ::meshrun::test::find_at(found_, (line), (column));        \
    INFO("looking for [" << (rule) << "] at " << (line) << ":" << (column) << "; it is at "         \
                         << ::meshrun::test::positions_of((diagnostics), (rule))                  \
                         << "\nall diagnostics:\n" << (diagnostics).format());                     \
    CHECK(hit_ != nullptr);                                                                        \
    if (!hit_) return std::nullopt;                                                                \
    return *hit_;                                                                                  \
  }()

#define CHECK_DIAGNOSTIC(diagnostics, rule, line, column) (void)FIND_DIAGNOSTIC(diagnostics, rule, line, column)

// Checks that no diagnostic of `rule` was reported.
#define CHECK_NO_DIAGNOSTIC(diagnostics, rule)                                             \
  do {                                                                                     \
    INFO("unexpected [" << (rule) << "]; all diagnostics:\n" << (diagnostics).format());   \
    CHECK_FALSE(::meshrun::test::has_rule((diagnostics), (rule)));                         \
  } while (0)

// Checks that there is no error at all.
#define CHECK_NO_ERRORS(diagnostics)                                   \
  do {                                                                 \
    INFO("all diagnostics:\n" << (diagnostics).format());              \
    CHECK((diagnostics).error_count() == 0);                           \
  } while (0)

namespace meshrun::test {

// A recipe loaded from text, then checked by the cross-field rules when it
// loaded.
struct Checked {
  std::optional<Recipe> recipe;
  Diagnostics diagnostics;
};

inline Checked load_text(std::string_view text, const std::vector<std::string>& sets = {},
                         const std::string& file_name = "recipe.toml") {
  Checked out;
  std::vector<Override> overrides;
  for (const auto& set : sets) overrides.push_back(Override{set});
  out.recipe = load_recipe_text(text, file_name, overrides, out.diagnostics);
  return out;
}

inline Checked validate_text(std::string_view text, const std::vector<std::string>& sets = {},
                             const std::string& file_name = "recipe.toml") {
  Checked out = load_text(text, sets, file_name);
  // The recipe's rules and lint's path checks (src/lint/path_lint.cpp),
  // which rules_test covers too.
  if (out.recipe) {
    validate_recipe(*out.recipe, out.diagnostics);
    check_recipe_paths(*out.recipe, out.diagnostics);
  }
  return out;
}


inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace meshrun::test
