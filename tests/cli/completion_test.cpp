// `meshrun completion bash`: the shipped scripts/meshrun-completion.bash is
// exactly what the binary writes, and bash, sourcing it, completes
// subcommands, nested subcommands, options and file arguments.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "lint/run_meshrun.hpp"
#include "support/temp_dir.hpp"

namespace meshrun {
namespace {

const std::string kScript = std::string(MESHRUN_SOURCE_DIR) + "/scripts/meshrun-completion.bash";

// The words bash offers for `line` (the words typed; the last is completed).
std::string complete(const std::string& line, const std::string& folder) {
  const std::string command = "cd " + test::shell_quote(folder) + " && bash -c " +
                              test::shell_quote("source " + test::shell_quote(kScript) + "; COMP_WORDS=(" + line +
                                                "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _meshrun; "
                                                "printf '%s ' \"${COMPREPLY[@]}\"");
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  CHECK(::pclose(pipe) == 0);
  return out;
}

TEST_CASE("the shipped bash completion is what meshrun completion bash writes") {
  REQUIRE(test::meshrun_built());
  auto written = test::run_meshrun({"completion", "bash"});
  CHECK(written.exit_code == 0);
  std::ifstream in(kScript);
  std::ostringstream shipped;
  shipped << in.rdbuf();
  INFO("regenerate it: build/meshrun completion bash > scripts/meshrun-completion.bash");
  CHECK(written.out == shipped.str());
  CHECK(test::run_meshrun({"completion", "zsh"}).exit_code == 2);
}

TEST_CASE("bash completes subcommands, nested ones, options and files with it") {
  test::TempDir dir;
  dir.write("recipe-a.toml", "");
  dir.write("recipe-b.toml", "");
  const std::string here = dir.path().string();
  CHECK(complete("meshrun tok", here) == "tokenize ");
  CHECK(complete("meshrun re", here) == "report ");
  CHECK(complete("meshrun ckpt con", here) == "convert ");
  CHECK(complete("meshrun ckpt convert out --r", here) == "--role ");
  CHECK(complete("meshrun tokenize model --ch", here) == "--chat ");
  CHECK(complete("meshrun --log-level debug plan --cl", here) == "--cluster ");
  CHECK(complete("meshrun lint recipe-", here) == "recipe-a.toml recipe-b.toml ");
  CHECK(complete("meshrun docs --nothing", here) == " ");  // printf once, with no word
}

}  // namespace
}  // namespace meshrun
