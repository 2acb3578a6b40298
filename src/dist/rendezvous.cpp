// Claim, arrival and the wait for all ranks; see rendezvous.hpp.
#include "rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>

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

void publish_recipe(StoreClient& store, const JobKeys& keys, int rank, const std::string& recipe_keys) {
  if (rank != 0 && !recipe_keys.empty()) store.set_text(keys.recipe(rank), recipe_keys);
}

namespace {

// "key = value" lines as a map, for naming what differs.
std::map<std::string, std::string> recipe_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const size_t equals = line.find(" = ");
    if (equals != std::string::npos) out[line.substr(0, equals)] = line.substr(equals + 3);
    begin = end + 1;
  }
  return out;
}

// The first few keys whose values differ: "roles.actor.model "a" here, "b" on rank 0".
std::string differing_keys(const std::string& theirs, const std::string& ours) {
  const auto a = recipe_lines(theirs), b = recipe_lines(ours);
  std::vector<std::string> keys;
  for (const auto& [key, value] : a)
    if (auto found = b.find(key); found == b.end() || found->second != value) keys.push_back(key);
  for (const auto& [key, value] : b)
    if (!a.count(key)) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  constexpr size_t kNamed = 4;
  std::string text;
  for (size_t i = 0; i < keys.size() && i < kNamed; ++i) {
    const auto value = [&](const std::map<std::string, std::string>& side) {
      auto found = side.find(keys[i]);
      return found == side.end() ? std::string("(absent)") : found->second;
    };
    text += (i ? "; " : "") + keys[i] + " " + value(a) + " against rank 0's " + value(b);
  }
  if (keys.size() > kNamed) text += "; and " + std::to_string(keys.size() - kNamed) + " more";
  return text;
}

}  // namespace

void agree_on_recipe(StoreClient& store, const JobKeys& keys, int rank, int world_size,
                     const std::string& recipe_keys, Clock::time_point deadline) {
  if (recipe_keys.empty()) return;
  std::string verdict;
  if (rank == 0) {
    std::vector<int> differing;
    std::string first;
    for (int other = 1; other < world_size; ++other) {
      const std::optional<std::string> theirs = store.try_get(keys.recipe(other));
      if (theirs && *theirs == recipe_keys) continue;
      if (differing.empty())
        first = theirs ? differing_keys(*theirs, recipe_keys) : std::string("it published no recipe");
      differing.push_back(other);
    }
    verdict = differing.empty()
                  ? "ok"
                  : "the ranks of one job must run one recipe, but " + describe_ranks(differing) + " of " +
                        std::to_string(world_size) + " resolved another than rank 0's (rank " +
                        std::to_string(differing.front()) + ": " + first +
                        "): start every rank with the same recipe file and --set options";
    store.set_text(keys.recipe_verdict(), verdict);
  } else {
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                               std::chrono::milliseconds(1));
    if (!store.wait_for({keys.recipe_verdict()}, left).empty())
      throw DistError("rendezvous timed out waiting for rank 0's verdict on the ranks' recipes");
    verdict = store.try_get(keys.recipe_verdict()).value_or("");
  }
  if (verdict != "ok") throw DistError(verdict);
}

}  // namespace meshrun::dist_detail
