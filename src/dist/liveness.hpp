// Liveness record and the explanation of a failed collective.
//
// Gloo and NCCL report "connection closed" or "timed out" without saying who
// is to blame. Each rank therefore keeps a heartbeat key fresh in the store
// from a thread of its own (with its own connection, so it never queues
// behind a long wait), and writes "exited/<rank>" = reason when it leaves.
// After a failure, the ranks of the group are sorted into: stopped (heartbeat
// older than stale_after, or none), exited (left with a reason), responsive.
// The store stamps writes with its own clock, so ages need no clock sync.
//
// A heartbeat also says what its rank is: its roles ("actor, critic") and
// what it is doing ("in all_reduce on group world", "after ..."), so that
// a failure can say what the rank to blame was doing, and which responsive
// member is in another operation than the one that failed. The heartbeat
// thread also watches the other ranks' heartbeats: a rank silent for longer
// than the watch's limit (a stopped process, or a live one whose heartbeat
// was lost) is reported once through the watch's callback, so that every
// rank can stop even when no collective of its own is blocked.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "job_keys.hpp"
#include "store_client.hpp"

namespace meshrun::dist_detail {

struct PeerStatus {
  enum class State { responsive, stopped, exited };
  int rank = 0;
  State state = State::responsive;
  double heartbeat_age_s = -1;  // -1: never wrote one
  std::string exit_reason;
  std::string roles;     // from its last heartbeat; empty before it had any
  std::string activity;  // "in all_reduce on group world", ...
};

// The other ranks a heartbeat thread watches, and what to do when one of
// them has been silent (and not exited) for longer than `silent_after`.
struct PeerWatch {
  std::vector<int> ranks;
  JobKeys keys;
  std::chrono::milliseconds silent_after{0};  // 0: no watch
  std::function<void(const std::string& reason)> on_silent;  // called once, from the heartbeat thread
};

class Heartbeat {
 public:
  // Starts writing `key` every `interval` through `client` (its own
  // connection). A write that fails ends the thread quietly: the store is
  // gone, and the main thread hears of it from its own requests.
  Heartbeat(c10::intrusive_ptr<StoreClient> client, std::string key, std::chrono::milliseconds interval,
            PeerWatch watch = {});
  ~Heartbeat();
  void stop();

  // What the next beats say about this rank.
  void set_roles(std::string roles);
  void set_activity(std::string activity);

 private:
  void run();
  std::string value_locked() const;
  void watch_peers();
  c10::intrusive_ptr<StoreClient> client_;
  std::string key_;
  std::chrono::milliseconds interval_;
  PeerWatch watch_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool beat_now_ = false;
  std::string roles_;
  std::string activity_ = "starting";
  std::thread thread_;
};

// Parses a heartbeat's value into peer.roles and peer.activity.
void read_heartbeat_value(const std::string& value, PeerStatus& peer);

// "rank 2", "ranks 2, 3"
std::string describe_ranks(const std::vector<int>& ranks);
// "5 s", "0.4 s", "4.2 s", "90 s"
std::string format_seconds(double seconds);

// "rank 2 (actor, in all_reduce on group world) stopped responding (last
// heartbeat 1.8 s ago)", "ranks 1, 3 stopped responding (...)", "rank 1
// exited (failed: ...)"; empty when every peer responds. Stopped ranks are named before exited ones: a rank that
// exited after a failure usually exited because of the stopped one.
std::string blame(const std::vector<PeerStatus>& peers);

class LivenessMonitor {
 public:
  LivenessMonitor(c10::intrusive_ptr<StoreClient> client, JobKeys keys, std::chrono::milliseconds interval,
                  std::chrono::milliseconds stale_after);

  std::vector<PeerStatus> read(const std::vector<int>& ranks);

  // Why an operation among `peers` failed: polls the record until a peer is
  // found stopped or `give_up_at` (a fresh failure may precede the dead
  // rank's heartbeat going stale). Exited peers are reported when nobody
  // stopped. Says that rank 0 is gone when the store cannot be reached, and
  // that every peer responds (with their heartbeat ages) when none is to
  // blame, naming those that are not in `operation` ("all_reduce on group
  // world") and what they are doing instead.
  std::string explain(const std::vector<int>& peers, Clock::time_point give_up_at,
                      const std::string& operation = "");

  std::chrono::milliseconds interval() const { return interval_; }
  std::chrono::milliseconds stale_after() const { return stale_after_; }

 private:
  c10::intrusive_ptr<StoreClient> client_;
  JobKeys keys_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds stale_after_;
};

}  // namespace meshrun::dist_detail
