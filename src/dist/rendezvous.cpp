// Claim, arrival and the wait for all ranks; see rendezvous.hpp.
#include "rendezvous.hpp"

#include <unistd.h>

#include <algorithm>

#include "liveness.hpp"

namespace meshrun::dist_detail {

std::string process_identity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + " pid " + std::to_string(getpid());
}

void claim_rank(StoreClient& store, const JobKeys& keys, int rank, const std::string& identity) {
  const std::vector<uint8_t> mine(identity.begin(), identity.end());
  const auto holder = store.compareSet(keys.claim(rank), {}, mine);
  if (holder != mine)
    throw DistError("rank " + std::to_string(rank) + " of job " + keys.prefix + " is already held by " +
                    std::string(holder.begin(), holder.end()) +
                    ": two processes were given the same rank, or two jobs share the master address, port and job "
                    "id (set MESHRUN_JOB_ID or another MASTER_PORT)");
}

void announce_arrival(StoreClient& store, const JobKeys& keys, int rank, const std::string& identity) {
  store.set_text(keys.arrived(rank), identity);
}

std::string format_missing_arrivals(const std::vector<int>& missing, int world_size,
                                    std::chrono::milliseconds timeout, const std::string& master) {
  return "rendezvous timed out after " + format_seconds(static_cast<double>(timeout.count()) / 1000.0) + ": " +
         describe_ranks(missing) + " of " + std::to_string(world_size) + " never arrived (master " + master + ")";
}

void wait_for_arrivals(StoreClient& store, const JobKeys& keys, int world_size, Clock::time_point deadline,
                       std::chrono::milliseconds timeout, const std::string& master) {
  std::vector<std::string> arrivals;
  for (int rank = 0; rank < world_size; ++rank) arrivals.push_back(keys.arrived(rank));
  const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                             std::chrono::milliseconds(1));
  const auto absent = store.wait_for(arrivals, left);
  if (absent.empty()) return;
  std::vector<int> missing;
  for (int rank = 0; rank < world_size; ++rank)
    if (std::find(absent.begin(), absent.end(), keys.arrived(rank)) != absent.end()) missing.push_back(rank);
  throw DistError(format_missing_arrivals(missing, world_size, timeout, master));
}

}  // namespace meshrun::dist_detail
