// The `ray job submit` command of `meshrun submit --ray`, and the script
// that holds it. The job's entrypoint (ray_job.py) gets everything it needs
// as one base64 word: `ray job submit` joins its arguments with Python's
// subprocess.list2cmdline (Windows quoting) and hands the result to a POSIX
// shell, which would misread quotes, '$' or backslashes in a --set value.
#include <nettle/base64.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meshrun/launch/launcher.hpp"
#include "meshrun/launch/ray.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace {

// Characters that list2cmdline leaves alone and a shell reads literally.
bool plain_word(std::string_view word) {
  if (word.empty()) return false;
  for (const char c : word) {
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || std::string_view("/._-+=:@,%").find(c) !=
                                                                            std::string_view::npos;
    if (!plain) return false;
  }
  return true;
}

std::string base64(const std::string& data) {
  std::string out(BASE64_ENCODE_RAW_LENGTH(data.size()), '\0');
  base64_encode_raw(reinterpret_cast<char*>(out.data()), data.size(), reinterpret_cast<const uint8_t*>(data.data()));
  return out;
}

// The workers' command line: the recipe as the job must run it.
std::vector<std::string> worker_argv(const Recipe& recipe, const Plan& plan, const RayJobOptions& options) {
  std::vector<std::string> argv = {options.meshrun_binary, "--log-level", options.log_level, "run",
                                   options.recipe_path};
  for (const auto& set : options.sets) argv.insert(argv.end(), {"--set", set});
  // Under the Ray job only its variables describe a worker, and every worker
  // must expect the world the plan's cluster gives.
  const LaunchConfig& launch = recipe.launch;
  if (launch.type != "ray" && launch.type != "auto") argv.insert(argv.end(), {"--set", "launch.type=ray"});
  if (launch.nodes != plan.cluster.nodes)
    argv.insert(argv.end(), {"--set", fmt::format("launch.nodes={}", plan.cluster.nodes)});
  if (launch.procs_per_node != plan.cluster.procs_per_node)
    argv.insert(argv.end(), {"--set", fmt::format("launch.procs_per_node={}", plan.cluster.procs_per_node)});
  return argv;
}

nlohmann::json job_spec(const Recipe& recipe, const Plan& plan, const RayJobOptions& options) {
  const LaunchConfig& launch = recipe.launch;
  nlohmann::json spec;
  spec["nodes"] = plan.cluster.nodes;
  spec["procs_per_node"] = plan.cluster.procs_per_node;
  spec["device"] = plan.cluster.device == DeviceKind::cuda ? "cuda" : "cpu";
  spec["master_port"] = launch.master_port;
  spec["max_restarts"] = launch.max_restarts;
  spec["restart_delay"] = launch.restart_delay;
  // The placement waits as long as the rendezvous would: both wait for slots.
  spec["placement_timeout"] = launch.timeout_minutes * 60;
  spec["argv"] = worker_argv(recipe, plan, options);
  if (!options.working_directory.empty()) spec["cwd"] = options.working_directory;
  return spec;
}

void require_plain(std::string_view what, const std::string& word) {
  if (!plain_word(word)) {
    throw ConfigError(fmt::format("{} '{}' cannot go through `ray job submit` unquoted: use a path of letters, "
                                  "digits and /._-+=:@,%",
                                  what, word));
  }
}

}  // namespace

std::vector<std::string> make_ray_submit_command(const Recipe& recipe, const Plan& plan, const RayJobOptions& options) {
  require_plain("the Python interpreter", options.python);
  require_plain("the Ray entrypoint", options.entrypoint);
  const std::string spec = base64(job_spec(recipe, plan, options).dump());
  return {"ray", "job", "submit", "--address", options.address, "--", options.python, options.entrypoint, "run",
          "--spec", spec};
}

std::string make_ray_submit_script(const Recipe& recipe, const Plan& plan, const RayJobOptions& options) {
  const std::vector<std::string> command = make_ray_submit_command(recipe, plan, options);
  std::string workers;
  for (const auto& word : worker_argv(recipe, plan, options)) workers += (workers.empty() ? "" : " ") + shell_quote(word);
  for (const char c : workers)
    if (c == '\n' || c == '\r' || c == '\0')
      throw ConfigError("the workers' command line cannot go into a script comment: it holds a line break or NUL");
  std::string script = "#!/usr/bin/env bash\n";
  script += "# Written by `meshrun submit --ray`: runs the recipe as one Ray job on the cluster at\n";
  script += "# " + options.address + ", and follows its log until it ends (Ctrl-C stops following,\n";
  script += "# not the job; `ray job stop ID --address ADDRESS` stops it and every worker).\n";
  script += fmt::format("# Placement: {} node{} × {} bundle{} ({} each), each node's on one Ray node.\n",
                        plan.cluster.nodes, plan.cluster.nodes == 1 ? "" : "s", plan.cluster.procs_per_node,
                        plan.cluster.procs_per_node == 1 ? "" : "s",
                        plan.cluster.device == DeviceKind::cuda ? "{CPU: 1, GPU: 1}" : "{CPU: 1}");
  script += "# Every worker runs: " + workers + "\n";
  script += "# (--spec is that, with the restart policy, as base64 JSON.)\n";
  script += "set -euo pipefail\nexec";
  for (const auto& word : command) script += " " + shell_quote(word);
  script += "\n";
  return script;
}

}  // namespace meshrun
