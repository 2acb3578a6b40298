// `meshrun plan RECIPE [--cluster ...] [--ray [--address URL]]`: the
// placement, meshes and memory; with --ray, whether the Ray cluster can hold
// the plan's bundles (exit 1 when it cannot).
#include <cstdio>
#include <fstream>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "engine.hpp"
#include "meshrun/launch/ray.hpp"
#include "meshrun/lint/lint.hpp"

namespace meshrun::cli {
namespace {

// Host memory in GiB from /proc/meminfo, 0 when unreadable.
double host_memory_gb() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemTotal:") return static_cast<double>(kib) / (1024.0 * 1024.0);
  return 0;
}

}  // namespace

int plan_command(const std::string& recipe_path, const CommonOptions& common, const std::string& cluster_text,
                 const std::string& format, const RayPlanOptions& ray) {
  LintOptions options;
  if (!cluster_text.empty()) {
    std::string error;
    options.cluster = ClusterShape::parse(cluster_text, error);
    if (!options.cluster) {
      std::fprintf(stderr, "meshrun plan: --cluster %s: %s\n", cluster_text.c_str(), error.c_str());
      return kUsage;
    }
  }
  // Peek at the recipe's device to fill in the memory of cpu "devices": the
  // planner itself is pure and treats 0 as unknown.
  {
    Diagnostics ignored;
    if (auto recipe = load_recipe(recipe_path, common.overrides(), ignored)) {
      options.visible_memory_gb = visible_gpu_memory_gb(*recipe);
      ClusterShape shape =
          options.cluster ? *options.cluster : ClusterShape::from_recipe(*recipe, options.visible_memory_gb);
      if (shape.device == DeviceKind::cpu && shape.memory_gb <= 0) {
        shape.memory_gb = host_memory_gb() / shape.procs_per_node;
        spdlog::info("cpu memory per process: {:.2f} GiB (this host's memory / {} processes)", shape.memory_gb,
                     shape.procs_per_node);
        options.cluster = shape;
      }
    }
  }
  LintReport report = lint_recipe(recipe_path, common.overrides(), options);
  const std::string diagnostics_text = report.diagnostics.format();
  std::fwrite(diagnostics_text.data(), 1, diagnostics_text.size(), stderr);
  if (report.plan) {
    std::string text = format == "json" ? format_plan_json(*report.plan) + "\n" : format_plan_text(*report.plan);
    std::fputs(text.c_str(), stdout);
  }
  if (!report.ok()) return kFailed;
  if (ray.check) {
    try {
      const std::string address = resolve_ray_address(ray.address, *report.recipe, ProcessEnvironment());
      const RayFit fit = fit_on_ray_cluster(report.plan->cluster, address);
      if (!fit.fits) {
        spdlog::error("{}", fit.text);
        return kFailed;
      }
      spdlog::info("{}", fit.text);
    } catch (const std::exception& error) {
      spdlog::error("{}", describe_failure(error, &*report.recipe));
      return kFailed;
    }
  }
  return kOk;
}

}  // namespace meshrun::cli
