// Shared pieces of launcher detection: reading and parsing variables so that
// every error names the variable and its value, the per-launcher readers, and
// the rank-layout check they all end with.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/launch/env.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun::launch_detail {

// Hostlists and task lists larger than this are refused rather than expanded:
// no cluster has a million nodes, and a typo like "n[0-999999999]" must not
// exhaust memory.
inline constexpr std::size_t kMaxExpandedEntries = std::size_t{1} << 20;
// The same for the text of an expanded hostlist: a few KiB of long names
// times a large range ("<3000 letters>[0-999999]") would otherwise be GiBs.
inline constexpr std::size_t kMaxExpandedHostBytes = std::size_t{64} << 20;

// The variable's value, treating a variable set to "" as not set: launch
// scripts often export a variable that a scheduler left empty, and an empty
// rank or address means nothing.
std::optional<std::string> read_variable(const Environment& environment, std::string_view name);
bool variable_is_set(const Environment& environment, std::string_view name);

// `reason` explains why these variables are needed (e.g. `launch.type =
// "slurm"`). Throws LaunchEnvError naming every unset one, and showing the
// values of those that are set, when any of `names` is unset.
void require_variables(const Environment& environment, std::span<const std::string_view> names,
                       std::string_view reason);

// Decimal integers, strictly: "RANK='abc' is not a number", "RANK='-1' is
// negative", "WORLD_SIZE='0' must be at least 1".
int parse_non_negative(std::string_view name, std::string_view value);
int parse_positive(std::string_view name, std::string_view value);
int parse_port(std::string_view name, std::string_view value);
// Reads a variable that require_variables() has already seen.
int read_non_negative(const Environment& environment, std::string_view name);
int read_positive(const Environment& environment, std::string_view name);

// One number of the rank layout with the words that explain where it came
// from, e.g. "RANK=3" or "node rank 1 (RANK / LOCAL_WORLD_SIZE)".
struct LayoutField {
  int value = 0;
  std::string description;
};
LayoutField variable_field(std::string_view name, int value);
LayoutField derived_field(std::string_view what, int value, std::string_view how);

struct RankLayout {
  LayoutField rank, local_rank, world_size, local_world_size, node_rank, nodes;
  // The rank that local rank 0 of this node has when every node's ranks are
  // consecutive (the placement the plan assumes); with `how` saying how it
  // was computed and `fix` how a user gets consecutive ranks.
  int first_rank_of_node = 0;
  std::string first_rank_how;
  std::string consecutive_ranks_fix;
};

// Throws LaunchEnvError unless 0 <= rank < world_size, 0 <= local_rank <
// local_world_size, 0 <= node_rank < nodes, and rank == first_rank_of_node +
// local_rank. (local_world_size <= world_size is the caller's: it follows
// from a world size that is a multiple of it, or from SLURM's task sums.)
void check_rank_layout(const RankLayout& layout);

// Reads rank, local rank, world size and local world size from the four
// named variables (already required) and derives the number of nodes, which
// needs the same number of processes on every node. Node rank and the
// consecutive-ranks fields are the caller's.
RankLayout read_uniform_rank_layout(const Environment& environment, std::string_view rank_name,
                                    std::string_view local_rank_name, std::string_view size_name,
                                    std::string_view local_size_name);

// Copies the checked numbers of `layout` into `info`.
void copy_rank_layout(const RankLayout& layout, LaunchInfo& info);

// A detected launch, with how to name its world size in an error message
// ("WORLD_SIZE=8 (from torchrun)").
struct Detection {
  LaunchInfo info;
  std::string world_size_description;
};

// MASTER_PORT when set, else the recipe's launch.master_port.
void set_master_port_from_variable_or_recipe(const Environment& environment,
                                             const LaunchConfig& config, LaunchInfo& info);

// Presence tests, without reading values (see env.hpp for the variables).
bool torchrun_variables_present(const Environment& environment);
bool local_launcher_marked(const Environment& environment);  // MESHRUN_LAUNCHER=local
bool ray_launcher_marked(const Environment& environment);    // MESHRUN_LAUNCHER=ray
// HOROVOD_RANK/SIZE or the Gloo rendezvous pair (the Gloo controller), or
// HOROVOD_CONTROLLER=mpi beside an MPI job's variables.
bool horovod_variables_present(const Environment& environment);
bool slurm_variables_present(const Environment& environment);
enum class MpiImplementation { openmpi, mvapich, pmi };
std::optional<MpiImplementation> present_mpi_implementation(const Environment& environment);
// The implementation's variables, in the order rank, local rank, size, local size.
std::array<std::string_view, 4> mpi_variable_names(MpiImplementation implementation);
// Another launcher's rank and size (`info`, read from rank_name and
// size_name) beside an MPI job's variables must describe the same process:
// otherwise a LaunchEnvError naming both, with `hint` after.
void check_mpi_agrees(const Environment& environment, const LaunchInfo& info, std::string_view rank_name,
                      std::string_view size_name, std::string_view hint);

// Readers. `reason` is used in the message when variables are missing.
// `launcher` is "torchrun", "local" or "ray" (the workers of meshrun's Ray
// job carry torchrun's variables).
Detection detect_torchrun(const Environment& environment, std::string_view launcher,
                          std::string_view reason);
Detection detect_slurm(const Environment& environment, const LaunchConfig& config,
                       std::string_view reason);
Detection detect_mpi(const Environment& environment, const LaunchConfig& config,
                     MpiImplementation implementation, std::string_view reason);
// The Gloo controller's variables when present, else the MPI job's (the MPI
// controller); either way the launcher is "horovod".
Detection detect_horovod(const Environment& environment, const LaunchConfig& config, std::string_view reason);

// The named forms of the public expanders: `subject` names the input in the
// error message, e.g. "SLURM_NODELIST='gpu[01-'".
std::vector<std::string> expand_hostlist(std::string_view hostlist, std::string_view subject);
std::vector<int> expand_tasks_per_node(std::string_view tasks_per_node, std::string_view subject);

// "NAME='value'", the form every message quotes a raw value in.
std::string quoted_variable(std::string_view name, std::string_view value);

}  // namespace meshrun::launch_detail
