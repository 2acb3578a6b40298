// bench/recipe_bench: how fast recipes are checked and planned.
//
// - lint of 100 recipes (the shipped ones and variations of them, written to
//   a temporary folder), against the bare toml++ parse of the same 100 files
//   measured in the same run: the ratio says what meshrun's checking costs on
//   top of reading TOML at all;
// - make_plan for a 1024 nodes × 8 processes PPO cluster (target: < 100 ms).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <toml++/toml.h>

#include "meshrun/lint/lint.hpp"
#include "meshrun/plan/plan.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kSource = MESHRUN_SOURCE_DIR;

// 100 recipe files: each shipped recipe with --set-like variations baked in.
const std::vector<std::string>& corpus() {
  static const std::vector<std::string> files = [] {
    fs::path dir = fs::temp_directory_path() / "meshrun-bench-recipes";
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy(kSource / "recipes", dir, fs::copy_options::recursive);
    const char* bases[] = {"quickstart.toml", "sft-tiny.toml", "ppo70b.toml", "ppo70b-colocated.toml"};
    std::vector<std::string> out;
    for (int i = 0; i < 100; ++i) {
      const std::string base = bases[i % 4];
      fs::path file = dir / ("variant" + std::to_string(i) + ".toml");
      std::ofstream(file) << "include = \"" << base << "\"\nseed = " << i << "\n";
      out.push_back(file.string());
    }
    return out;
  }();
  return files;
}

void BM_ParseToml100(benchmark::State& state) {
  const auto& files = corpus();
  for (auto _ : state) {
    for (const auto& file : files) {
      auto table = toml::parse_file(file);
      // An include is a second file to read, as lint reads it.
      auto base = toml::parse_file((fs::path(file).parent_path() / table["include"].value_or(std::string())).string());
      benchmark::DoNotOptimize(base);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(files.size()));
}
BENCHMARK(BM_ParseToml100)->Unit(benchmark::kMillisecond);

void BM_Lint100(benchmark::State& state) {
  const auto& files = corpus();
  for (auto _ : state) {
    for (const auto& file : files) {
      auto report = meshrun::lint_recipe(file, {});
      if (!report.ok()) state.SkipWithError(("lint failed: " + report.diagnostics.format()).c_str());
      benchmark::DoNotOptimize(report);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(files.size()));
}
BENCHMARK(BM_Lint100)->Unit(benchmark::kMillisecond);

void BM_Plan1024x8(benchmark::State& state) {
  meshrun::Diagnostics diagnostics;
  auto recipe = meshrun::load_recipe((kSource / "recipes/ppo70b.toml").string(),
                                     {{"launch.nodes=1024"},
                                      {"roles.actor.nodes=256"},
                                      {"roles.critic.nodes=256"},
                                      {"roles.reward.nodes=256"},
                                      {"roles.ref.nodes=256"},
                                      {"rollout.engines=512"},
                                      {"batch.train=4096"},
                                      {"batch.rollout=2048"}},
                                     diagnostics);
  if (!recipe) {
    state.SkipWithError(diagnostics.format().c_str());
    return;
  }
  meshrun::ClusterShape cluster{1024, 8, meshrun::DeviceKind::cuda, 80};
  for (auto _ : state) {
    meshrun::Diagnostics plan_diagnostics;
    auto plan = meshrun::make_plan(*recipe, cluster, plan_diagnostics);
    if (plan_diagnostics.has_errors()) state.SkipWithError(plan_diagnostics.format().c_str());
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_Plan1024x8)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
