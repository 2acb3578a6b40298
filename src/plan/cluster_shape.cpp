// ClusterShape: the machines a plan is made for, from the recipe's [launch]
// section or from `--cluster NODESxPROCS[:DEVICE[:MEM_GB]]`.
#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

#include "meshrun/plan/plan.hpp"

namespace meshrun {
namespace {

// cuda devices without a stated size are assumed to be 80 GiB (A100/H100),
// the most common training device; a cpu slot's share of RAM is unknowable.
constexpr double kDefaultCudaMemoryGb = 80;

constexpr std::string_view kSyntax = "expected NODESxPROCS[:DEVICE[:MEM_GB]], e.g. 4x8:cuda:80";

bool parse_positive_int(std::string_view text, int& value, int max) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && value > 0 && value <= max;
}

bool parse_positive_double(std::string_view text, double& value, double max) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(value) &&
         value > 0 && value <= max;
}

double default_memory_gb(DeviceKind device) {
  return device == DeviceKind::cuda ? kDefaultCudaMemoryGb : 0;
}

}  // namespace

std::optional<ClusterShape> ClusterShape::parse(const std::string& text, std::string& error) {
  std::vector<std::string_view> fields;
  for (std::string_view rest = text;;) {
    size_t colon = rest.find(':');
    fields.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (fields.size() > 3) {
    error = "too many ':' fields; " + std::string(kSyntax);
    return std::nullopt;
  }
  const std::string_view shape = fields[0];
  const std::string_view device = fields.size() > 1 ? fields[1] : std::string_view("cuda");
  const bool has_memory = fields.size() > 2;
  const std::string_view memory = has_memory ? fields[2] : std::string_view();

  size_t x = shape.find_first_of("xX");
  if (x == std::string_view::npos) {
    error = std::string(kSyntax);
    return std::nullopt;
  }
  ClusterShape cluster;
  if (!parse_positive_int(shape.substr(0, x), cluster.nodes, kMaxNodes)) {
    error = "the node count \"" + std::string(shape.substr(0, x)) + "\" is not an integer from 1 to " +
            std::to_string(kMaxNodes) + "; " + std::string(kSyntax);
    return std::nullopt;
  }
  if (!parse_positive_int(shape.substr(x + 1), cluster.procs_per_node, kMaxProcsPerNode)) {
    error = "the processes per node \"" + std::string(shape.substr(x + 1)) + "\" is not an integer from 1 to " +
            std::to_string(kMaxProcsPerNode) + "; " + std::string(kSyntax);
    return std::nullopt;
  }
  const std::optional<DeviceKind> kind = device_kind_named(device);
  if (!kind) {
    error = "unknown device \"" + std::string(device) + "\" (cuda or cpu)";
    return std::nullopt;
  }
  cluster.device = *kind;
  if (has_memory) {
    if (!parse_positive_double(memory, cluster.memory_gb, kMaxDeviceMemoryGb)) {
      error = "the memory \"" + std::string(memory) + "\" is not a positive number of GiB up to " +
              std::to_string(static_cast<long long>(kMaxDeviceMemoryGb)) + "; " + std::string(kSyntax);
      return std::nullopt;
    }
  } else {
    cluster.memory_gb = default_memory_gb(cluster.device);
  }
  return cluster;
}

ClusterShape ClusterShape::from_recipe(const Recipe& recipe, double visible_memory_gb) {
  ClusterShape cluster;
  cluster.nodes = recipe.launch.nodes;
  cluster.procs_per_node = recipe.launch.procs_per_node;
  // The schema admits only the kinds' names (plan/settings.hpp).
  cluster.device = device_kind_named(recipe.launch.device).value();
  cluster.memory_gb = recipe.launch.memory_gb > 0                                    ? recipe.launch.memory_gb
                      : cluster.device == DeviceKind::cuda && visible_memory_gb > 0 ? visible_memory_gb
                                                                                    : default_memory_gb(cluster.device);
  return cluster;
}

}  // namespace meshrun
