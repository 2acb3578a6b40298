// The store keys of one job. Everything meshrun and the process groups write
// lives under "meshrun/<job id>/", so jobs that share a store (or a master
// address and port, one after another) never read each other's keys.
#pragma once

#include <string>
#include <string_view>

namespace meshrun::dist_detail {

struct JobKeys {
  std::string prefix;  // "meshrun/<job id>"

  std::string key(std::string_view name) const { return prefix + "/" + std::string(name); }
  std::string claim(int rank) const { return key("claim/" + std::to_string(rank)); }
  std::string arrived(int rank) const { return key("arrived/" + std::to_string(rank)); }
  std::string heartbeat(int rank) const { return key("heartbeat/" + std::to_string(rank)); }
  std::string exited(int rank) const { return key("exited/" + std::to_string(rank)); }
  // A rank's resolved recipe ("key = value" lines), and rank 0's verdict on
  // whether every rank's is its own.
  std::string recipe(int rank) const { return key("recipe/" + std::to_string(rank)); }
  std::string recipe_verdict() const { return key("recipe-verdict"); }
  // The prefix a process group's own rendezvous keys go under (c10d's
  // PrefixStore adds the "/" before each key).
  std::string group(std::string_view store_name) const { return key("pg/" + std::string(store_name)); }
};

// The job id is the launcher's (or MESHRUN_JOB_ID); without one, the master
// endpoint stands for the job.
inline JobKeys job_keys_for(const std::string& job_id, const std::string& master_endpoint) {
  return JobKeys{"meshrun/" + (job_id.empty() ? master_endpoint : job_id)};
}

}  // namespace meshrun::dist_detail
