// The two executables (src/cli/engine.hpp): the front end links no LibTorch,
// answers what needs none by itself, and hands the rest to meshrun-engine,
// found beside it or in the installed libexec folder; without an engine it
// says where it looked.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "lint/run_meshrun.hpp"
#include "src/cli/engine_path.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

std::string shared_libraries_of(const std::string& program) {
  auto ldd = test::run_program("ldd", {program});
  REQUIRE(ldd.exit_code == 0);
  return ldd.out;
}

// Where a driver could show a GPU the front end hands lint and plan over too.
bool driver_present() {
  std::error_code error;
  return fs::exists("/dev/nvidiactl", error) || fs::exists("/proc/driver/nvidia/gpus", error);
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("meshrun_front_end_test_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(dir); fs::create_directories(dir); }
  ~Scratch() { std::error_code error; fs::remove_all(dir, error); }
};

TEST_CASE("meshrun links no LibTorch; meshrun-engine does") {
  REQUIRE(test::meshrun_built());
  const std::string front = shared_libraries_of(test::meshrun_executable());
  CHECK(front.find("libtorch") == std::string::npos);
  CHECK(front.find("libc10") == std::string::npos);
  const std::string engine = shared_libraries_of(std::string(MESHRUN_BUILD_DIR) + "/" + cli::kEngineName);
  CHECK(engine.find("libtorch_cpu") != std::string::npos);
}

TEST_CASE("without an engine the front end answers help and lint, and says where it looked for the rest") {
  REQUIRE(test::meshrun_built());
  Scratch scratch;
  const fs::path alone = scratch.dir / "meshrun";
  fs::copy_file(test::meshrun_executable(), alone);

  auto help = test::run_program(alone.string(), {"--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("Validate, plan and run a recipe") != std::string::npos);
  CHECK(test::run_program(alone.string(), {"plan", "--help"}).exit_code == 0);
  if (!driver_present()) {
    auto lint = test::run_program(alone.string(), {"lint", "tests/lint/valid/sft_cpu.toml"});
    CHECK_MESSAGE(lint.exit_code == 0, lint.err);
    auto plan = test::run_program(alone.string(), {"plan", "tests/lint/valid/sft_cpu.toml"});
    CHECK_MESSAGE(plan.exit_code == 0, plan.err);
  }
  // A usage error is still the front end's: exit 2, no engine needed.
  CHECK(test::run_program(alone.string(), {"run"}).exit_code == 2);

  const std::vector<std::vector<std::string>> engine_commands = {
      {"run", "tests/lint/valid/sft_cpu.toml"},
      {"tests/lint/valid/sft_cpu.toml"},
      {"--version"},
      {"check", "tests/lint/valid/sft_cpu.toml"},
      {"generate", "builtin:tiny", "--prompt", "hi"}};
  for (const auto& args : engine_commands) {
    CAPTURE(args.front());
    auto handed = test::run_program(alone.string(), args);
    CHECK(handed.exit_code == 1);
    CHECK(handed.err.find("needs meshrun-engine") != std::string::npos);
    CHECK(handed.err.find((scratch.dir / cli::kEngineName).string()) != std::string::npos);
  }
}

TEST_CASE("an installed front end finds the engine in libexec") {
  REQUIRE(test::meshrun_built());
  Scratch scratch;
  const fs::path bin = scratch.dir / "bin";
  fs::create_directories(bin);
  fs::copy_file(test::meshrun_executable(), bin / "meshrun");
  const fs::path engine = (bin / cli::kEngineFromBinDir / cli::kEngineName).lexically_normal();
  fs::create_directories(engine.parent_path());
  fs::create_symlink(fs::path(MESHRUN_BUILD_DIR) / cli::kEngineName, engine);

  auto version = test::run_program((bin / "meshrun").string(), {"--version"});
  CHECK_MESSAGE(version.exit_code == 0, version.err);
  CHECK(version.out.find("\ntorch ") != std::string::npos);
}

TEST_CASE("the engine starts with OpenMP spinning briefly, then sleeping, unless the user chose") {
  REQUIRE(test::meshrun_built());
  Scratch scratch;
  const fs::path bin = scratch.dir / "bin";
  fs::create_directories(bin);
  fs::copy_file(test::meshrun_executable(), bin / "meshrun");
  // An engine that shows what it was started with.
  const fs::path engine = bin / cli::kEngineName;
  {
    std::ofstream script(engine);
    script << "#!/bin/sh\necho \"policy=[${OMP_WAIT_POLICY-unset}] spin=[${GOMP_SPINCOUNT-unset}]\"\n";
  }
  fs::permissions(engine, fs::perms::owner_all);
  auto handed =
      test::run_program((bin / "meshrun").string(), {"--version"}, "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT");
  CHECK_MESSAGE(handed.exit_code == 0, handed.err);
  CHECK(handed.out == "policy=[PASSIVE] spin=[10000]\n");
  // Either variable is the user's choice, and the other stays as it was.
  auto policy = test::run_program((bin / "meshrun").string(), {"--version"}, "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active");
  CHECK(policy.out == "policy=[active] spin=[unset]\n");
  auto spin = test::run_program((bin / "meshrun").string(), {"--version"}, "env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=0");
  CHECK(spin.out == "policy=[unset] spin=[0]\n");
}

}  // namespace
}  // namespace meshrun
