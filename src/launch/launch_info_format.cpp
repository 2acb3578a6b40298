// LaunchInfo for people (`meshrun env`) and for tools (`meshrun env --json`).
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "meshrun/launch/env.hpp"

namespace meshrun {
namespace {

// A job of hundreds of nodes would make one unreadable line; the JSON form
// keeps the full list.
constexpr size_t kHostsShownInFull = 8;
constexpr size_t kHostsShownAtStart = 4;
constexpr size_t kHostsShownAtEnd = 2;

std::string hosts_text(const std::vector<std::string>& hosts) {
  if (hosts.empty()) return "(unknown)";
  auto join = [](auto begin, auto end) {
    std::string text;
    for (auto host = begin; host != end; ++host) {
      if (!text.empty()) text += ' ';
      text += *host;
    }
    return text;
  };
  if (hosts.size() <= kHostsShownInFull) return join(hosts.begin(), hosts.end());
  return join(hosts.begin(), hosts.begin() + kHostsShownAtStart) + " ... " +
         join(hosts.end() - kHostsShownAtEnd, hosts.end()) + " (" + std::to_string(hosts.size()) +
         " hosts)";
}

std::string with_source(const std::string& value, const std::string& source) {
  return source.empty() ? value : value + " (" + source + ")";
}

}  // namespace

std::string format_launch_info_text(const LaunchInfo& info) {
  std::vector<std::pair<std::string, std::string>> lines;
  lines.emplace_back("launcher", info.launcher);
  if (!info.mpi_implementation.empty()) {
    lines.emplace_back("mpi_implementation", info.mpi_implementation);
  }
  lines.emplace_back("rank", std::to_string(info.rank));
  lines.emplace_back("local_rank", std::to_string(info.local_rank));
  lines.emplace_back("world_size", std::to_string(info.world_size));
  lines.emplace_back("local_world_size", std::to_string(info.local_world_size));
  lines.emplace_back("node_rank", std::to_string(info.node_rank));
  lines.emplace_back("nodes", std::to_string(info.nodes));
  lines.emplace_back("master_addr", info.needs_mpi_bootstrap && info.master_addr.empty()
                                        ? "(" + info.master_addr_source + ")"
                                        : with_source(info.master_addr, info.master_addr_source));
  lines.emplace_back("master_port",
                     with_source(std::to_string(info.master_port), info.master_port_source));
  lines.emplace_back("hosts", hosts_text(info.hosts));
  lines.emplace_back("job_id", info.job_id.empty() ? "(none)" : info.job_id);

  size_t key_width = 0;
  for (const auto& [key, value] : lines) key_width = std::max(key_width, key.size());
  std::string text;
  for (const auto& [key, value] : lines) {
    text += key;
    text += ':';
    text.append(key_width - key.size() + 1, ' ');
    text += value;
    text += '\n';
  }
  return text;
}

std::string format_launch_info_json(const LaunchInfo& info) {
  nlohmann::ordered_json json;
  json["launcher"] = info.launcher;
  json["mpi_implementation"] = info.mpi_implementation;
  json["rank"] = info.rank;
  json["local_rank"] = info.local_rank;
  json["world_size"] = info.world_size;
  json["local_world_size"] = info.local_world_size;
  json["node_rank"] = info.node_rank;
  json["nodes"] = info.nodes;
  json["master_addr"] = info.master_addr;
  json["master_addr_source"] = info.master_addr_source;
  json["master_port"] = info.master_port;
  json["master_port_source"] = info.master_port_source;
  json["needs_mpi_bootstrap"] = info.needs_mpi_bootstrap;
  json["hosts"] = info.hosts;
  json["job_id"] = info.job_id;
  // The values come from environment variables, whose bytes need not be
  // UTF-8 (a host name in SLURM_NODELIST, SLURM_JOB_ID): shown replaced
  // (U+FFFD), as metrics.jsonl does, rather than a JSON type_error.
  return json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace meshrun
