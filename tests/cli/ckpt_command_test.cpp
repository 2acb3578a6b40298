// `meshrun ckpt inspect`: lists and verifies the checkpoints of a folder or
// one checkpoint, reports partial saves, and fails on a corrupted file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "lint/run_meshrun.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "support/temp_dir.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

void save(const CheckpointDir& dir, int64_t step) {
  const fs::path partial = dir.begin(step);
  std::ofstream(partial / "rank-0.safetensors") << std::string(64, 'x');
  CheckpointManifest info;
  info.algorithm = "sft";
  info.layout = "world 1; actor dp 1 tp 1 zero 0 fp32";
  dir.commit(step, info);
}

}  // namespace

TEST_CASE("meshrun ckpt inspect lists, verifies and flags checkpoints") {
  REQUIRE(test::meshrun_built());
  test::TempDir temp;
  const CheckpointDir dir(temp.path().string());
  save(dir, 3);
  save(dir, 6);
  dir.begin(9);  // an interrupted save
  auto all = test::run_meshrun({"ckpt", "inspect", temp.path().string()});
  CHECK(all.exit_code == 0);
  CHECK(all.out.find("global_step_3  ok") != std::string::npos);
  CHECK(all.out.find("global_step_6  ok") != std::string::npos);
  CHECK(all.out.find("layout: world 1; actor dp 1 tp 1 zero 0 fp32") != std::string::npos);
  CHECK(all.out.find("rank-0.safetensors") != std::string::npos);
  CHECK(all.out.find(".partial-global_step_9  partial") != std::string::npos);

  auto one = test::run_meshrun({"ckpt", "inspect", dir.final_path(6)});
  CHECK(one.exit_code == 0);
  CHECK(one.out.find("global_step_3") == std::string::npos);

  std::ofstream(fs::path(dir.final_path(3)) / "rank-0.safetensors", std::ios::trunc) << "short";
  auto corrupted = test::run_meshrun({"ckpt", "inspect", temp.path().string()});
  CHECK(corrupted.exit_code == 1);
  CHECK(corrupted.out.find("global_step_3  FAILED:") != std::string::npos);

  auto empty = test::run_meshrun({"ckpt", "inspect", (temp.path() / "nothing").string()});
  CHECK(empty.exit_code == 1);
}

}  // namespace meshrun
