// Heartbeat thread and failure explanation; see liveness.hpp.
#include "liveness.hpp"

#include <algorithm>
#include <cstdio>

namespace meshrun::dist_detail {

Heartbeat::Heartbeat(c10::intrusive_ptr<StoreClient> client, std::string key, std::chrono::milliseconds interval,
                     PeerWatch watch)
    : client_(std::move(client)), key_(std::move(key)), interval_(interval), watch_(std::move(watch)) {
  client_->set_text(key_, value_locked());  // the first beat before anyone can ask
  thread_ = std::thread([this] { run(); });
}

void Heartbeat::set_roles(std::string roles) {
  {
    std::lock_guard lock(mutex_);
    roles_ = std::move(roles);
    beat_now_ = true;  // a short job should not be blamed as "starting"
  }
  wake_.notify_all();
}

void Heartbeat::set_activity(std::string activity) {
  std::lock_guard lock(mutex_);
  activity_ = std::move(activity);
}

// "ROLES\nACTIVITY"
std::string Heartbeat::value_locked() const { return roles_ + "\n" + activity_; }

void read_heartbeat_value(const std::string& value, PeerStatus& peer) {
  const auto newline = value.find('\n');
  if (newline == std::string::npos) return;
  peer.roles = value.substr(0, newline);
  peer.activity = value.substr(newline + 1);
}

void Heartbeat::watch_peers() {
  if (watch_.silent_after <= std::chrono::milliseconds::zero() || watch_.ranks.empty()) return;
  std::vector<std::string> keys;
  for (int rank : watch_.ranks) keys.push_back(watch_.keys.heartbeat(rank));
  const auto ages = client_->key_ages(keys);
  std::vector<PeerStatus> silent;
  std::vector<int> still_watched;
  for (size_t i = 0; i < watch_.ranks.size(); ++i) {
    const int rank = watch_.ranks[i];
    // One request for every age; more only for a rank past the limit. A
    // rank that never beat is the rendezvous' business, not the watch's.
    if (ages[i] < 0 || std::chrono::milliseconds(ages[i]) <= watch_.silent_after) {
      still_watched.push_back(rank);
      continue;
    }
    if (client_->try_get(watch_.keys.exited(rank))) continue;  // it left: no longer watched
    PeerStatus peer;
    peer.rank = rank;
    peer.state = PeerStatus::State::stopped;
    peer.heartbeat_age_s = static_cast<double>(ages[i]) / 1000.0;
    if (auto value = client_->try_get(keys[i])) read_heartbeat_value(*value, peer);
    silent.push_back(std::move(peer));
  }
  watch_.ranks = std::move(still_watched);
  if (silent.empty()) return;
  watch_.ranks.clear();  // reported once
  if (watch_.on_silent) watch_.on_silent(blame(silent));
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
  while (true) {
    wake_.wait_for(lock, interval_, [this] { return stopping_ || beat_now_; });
    if (stopping_) return;
    beat_now_ = false;
    const std::string value = value_locked();
    lock.unlock();
    try {
      client_->set_text(key_, value);
      watch_peers();
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

namespace {

// "2 (actor, in all_reduce on group world)", "2 (in ...)", "2"
std::string rank_with_detail(const PeerStatus& peer) {
  std::string detail = peer.roles;
  if (!peer.activity.empty()) detail += (detail.empty() ? "" : ", ") + peer.activity;
  return std::to_string(peer.rank) + (detail.empty() ? "" : " (" + detail + ")");
}

// "rank 2 (actor, ...)", "ranks 2 (...), 3"
std::string describe_peers(const std::vector<const PeerStatus*>& peers) {
  std::string text = peers.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < peers.size(); ++i) text += (i ? ", " : "") + rank_with_detail(*peers[i]);
  return text;
}

}  // namespace

std::string blame(const std::vector<PeerStatus>& peers) {
  std::vector<const PeerStatus*> stopped;
  std::string ages;
  for (const auto& peer : peers) {
    if (peer.state != PeerStatus::State::stopped) continue;
    stopped.push_back(&peer);
    ages += (ages.empty() ? "" : ", ") +
            (peer.heartbeat_age_s < 0 ? std::string("none") : format_seconds(peer.heartbeat_age_s) + " ago");
  }
  if (!stopped.empty())
    return describe_peers(stopped) + " stopped responding (last heartbeat" + (stopped.size() > 1 ? "s " : " ") +
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
    if (auto value = client_->try_get(heartbeat_keys[i])) read_heartbeat_value(*value, peer);
    peers.push_back(std::move(peer));
  }
  return peers;
}

std::string LivenessMonitor::explain(const std::vector<int>& peers, Clock::time_point give_up_at,
                                     const std::string& operation) {
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
  std::vector<const PeerStatus*> elsewhere;
  for (const auto& peer : statuses) {
    oldest = std::max(oldest, peer.heartbeat_age_s);
    if (!operation.empty() && !peer.activity.empty() && peer.activity != "in " + operation)
      elsewhere.push_back(&peer);
  }
  const std::string responds = "every other member still responds (heartbeats at most " + format_seconds(oldest) + " old)";
  if (!elsewhere.empty())
    return responds + ", but " + describe_peers(elsewhere) + (elsewhere.size() == 1 ? " is" : " are") +
           " not in this " + operation.substr(0, operation.find(' '));
  return responds + ", so one of them is slow or busy in another operation";
}

}  // namespace meshrun::dist_detail
