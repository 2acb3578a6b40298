// Golden test of `meshrun lint`: the corpus of broken recipes in
// tests/lint/broken/ must produce exactly tests/lint/broken.expected.
//
// After an intended change of the messages, regenerate the expected output
// with
//   MESHRUN_UPDATE_GOLDEN=1 ./build/unit_tests --source-file='*tests/lint/*'
// and review the diff: every message must still be clear and located at the
// right key.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lint/run_meshrun.hpp"
#include "recipe/diagnostic_matchers.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = MESHRUN_SOURCE_DIR;

// "FOLDER/*.toml" relative to the repository root, in sorted order.
std::vector<std::string> toml_files(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kSourceDir + "/" + folder, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".toml")
      files.push_back(folder + "/" + entry.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

bool update_requested() {
  const char* value = std::getenv("MESHRUN_UPDATE_GOLDEN");
  return value && std::string(value) == "1";
}

TEST_CASE("meshrun lint on the broken corpus prints exactly broken.expected") {
  REQUIRE_MESSAGE(test::meshrun_built(), "build meshrun first: " << test::meshrun_executable());
  const auto recipes = toml_files("tests/lint/broken");
  REQUIRE(recipes.size() >= 15);

  std::vector<std::string> args = {"lint"};
  args.insert(args.end(), recipes.begin(), recipes.end());
  const test::CommandResult result = test::run_meshrun(args);
  const std::string expected_path = kSourceDir + "/tests/lint/broken.expected";

  if (update_requested()) {
    std::ofstream(expected_path, std::ios::binary) << result.out;
    MESSAGE("rewrote " << expected_path << "; review it with git diff");
  }
  const std::string expected = test::read_file(expected_path);
  REQUIRE_MESSAGE(!expected.empty(), expected_path << " is missing; create it with MESHRUN_UPDATE_GOLDEN=1");
  INFO("stderr:\n" << result.err);
  if (result.out != expected) {
    FAIL_CHECK("meshrun lint output differs from tests/lint/broken.expected (- expected, + actual):\n"
               << test::line_diff(expected, result.out)
               << "if the change is intended, rerun with MESHRUN_UPDATE_GOLDEN=1 and review the diff");
  }
  CHECK(result.exit_code == 1);
}

TEST_CASE("every broken recipe fails, and each is reported") {
  // Guards the corpus itself: a recipe that lints clean proves nothing.
  REQUIRE(test::meshrun_built());
  for (const auto& recipe : toml_files("tests/lint/broken")) {
    const test::CommandResult result = test::run_meshrun({"lint", recipe});
    INFO(recipe << ":\n" << result.out << result.err);
    CHECK(result.exit_code == 1);
    CHECK(result.out.find(recipe + ": ") != std::string::npos);
    CHECK(result.out.find(": error: ") != std::string::npos);
  }
}

TEST_CASE("meshrun lint accepts every recipe in recipes/") {
  REQUIRE(test::meshrun_built());
  const auto recipes = toml_files("recipes");
  REQUIRE_MESSAGE(!recipes.empty(), "no recipes/*.toml to check");
  for (const auto& recipe : recipes) {
    const test::CommandResult result = test::run_meshrun({"lint", recipe});
    INFO(recipe << ":\n" << result.out << result.err);
    CHECK(result.exit_code == 0);
    CHECK(result.out.find(recipe + ": ok") != std::string::npos);
    CHECK(result.out.find(": error: ") == std::string::npos);
  }
}

TEST_CASE("several recipes end with a summary line") {
  REQUIRE(test::meshrun_built());
  const test::CommandResult result = test::run_meshrun(
      {"lint", "tests/lint/valid/sft_cpu.toml", "tests/lint/broken/cpu_nccl.toml", "tests/lint/broken/local_two_nodes.toml"});
  CHECK(result.exit_code == 1);
  // One error in each broken recipe (see broken.expected).
  CHECK(result.out.find("\n3 recipes checked: 1 ok, 2 failed (2 errors, 0 warnings)\n") != std::string::npos);
  CHECK(result.out.rfind("tests/lint/valid/sft_cpu.toml: ok\n", 0) == 0);
}

TEST_CASE("meshrun lint usage errors exit with 2") {
  REQUIRE(test::meshrun_built());
  SUBCASE("no recipe") {
    auto result = test::run_meshrun({"lint"});
    CHECK(result.exit_code == 2);
    CHECK(result.out.find(": ok") == std::string::npos);
  }
  SUBCASE("an unknown option") {
    auto result = test::run_meshrun({"lint", "--frobnicate", "tests/lint/valid/sft_cpu.toml"});
    CHECK(result.exit_code == 2);
    CHECK((result.err + result.out).find("frobnicate") != std::string::npos);
  }
  SUBCASE("a bad --format") {
    auto result = test::run_meshrun({"lint", "--format", "xml", "tests/lint/valid/sft_cpu.toml"});
    CHECK(result.exit_code == 2);
  }
  SUBCASE("a missing recipe file is not a usage error: it is reported like any other") {
    auto result = test::run_meshrun({"lint", "tests/lint/no-such-recipe.toml"});
    CHECK(result.exit_code == 1);
    CHECK(result.out ==
          "tests/lint/no-such-recipe.toml: error: cannot read recipe file \"tests/lint/no-such-recipe.toml\" "
          "[schema.file]\n"
          "tests/lint/no-such-recipe.toml: 1 error\n");
  }
}

}  // namespace
}  // namespace meshrun
