// `meshrun docs env|hooks`: every environment variable named in meshrun's
// sources is in the reference table (so the table cannot fall behind), and
// the docs subcommand prints each topic.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "lint/run_meshrun.hpp"
#include "src/cli/environment_reference.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Quoted names of the families meshrun reads from the environment.
std::set<std::string> variables_named_in_sources() {
  static const std::regex name(
      "\"((?:SLURM|OMPI|PMI|MPI|MESHRUN|HF|XDG|TORCHELASTIC|MASTER|LOCAL|GROUP|NODE|OMP|GOMP|HOROVOD|RAY)_[A-Z0-9_]+|RANK|WORLD_SIZE|"
      "HOME)\"");
  std::set<std::string> found;
  for (const char* folder : {"/src", "/include"}) {
    for (const auto& entry : fs::recursive_directory_iterator(std::string(MESHRUN_SOURCE_DIR) + folder)) {
      const std::string extension = entry.path().extension().string();
      if (extension != ".cpp" && extension != ".hpp") continue;
      if (entry.path().filename() == "environment_reference.hpp") continue;
      const std::string text = read_all(entry.path());
      for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) found.insert((*it)[1]);
    }
  }
  return found;
}

TEST_CASE("every environment variable named in the sources is in the reference") {
  std::set<std::string> listed;
  for (const auto& variable : cli::kEnvironmentVariables) {
    CHECK_MESSAGE(listed.insert(std::string(variable.name)).second, "listed twice: " << variable.name);
    CHECK(!variable.meaning.empty());
  }
  const std::set<std::string> named = variables_named_in_sources();
  CHECK(named.size() >= 30);  // the scan sees the launchers' variables
  for (const std::string& variable : named) CHECK_MESSAGE(listed.count(variable), variable << " is not in kEnvironmentVariables");
  for (const std::string& variable : listed)
    CHECK_MESSAGE(named.count(variable), variable << " is listed but named nowhere in src/ or include/");
}

TEST_CASE("meshrun docs prints recipes, hooks and env; another topic is a usage error") {
  REQUIRE(test::meshrun_built());
  auto hooks = test::run_meshrun({"docs", "hooks"});
  CHECK(hooks.exit_code == 0);
  CHECK(hooks.out == read_all(std::string(MESHRUN_SOURCE_DIR) + "/docs/hooks.md"));
  auto env = test::run_meshrun({"docs", "env"});
  CHECK(env.exit_code == 0);
  CHECK(env.out == cli::environment_markdown());
  CHECK(env.out.find("| `SLURM_PROCID` |") != std::string::npos);
  auto recipes = test::run_meshrun({"docs", "recipes"});
  CHECK(recipes.exit_code == 0);
  CHECK(recipes.out == read_all(std::string(MESHRUN_SOURCE_DIR) + "/docs/recipes.md"));
  CHECK(test::run_meshrun({"docs", "everything"}).exit_code == 2);
}

}  // namespace
}  // namespace meshrun
