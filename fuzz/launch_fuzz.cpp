// Feeds SLURM_JOB_NODELIST ("node[01-04,7]", line 1), SLURM_TASKS_PER_NODE
// ("2(x3),1", line 2) and NAME=VALUE overrides (further lines) to the parsers
// and to SLURM detection. Expected: a LaunchEnvError naming the variable;
// finding: anything else, memory past the expansion bounds among it.
#include <numeric>
#include <string>

#include "fuzz_support.hpp"
#include "meshrun/error.hpp"
#include "meshrun/launch/env.hpp"
#include "meshrun/recipe/recipe.hpp"

using namespace meshrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto lines = fuzz::split(fuzz::as_text(data, size), "\n", 16);
  const std::string_view hostlist = lines[0];
  const std::string_view tasks = lines.size() > 1 ? lines[1] : std::string_view("1");
  size_t nodes = 1;
  long long world = 1;
  try {
    nodes = std::max<size_t>(1, expand_hostlist(hostlist).size());
  } catch (const Error&) {
  }
  try {
    const std::vector<int> counts = expand_tasks_per_node(tasks);
    world = std::accumulate(counts.begin(), counts.end(), 0LL);
  } catch (const Error&) {
  }

  MapEnvironment environment({{"SLURM_PROCID", "0"},
                              {"SLURM_LOCALID", "0"},
                              {"SLURM_NODEID", "0"},
                              {"SLURM_NTASKS", std::to_string(world)},
                              {"SLURM_NNODES", std::to_string(nodes)},
                              {"SLURM_JOB_ID", "4242"}});
  environment.set("SLURM_JOB_NODELIST", std::string(hostlist));
  environment.set("SLURM_TASKS_PER_NODE", std::string(tasks));
  for (size_t i = 2; i < lines.size(); ++i) {
    const size_t eq = lines[i].find('=');
    if (eq != std::string_view::npos)
      environment.set(std::string(lines[i].substr(0, eq)), std::string(lines[i].substr(eq + 1)));
  }
  LaunchConfig config;
  config.type = "slurm";
  try {
    const LaunchInfo info = detect_launch(environment, config, 0, "fuzz.toml:3:1");
    (void)format_launch_info_text(info);
    (void)format_launch_info_json(info);
  } catch (const Error&) {
  }
  return 0;
}
