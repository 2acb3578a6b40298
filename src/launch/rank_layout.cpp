// The check every launcher's reading ends with: the numbers a launcher gave
// describe one process of a consistent world, laid out the way the plan
// assumes (the ranks of a node are consecutive).
#include <string>

#include "launch_internal.hpp"

namespace meshrun::launch_detail {

LayoutField variable_field(std::string_view name, int value) {
  return {value, std::string(name) + "=" + std::to_string(value)};
}

LayoutField derived_field(std::string_view what, int value, std::string_view how) {
  return {value, std::string(what) + " " + std::to_string(value) + " (" + std::string(how) + ")"};
}

void check_rank_layout(const RankLayout& layout) {
  auto fail_unless_less = [](const LayoutField& index, const LayoutField& count) {
    if (index.value < count.value) return;
    throw LaunchEnvError(index.description + " is not less than " + count.description +
                         " (ranks and indices count from 0)");
  };
  fail_unless_less(layout.rank, layout.world_size);
  fail_unless_less(layout.local_rank, layout.local_world_size);
  fail_unless_less(layout.node_rank, layout.nodes);

  const int expected_rank = layout.first_rank_of_node + layout.local_rank.value;
  if (layout.rank.value != expected_rank) {
    throw LaunchEnvError(
        layout.rank.description + " is not " + std::to_string(expected_rank) + " = " +
        layout.first_rank_how + " + " + layout.local_rank.description +
        ": the ranks of a node are not consecutive, but meshrun's plan places ranks node by "
        "node; " +
        layout.consecutive_ranks_fix);
  }
}

RankLayout read_uniform_rank_layout(const Environment& environment, std::string_view rank_name,
                                    std::string_view local_rank_name, std::string_view size_name,
                                    std::string_view local_size_name) {
  RankLayout layout;
  layout.rank = variable_field(rank_name, read_non_negative(environment, rank_name));
  layout.local_rank = variable_field(local_rank_name, read_non_negative(environment, local_rank_name));
  layout.world_size = variable_field(size_name, read_positive(environment, size_name));
  layout.local_world_size = variable_field(local_size_name, read_positive(environment, local_size_name));
  const int world_size = layout.world_size.value;
  const int local_size = layout.local_world_size.value;
  if (world_size % local_size != 0) {
    throw LaunchEnvError(layout.world_size.description + " is not a multiple of " +
                         layout.local_world_size.description +
                         ": meshrun needs the same number of processes on every node");
  }
  layout.nodes = derived_field("nodes", world_size / local_size,
                               std::string(size_name) + " / " + std::string(local_size_name));
  return layout;
}

void copy_rank_layout(const RankLayout& layout, LaunchInfo& info) {
  info.rank = layout.rank.value;
  info.local_rank = layout.local_rank.value;
  info.world_size = layout.world_size.value;
  info.local_world_size = layout.local_world_size.value;
  info.node_rank = layout.node_rank.value;
  info.nodes = layout.nodes.value;
}

}  // namespace meshrun::launch_detail
