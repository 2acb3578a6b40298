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

}  // namespace meshrun::launch_detail
