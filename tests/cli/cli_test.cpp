// Tests of the meshrun command line, running the built executable from the
// repository root: version, help, the default subcommand, --set, JSON
// output, --cluster, docs and usage errors.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include "lint/run_meshrun.hpp"
#include "meshrun_version.hpp"
#include "recipe/diagnostic_matchers.hpp"
#include "support/worker_process.hpp"

namespace meshrun {
namespace {

using test::run_meshrun;
using json = nlohmann::json;

// Valid: 1 node × 2 cpu processes, one tiny actor.
const std::string kValid = "tests/lint/valid/sft_cpu.toml";
// Invalid: backend nccl on device cpu, one error.
const std::string kInvalid = "tests/lint/broken/cpu_nccl.toml";

// Overrides that make an SFT recipe a short real run writing under `dir`.
// A port of its own for every run: a job's port may still be held (its
// connections closing) when the next one starts.
std::vector<std::string> short_sft_run(const std::string& recipe, const std::filesystem::path& dir) {
  return {recipe,         "--set", "data.path=recipes/data/sft_tiny.jsonl",
          "--set",        "train.max_steps=2",
          "--set",        "logging.dir=" + dir.string(),
          "--set",        "checkpoint.output=" + (dir / "model").string(),
          "--set",        "checkpoint.path=" + (dir / "checkpoints").string(),
          "--set",        "launch.master_port=" + std::to_string(test::free_loopback_port())};
}

std::vector<std::string> short_ppo_run(const std::filesystem::path& dir) {
  return {"recipes/quickstart.toml", "--set", "train.max_steps=1",
          "--set",        "logging.dir=" + dir.string(),
          "--set",        "checkpoint.output=" + (dir / "model").string(),
          "--set",        "checkpoint.path=" + (dir / "checkpoints").string(),
          "--set",        "launch.master_port=" + std::to_string(test::free_loopback_port())};
}

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("meshrun_cli_test_" + std::to_string(getpid())) / name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST_CASE("meshrun --version prints one fact per line: meshrun, torch, cuda, nccl, cuda kernels") {
  REQUIRE(test::meshrun_built());
  auto result = run_meshrun({"--version"});
  CHECK(result.exit_code == 0);
  std::vector<std::string> lines;
  std::istringstream text(result.out);
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == std::string("meshrun ") + MESHRUN_VERSION);
  CHECK(lines[1] == std::string("torch ") + TORCH_VERSION);
  CHECK(lines[1].rfind("torch 2.", 0) == 0);
  const std::regex cuda(R"(cuda: (compiled \(CUDA \d+\.\d+\), \d+ GPUs visible|not compiled))");
  const std::regex nccl(R"(nccl: (compiled \(NCCL \d+\.\d+\.\d+\)|not compiled))");
  CHECK_MESSAGE(std::regex_match(lines[2], cuda), lines[2]);
  CHECK_MESSAGE(std::regex_match(lines[3], nccl), lines[3]);
  const std::regex kernels(R"(cuda kernels: (compiled for sm_\d+( sm_\d+)*|not compiled \(LibTorch's kernels on CUDA\)))");
  CHECK_MESSAGE(std::regex_match(lines[4], kernels), lines[4]);
  // This build's own facts: CUDA and NCCL come together or not at all.
#ifdef MESHRUN_HAVE_CUDA
  CHECK(lines[2].rfind("cuda: compiled", 0) == 0);
  CHECK(lines[3].rfind("nccl: compiled", 0) == 0);
#else
  CHECK(lines[2] == "cuda: not compiled");
  CHECK(lines[3] == "nccl: not compiled");
#endif
}

TEST_CASE("--help of meshrun and of each subcommand exits 0 and describes it") {
  REQUIRE(test::meshrun_built());
  SUBCASE("meshrun --help") {
    auto result = run_meshrun({"--help"});
    CHECK(result.exit_code == 0);
    for (const char* subcommand : {"run", "lint", "plan", "docs"})
      CHECK_MESSAGE(result.out.find(subcommand) != std::string::npos, subcommand);
    CHECK(result.out.find("`meshrun RECIPE` is short for `meshrun run RECIPE`") != std::string::npos);
  }
  for (const char* subcommand : {"run", "lint", "plan", "docs"}) {
    CAPTURE(subcommand);
    auto result = run_meshrun({subcommand, "--help"});
    CHECK(result.exit_code == 0);
    CHECK(result.out.find(std::string("meshrun ") + subcommand) != std::string::npos);
  }
  auto plan = run_meshrun({"plan", "--help"});
  CHECK(plan.out.find("--cluster") != std::string::npos);
  CHECK(plan.out.find("--set") != std::string::npos);
  CHECK(plan.out.find("--format") != std::string::npos);
  auto lint = run_meshrun({"lint", "--help"});
  CHECK(lint.out.find("--set") != std::string::npos);
  // Defaults are shown.
  CHECK(plan.out.find("=text") != std::string::npos);
  CHECK(run_meshrun({"--help"}).out.find("=info") != std::string::npos);
}

TEST_CASE("meshrun RECIPE is meshrun run RECIPE") {
  REQUIRE(test::meshrun_built());
  SUBCASE("a valid SFT recipe trains and exits 0") {
    auto shorthand = run_meshrun(short_sft_run(kValid, scratch_dir("shorthand")));
    const auto explicit_dir = scratch_dir("explicit");
    auto arguments = short_sft_run(kValid, explicit_dir);
    arguments.insert(arguments.begin(), "run");
    auto explicit_run = run_meshrun(arguments);
    INFO(shorthand.err);
    CHECK(shorthand.exit_code == 0);
    CHECK(explicit_run.exit_code == 0);
    CHECK(shorthand.err.find("sft finished: 2 steps") != std::string::npos);
    CHECK(explicit_run.err.find("sft finished: 2 steps") != std::string::npos);
    CHECK(std::filesystem::exists(explicit_dir / "model/config.json"));
    CHECK(std::filesystem::exists(explicit_dir / "metrics.jsonl"));
  }
  SUBCASE("a valid PPO recipe trains") {
    auto shorthand = run_meshrun(short_ppo_run(scratch_dir("ppo_shorthand")));
    auto arguments = short_ppo_run(scratch_dir("ppo_explicit"));
    arguments.insert(arguments.begin(), "run");
    auto explicit_run = run_meshrun(arguments);
    INFO(shorthand.err);
    CHECK(shorthand.exit_code == 0);
    CHECK(explicit_run.exit_code == 0);
    CHECK(shorthand.err.find("ppo finished: 1 steps") != std::string::npos);
    CHECK(explicit_run.err.find("ppo finished: 1 steps") != std::string::npos);
  }
  SUBCASE("an invalid recipe exits 1 with its diagnostics") {
    auto shorthand = run_meshrun({kInvalid});
    auto explicit_run = run_meshrun({"run", kInvalid});
    CHECK(shorthand.exit_code == 1);
    CHECK(explicit_run.exit_code == 1);
    CHECK(shorthand.out == explicit_run.out);
    // The same lines; log lines carry their (second-resolution) time.
    const auto untimed = [](const std::string& text) {
      return std::regex_replace(text, std::regex(R"((^|\n)\d{4}-\d\d-\d\d \d\d:\d\d:\d\d )"), "$1");
    };
    CHECK(untimed(shorthand.err) == untimed(explicit_run.err));
    CHECK(untimed(shorthand.err).find("\n[meshrun] error: ") != std::string::npos);
    CHECK(shorthand.err.find(kInvalid + ":8:1: error: ") != std::string::npos);
    CHECK(shorthand.err.find("[launch.backend-device]") != std::string::npos);
    CHECK(shorthand.out.empty());  // nothing planned
  }
  SUBCASE("plan refuses it the same way") {
    auto result = run_meshrun({"plan", kInvalid});
    CHECK(result.exit_code == 1);
    CHECK(result.err.find(kInvalid + ":8:1: error: ") != std::string::npos);
    CHECK(result.out.empty());
  }
  SUBCASE("with a global option first") {
    auto result = run_meshrun({"--log-level", "error", kInvalid});
    CHECK(result.exit_code == 1);
    CHECK(result.err.find("[launch.backend-device]") != std::string::npos);
  }
}

TEST_CASE("--set overrides recipe keys for lint and plan") {
  REQUIRE(test::meshrun_built());
  SUBCASE("lint: fixing the broken key makes the recipe pass") {
    auto broken = run_meshrun({"lint", kInvalid});
    CHECK(broken.exit_code == 1);
    auto fixed = run_meshrun({"lint", kInvalid, "--set", "launch.backend=gloo"});
    CHECK(fixed.exit_code == 0);
    CHECK(fixed.out == kInvalid + ": ok\n");
  }
  SUBCASE("lint: a bad override is located at --set[N]") {
    auto result = run_meshrun({"lint", kValid, "--set", "launch.nodes=1", "--set", "launch.nodes=two"});
    CHECK(result.exit_code == 1);
    CHECK(result.out.find("--set[2]:1:14: error: launch.nodes must be an integer, got string \"two\" [schema.type]") !=
          std::string::npos);
  }
  SUBCASE("plan: the override changes the plan") {
    auto result = run_meshrun({"plan", kValid, "--format", "json", "--set", "launch.procs_per_node=4"});
    CHECK(result.exit_code == 0);
    INFO(result.out << result.err);
    json plan = json::parse(result.out);
    CHECK(plan["cluster"]["procs_per_node"] == 4);
    CHECK(plan["cluster"]["world_size"] == 4);
  }
  SUBCASE("run too") {
    auto arguments = short_sft_run(kInvalid, scratch_dir("run_too"));
    arguments.insert(arguments.end(), {"--set", "launch.backend=auto"});
    auto result = run_meshrun(arguments);
    INFO(result.err);
    CHECK(result.exit_code == 0);
    CHECK(result.err.find("sft finished: 2 steps") != std::string::npos);
  }
}

TEST_CASE("--format json output parses") {
  REQUIRE(test::meshrun_built());
  SUBCASE("lint") {
    auto result = run_meshrun({"lint", "--format", "json", kValid, kInvalid});
    CHECK(result.exit_code == 1);
    INFO(result.out);
    json report = json::parse(result.out);
    REQUIRE(report["recipes"].size() == 2);
    CHECK(report["recipes"][0]["recipe"] == kValid);
    CHECK(report["recipes"][0]["ok"] == true);
    CHECK(report["recipes"][0]["diagnostics"].empty());
    const json& broken = report["recipes"][1];
    CHECK(broken["recipe"] == kInvalid);
    CHECK(broken["ok"] == false);
    REQUIRE(broken["diagnostics"].size() == 1);
    const json& d = broken["diagnostics"][0];
    CHECK(d["severity"] == "error");
    CHECK(d["file"] == kInvalid);
    CHECK(d["line"] == 8);
    CHECK(d["column"] == 1);
    CHECK(d["rule"] == "launch.backend-device");
    CHECK(d["message"].get<std::string>().find("nccl") != std::string::npos);
    CHECK(d["suggestion"] == "use backend = \"gloo\" or \"auto\" on cpu");
    CHECK(report["errors"] == 1);
    CHECK(report["warnings"] == 0);
  }
  SUBCASE("plan") {
    auto result = run_meshrun({"plan", "--format", "json", kValid});
    CHECK(result.exit_code == 0);
    INFO(result.out << result.err);
    json plan = json::parse(result.out);
    CHECK(plan["algorithm"] == "sft");
    CHECK(plan["cluster"]["nodes"] == 1);
    CHECK(plan["cluster"]["procs_per_node"] == 2);
    CHECK(plan["cluster"]["device"] == "cpu");
    REQUIRE(plan["roles"].size() == 1);
    CHECK(plan["roles"][0]["name"] == "actor");
    CHECK(plan["slots"].size() == 2);
  }
}

TEST_CASE("meshrun plan --cluster plans for another cluster") {
  REQUIRE(test::meshrun_built());
  SUBCASE("4x8:cuda:80") {
    auto result = run_meshrun({"plan", kValid, "--cluster", "4x8:cuda:80", "--format", "json"});
    CHECK(result.exit_code == 0);
    INFO(result.out << result.err);
    json plan = json::parse(result.out);
    CHECK(plan["cluster"]["nodes"] == 4);
    CHECK(plan["cluster"]["procs_per_node"] == 8);
    CHECK(plan["cluster"]["device"] == "cuda");
    CHECK(plan["cluster"]["memory_gb"] == 80.0);
    CHECK(plan["cluster"]["world_size"] == 32);
    CHECK(plan["slots"].size() == 32);
  }
  SUBCASE("the text format") {
    auto result = run_meshrun({"plan", kValid, "--cluster", "4x8:cuda:80"});
    CHECK(result.exit_code == 0);
    CHECK_FALSE(result.out.empty());
  }
  SUBCASE("a malformed --cluster is a usage error") {
    for (const char* bad : {"4by8", "0x8", "4x8:tpu", "4x8:cuda:lots", "4x8:cuda:80:extra"}) {
      CAPTURE(bad);
      auto result = run_meshrun({"plan", kValid, "--cluster", bad});
      CHECK(result.exit_code == 2);
      CHECK(result.err.find("--cluster") != std::string::npos);
      CHECK(result.out.empty());
    }
  }
}

TEST_CASE("meshrun docs recipes prints docs/recipes.md") {
  REQUIRE(test::meshrun_built());
  auto result = run_meshrun({"docs", "recipes"});
  CHECK(result.exit_code == 0);
  const std::string docs = test::read_file(std::string(MESHRUN_SOURCE_DIR) + "/docs/recipes.md");
  REQUIRE_FALSE(docs.empty());
  CHECK(result.out == docs);

  auto unknown = run_meshrun({"docs", "planning"});
  CHECK(unknown.exit_code == 2);
}

TEST_CASE("usage errors exit with 2") {
  REQUIRE(test::meshrun_built());
  SUBCASE("no arguments") { CHECK(run_meshrun({}).exit_code == 2); }
  SUBCASE("a bad --log-level") {
    auto result = run_meshrun({"--log-level", "loud", "lint", kValid});
    CHECK(result.exit_code == 2);
    CHECK(result.out.find(": ok") == std::string::npos);  // nothing was linted
  }
  SUBCASE("an unknown option") { CHECK(run_meshrun({"plan", "--frobnicate", kValid}).exit_code == 2); }
  SUBCASE("a subcommand without its recipe") {
    CHECK(run_meshrun({"run"}).exit_code == 2);
    CHECK(run_meshrun({"plan"}).exit_code == 2);
    CHECK(run_meshrun({"docs"}).exit_code == 2);
  }
  SUBCASE("--set without a value") { CHECK(run_meshrun({"lint", kValid, "--set"}).exit_code == 2); }
  SUBCASE("a mistyped subcommand gets the nearest") {
    auto result = run_meshrun({"lnit", kValid});
    CHECK(result.exit_code == 2);
    CHECK(result.err.find("unknown command \"lnit\"; did you mean \"lint\"?") != std::string::npos);
  }
}

TEST_CASE("a valid --log-level is accepted") {
  REQUIRE(test::meshrun_built());
  auto result = run_meshrun({"--log-level", "warn", "lint", kValid});
  CHECK(result.exit_code == 0);
  CHECK(result.out == kValid + ": ok\n");
}

}  // namespace
}  // namespace meshrun
