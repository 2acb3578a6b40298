// Heartbeat thread and failure explanation; see liveness.hpp.
#include "liveness.hpp"

#include <algorithm>
#include <cstdio>

namespace meshrun::dist_detail {

Heartbeat::Heartbeat(c10::intrusive_ptr<StoreClient> client, std::string key, std::chrono::milliseconds interval)
    : client_(std::move(client)), key_(std::move(key)), interval_(interval) {
  client_->set_text(key_, "");  // the first beat before anyone can ask
  thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    try {
      client_->set_text(key_, "");
    } catch (const std::exception&) {
      return;
    }
    lock.lock();
  }
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

std::string format_seconds(double seconds) {
  char text[32];
  if (seconds >= 10 || seconds == static_cast<double>(static_cast<long long>(seconds)))
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  else
    std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

std::string blame(const std::vector<PeerStatus>& peers) {
  std::vector<int> stopped;
  std::string ages;
  for (const auto& peer : peers) {
    if (peer.state != PeerStatus::State::stopped) continue;
    stopped.push_back(peer.rank);
    ages += (ages.empty() ? "" : ", ") +
            (peer.heartbeat_age_s < 0 ? std::string("none") : format_seconds(peer.heartbeat_age_s) + " ago");
  }
  if (!stopped.empty())
    return describe_ranks(stopped) + " stopped responding (last heartbeat" + (stopped.size() > 1 ? "s " : " ") +
           ages + ")";
  std::string exited;
  for (const auto& peer : peers) {
    if (peer.state != PeerStatus::State::exited) continue;
    exited += (exited.empty() ? "" : "; ") + std::string("rank ") + std::to_string(peer.rank) + " exited (" +
              peer.exit_reason + ")";
  }
  return exited;
}

LivenessMonitor::LivenessMonitor(c10::intrusive_ptr<StoreClient> client, JobKeys keys,
                                 std::chrono::milliseconds interval, std::chrono::milliseconds stale_after)
    : client_(std::move(client)), keys_(std::move(keys)), interval_(interval), stale_after_(stale_after) {}

std::vector<PeerStatus> LivenessMonitor::read(const std::vector<int>& ranks) {
  std::vector<std::string> heartbeat_keys;
  for (int rank : ranks) heartbeat_keys.push_back(keys_.heartbeat(rank));
  const auto ages = client_->key_ages(heartbeat_keys);
  std::vector<PeerStatus> peers;
  for (size_t i = 0; i < ranks.size(); ++i) {
    PeerStatus peer;
    peer.rank = ranks[i];
    peer.heartbeat_age_s = ages[i] < 0 ? -1 : static_cast<double>(ages[i]) / 1000.0;
    if (auto reason = client_->try_get(keys_.exited(ranks[i]))) {
      peer.state = PeerStatus::State::exited;
      peer.exit_reason = *reason;
    } else if (ages[i] < 0 || std::chrono::milliseconds(ages[i]) > stale_after_) {
      peer.state = PeerStatus::State::stopped;
    }
    peers.push_back(std::move(peer));
  }
  return peers;
}

std::string LivenessMonitor::explain(const std::vector<int>& peers, Clock::time_point give_up_at) {
  std::vector<PeerStatus> statuses;
  try {
    while (true) {
      statuses = read(peers);
      const bool someone_stopped = std::any_of(statuses.begin(), statuses.end(), [](const PeerStatus& peer) {
        return peer.state == PeerStatus::State::stopped;
      });
      if (someone_stopped || Clock::now() >= give_up_at) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(interval_ / 2, give_up_at - Clock::now()));
    }
  } catch (const StoreUnreachableError&) {
    return "rank 0 (the store host at " + client_->endpoint().text() + ") is gone (" + client_->broken_reason() + ")";
  }
  std::string reason = blame(statuses);
  if (!reason.empty()) return reason;
  double oldest = 0;
  for (const auto& peer : statuses) oldest = std::max(oldest, peer.heartbeat_age_s);
  return "every other member still responds (heartbeats at most " + format_seconds(oldest) +
         " old), so one of them is slow or busy in another operation";
}

}  // namespace meshrun::dist_detail
