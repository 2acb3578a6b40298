// `meshrun lint` output with hostile recipe text (src/cli/lint_command.cpp,
// src/recipe/diagnostics.cpp): a NUL or an escape sequence in a key is
// written escaped, and the diagnostics after it are not lost.
#include <doctest/doctest.h>

#include <string>

#include "lint/run_meshrun.hpp"
#include "recipe/diagnostic_matchers.hpp"

namespace meshrun {
namespace {

TEST_CASE("lint writes every diagnostic past a NUL or ESC in a key, escaped") {
  REQUIRE(test::meshrun_built());
  test::TempDir dir;
  const std::string recipe = dir.write("nul.toml",
                                       "algorithm = \"sft\"\n"
                                       "[batch]\n"
                                       "\"train\\u0000x\" = 1\n"
                                       "\"\\u001b[31mred\" = 2\n"
                                       "[launch]\n"
                                       "nodez = 1\n")
                                 .string();
  const test::CommandResult result = test::run_meshrun({"lint", recipe});
  INFO("stdout:\n" << result.out << "\nstderr:\n" << result.err);
  CHECK(result.exit_code == 1);
  CHECK(result.out.find('\0') == std::string::npos);
  CHECK(result.out.find('\x1b') == std::string::npos);
  CHECK(result.out.find("unknown key \"train\\x00x\" in [batch]") != std::string::npos);
  CHECK(result.out.find("unknown key \"\\x1b[31mred\" in [batch]") != std::string::npos);
  CHECK(result.out.find("unknown key \"nodez\" in [launch]") != std::string::npos);
  CHECK(result.out.find(recipe + ": 3 errors") != std::string::npos);
}

TEST_CASE("a deeply dotted key and a 30000-character --set key are located errors, not crashes") {
  REQUIRE(test::meshrun_built());
  test::TempDir dir;
  std::string key = "a";
  for (int i = 0; i < 25000; ++i) key += ".a";
  const std::string recipe = dir.write("deep.toml", "algorithm = \"sft\"\n" + key + " = 1\n").string();
  const test::CommandResult deep = test::run_meshrun({"lint", recipe});
  CHECK(deep.exit_code == 1);
  CHECK(deep.out.find(recipe + ":2:1: error: key nests more than 32 levels deep") != std::string::npos);

  const std::string plain = dir.write("plain.toml", "algorithm = \"sft\"\n").string();
  const test::CommandResult long_set = test::run_meshrun({"lint", plain, "--set", std::string(30000, 'a') + "=1"});
  CHECK(long_set.exit_code == 1);
  CHECK(long_set.out.find("[schema.override]") != std::string::npos);
}

}  // namespace
}  // namespace meshrun
