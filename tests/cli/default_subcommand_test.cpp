// Tests of with_default_subcommand (src/cli/common.cpp): `meshrun RECIPE`
// means `meshrun run RECIPE`.
#include <doctest/doctest.h>

#include "src/cli/commands.hpp"

namespace meshrun::cli {
namespace {

using Args = std::vector<std::string>;

const Args kSubcommands = {"run", "lint", "plan", "docs"};
const Args kValued = {"--log-level"};

Args with_default(Args args) { return with_default_subcommand(std::move(args), kSubcommands, kValued); }

TEST_CASE("a recipe in place of a subcommand gets run inserted before it") {
  CHECK(with_default({"r.toml"}) == Args{"run", "r.toml"});
  CHECK(with_default({"r.toml", "--set", "launch.nodes=2"}) == Args{"run", "r.toml", "--set", "launch.nodes=2"});
}

TEST_CASE("an explicit subcommand is left alone") {
  for (const auto& subcommand : kSubcommands) {
    CHECK(with_default({subcommand, "r.toml"}) == Args{subcommand, "r.toml"});
  }
  CHECK(with_default({"lint", "a.toml", "b.toml"}) == Args{"lint", "a.toml", "b.toml"});
}

TEST_CASE("options before the first positional argument are skipped, with their values") {
  CHECK(with_default({"--log-level", "debug", "r.toml"}) == Args{"--log-level", "debug", "run", "r.toml"});
  // The value of --log-level is not mistaken for a recipe.
  CHECK(with_default({"--log-level", "debug", "plan", "r.toml"}) == Args{"--log-level", "debug", "plan", "r.toml"});
  // Flags take no value.
  CHECK(with_default({"--verbose", "r.toml"}) == Args{"--verbose", "run", "r.toml"});
  // An option with its value attached is one argument.
  CHECK(with_default({"--log-level=warn", "r.toml"}) == Args{"--log-level=warn", "run", "r.toml"});
}

TEST_CASE("nothing is inserted without a positional argument, or after --") {
  CHECK(with_default({}) == Args{});
  CHECK(with_default({"--version"}) == Args{"--version"});
  CHECK(with_default({"--help"}) == Args{"--help"});
  CHECK(with_default({"--log-level", "debug"}) == Args{"--log-level", "debug"});
  CHECK(with_default({"--", "r.toml"}) == Args{"--", "r.toml"});
}

TEST_CASE("only the first positional argument decides") {
  // "lint" later on is a file name, not a subcommand.
  CHECK(with_default({"r.toml", "lint"}) == Args{"run", "r.toml", "lint"});
  CHECK(with_default({"docs", "recipes"}) == Args{"docs", "recipes"});
}

TEST_CASE("CommonOptions::overrides keeps the --set order") {
  CommonOptions common;
  common.sets = {"launch.nodes=2", "roles.actor.model=x", "launch.nodes=3"};
  const auto overrides = common.overrides();
  REQUIRE(overrides.size() == 3);
  CHECK(overrides[0].assignment == "launch.nodes=2");
  CHECK(overrides[1].assignment == "roles.actor.model=x");
  CHECK(overrides[2].assignment == "launch.nodes=3");
  CHECK(CommonOptions{}.overrides().empty());
}

TEST_CASE("a mistyped subcommand gets the nearest one; recipes, paths and far words do not") {
  using Mistyped = std::optional<std::pair<std::string, std::string>>;
  CHECK(mistyped_subcommand({"lnit", "r.toml"}, kSubcommands, kValued) == Mistyped{{"lnit", "lint"}});
  CHECK(mistyped_subcommand({"--log-level", "debug", "pln"}, kSubcommands, kValued) == Mistyped{{"pln", "plan"}});
  CHECK_FALSE(mistyped_subcommand({"lint", "r.toml"}, kSubcommands, kValued));
  CHECK_FALSE(mistyped_subcommand({"r.toml"}, kSubcommands, kValued));
  CHECK_FALSE(mistyped_subcommand({"recipes/lnit"}, kSubcommands, kValued));
  CHECK_FALSE(mistyped_subcommand({"zzzzzzzz"}, kSubcommands, kValued));
  CHECK_FALSE(mistyped_subcommand({}, kSubcommands, kValued));
}

}  // namespace
}  // namespace meshrun::cli
