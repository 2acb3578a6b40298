// Running a recipe on an existing Ray cluster (`meshrun submit RECIPE --ray`,
// `meshrun plan RECIPE --ray`): meshrun starts no cluster manager of its own;
// it submits one Ray job whose entrypoint (ray_job.py, shipped in
// share/meshrun/) reserves a placement group per node of the plan's cluster
// and starts one native meshrun worker per bundle.
//
// Invariants: a bundle is one process slot, {CPU: 1} on cpu and {CPU: 1,
// GPU: 1} on cuda, and a node's procs_per_node bundles are placed on one Ray
// node (STRICT_PACK), so local ranks mean what they mean under every other
// launcher. The fit check reads the cluster's total resources (what could
// ever be placed); resources other jobs hold now make the placement wait,
// bounded by launch.timeout_minutes, not fail here. Every call to the `ray`
// command is bounded in time.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshrun/launch/env.hpp"

namespace meshrun {

struct Recipe;        // meshrun/recipe/recipe.hpp
struct Plan;          // meshrun/plan/plan.hpp
struct ClusterShape;  // meshrun/plan/plan.hpp

// One node of `ray list nodes --format json --detail`.
struct RayNode {
  std::string id;
  std::string ip;
  bool alive = false;
  double cpus = 0;
  double gpus = 0;
};

// The nodes of that JSON array. Throws LaunchError (meshrun/launch/launcher.hpp)
// for text that is not such an array.
std::vector<RayNode> parse_ray_nodes(const std::string& json);

struct RayFit {
  bool fits = false;
  std::string text;  // one paragraph: the cluster, the job's bundles, and the verdict or the shortfall
};

// Whether the cluster's alive nodes can hold `cluster.nodes` groups of
// `cluster.procs_per_node` bundles, each group on one Ray node.
RayFit ray_cluster_fit(const ClusterShape& cluster, const std::vector<RayNode>& nodes, const std::string& address);

// The job server to talk to: `option` (--address) when given, else
// launch.address, else RAY_ADDRESS. Throws ConfigError when none is set, or
// when the chosen one is not an http(s):// address (a GCS host:6379 or a
// ray:// client address cannot take jobs).
std::string resolve_ray_address(const std::string& option, const Recipe& recipe, const Environment& environment);

// Runs `ray list nodes` against `address` (the `ray` command found on PATH),
// at most timeout_seconds. Throws LaunchError naming what failed: no `ray`
// command, no answer, an error from the cluster, output that is not the
// node list.
std::vector<RayNode> query_ray_nodes(const std::string& address, double timeout_seconds = 60);

// query_ray_nodes() then ray_cluster_fit(): what `plan --ray` and
// `submit --ray` ask the cluster.
RayFit fit_on_ray_cluster(const ClusterShape& cluster, const std::string& address);

struct RayJobOptions {
  // As the cluster's nodes see them: absolute paths on a shared file system.
  std::string meshrun_binary;
  std::string recipe_path;
  std::string entrypoint;          // ray_job.py
  std::string python = "python3";  // the interpreter that runs it on the cluster (it imports ray)
  std::vector<std::string> sets;   // "section.key=value", each passed to the workers as `--set`
  std::string address;             // resolve_ray_address()
  std::string log_level = "info";  // the workers' --log-level
  // Where the workers run (the submitter's folder, as on a shared file
  // system: relative paths in `sets` resolve there as they would here);
  // empty: wherever Ray starts its actors.
  std::string working_directory;
};

// The `ray job submit` command line (argv, starting with "ray"): the job's
// entrypoint runs `PYTHON ENTRYPOINT run --spec SPEC`, where SPEC is the
// base64 of a JSON object holding the plan's cluster, the recipe's restart
// policy and timeouts, the workers' working directory, and their argv (`meshrun --log-level L run
// RECIPE --set ...`, plus `launch.type=ray` when the recipe's type is
// neither "ray" nor "auto"). `ray job submit` joins its arguments with
// Windows quoting for a POSIX shell, so every word it passes on is plain
// (base64 has no character a shell reads); a python or entrypoint path with
// other characters is a ConfigError.
std::vector<std::string> make_ray_submit_command(const Recipe& recipe, const Plan& plan, const RayJobOptions& options);

// A bash script that runs that command (`exec ray job submit ...`), with
// comments saying what the job runs. For `meshrun submit --ray` without --now.
std::string make_ray_submit_script(const Recipe& recipe, const Plan& plan, const RayJobOptions& options);

}  // namespace meshrun
