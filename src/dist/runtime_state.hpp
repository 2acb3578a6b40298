// What a Runtime holds, and how every collective runs: under the timeout,
// with a failure turned into a DistError that names the ranks to blame
// (liveness.hpp). Private to src/dist.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "c10d_compat.hpp"
#include "job_keys.hpp"
#include "liveness.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/dist/mesh.hpp"
#include "store_client.hpp"
#include "store_server.hpp"

namespace meshrun::dist_detail {

class RuntimeState;

struct GroupState {
  std::string name;        // shown in messages: "actor/dp"
  std::string store_name;  // unique within the job: "actor/dp/1"
  std::vector<int> ranks;  // global ranks, group-rank order
  int rank = 0;            // this process's group rank
  int global_rank = 0;
  std::string backend;     // gloo | nccl
  c10::Device device{c10::kCPU};
  compat::ProcessGroupPtr native;
  RuntimeState* runtime = nullptr;  // null once the runtime has shut down

  std::vector<int> peers() const;  // the other members' global ranks
  RuntimeState& owner() const;     // throws DistError after shutdown
};

class RuntimeState {
 public:
  LaunchInfo launch;
  DistOptions options;
  JobKeys keys;
  std::string master;  // "host:port" as configured
  Clock::time_point started;
  double init_seconds = 0;  // rendezvous and world group
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds stale_after{3000};

  std::unique_ptr<StoreServer> server;  // rank 0
  c10::intrusive_ptr<StoreClient> store;
  std::unique_ptr<Heartbeat> heartbeat;
  std::unique_ptr<LivenessMonitor> liveness;
  std::string local_address;  // of the interface that reaches the master
  bool joined = false;        // claimed its rank: may write keys under it

  std::vector<std::shared_ptr<GroupState>> groups;  // creation order, world first
  std::optional<Group> world;
  std::vector<DeviceMesh> meshes;
  std::vector<Role> mesh_roles;  // meshes[i] is mesh_roles[i]'s
  std::map<int, Group> engines;
  bool groups_built = false;
  bool shared_filesystem = true;
  std::string failure;  // the first failure, the exit reason if none is given
  bool shut_down = false;

  ~RuntimeState();

  std::chrono::milliseconds timeout() const { return options.timeout; }
  // Creates a group on its members (this rank must be one). Throws DistError
  // naming the members that did not come.
  Group create_group(std::string name, std::string store_name, std::vector<int> ranks);
  // The DistError for `operation` on `group` that failed with `native_error`.
  DistError failure_of(const GroupState& group, std::string_view operation, Clock::time_point began,
                       const std::string& native_error);
  void shutdown(std::string_view reason);

  // Runs fn (which waits for its work) as `operation` on `group`; the
  // heartbeat says so meanwhile. Refuses to start once the heartbeat's
  // watch found a silent rank.
  template <class Fn>
  auto run(GroupState& group, std::string_view operation, Fn&& fn) -> decltype(fn()) {
    const Clock::time_point began = Clock::now();
    refuse_if_a_peer_is_silent(group, operation);
    const std::string doing = std::string(operation) + " on group " + group.name;
    if (heartbeat) heartbeat->set_activity("in " + doing);
    try {
      auto finish = [&] {
        if (heartbeat) heartbeat->set_activity("after " + doing);
      };
      if constexpr (std::is_void_v<decltype(fn())>) {
        fn();
        finish();
      } else {
        auto result = fn();
        finish();
        return result;
      }
    } catch (const DistError&) {
      throw;
    } catch (const c10::Error& error) {
      throw failure_of(group, operation, began, error.what_without_backtrace());
    } catch (const std::exception& error) {
      throw failure_of(group, operation, began, error.what());
    }
  }

  // Set from the heartbeat thread when its watch finds a rank silent for
  // longer than the timeout.
  void note_silent_peers(const std::string& reason);

 private:
  void linger_for_peers();
  void refuse_if_a_peer_is_silent(const GroupState& group, std::string_view operation);
  std::mutex silent_mutex_;
  std::string silent_peers_;
};

// The operation name under which group creation fails ("creating group X").
inline constexpr std::string_view kCreating = "create";

// The first line of a native (Gloo, NCCL, c10) error message.
std::string first_line(const std::string& text);

inline std::atomic<Runtime*> current_runtime{nullptr};

}  // namespace meshrun::dist_detail
