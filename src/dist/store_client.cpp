// The store client's requests and its connect-and-prove-the-token handshake.
#include "store_client.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "sha256.hpp"
#include "store_protocol.hpp"

namespace meshrun::dist_detail {
namespace {

std::string seconds_text(std::chrono::milliseconds duration) {
  const double seconds = static_cast<double>(duration.count()) / 1000.0;
  char text[32];
  std::snprintf(text, sizeof text, seconds == static_cast<long long>(seconds) ? "%.0f s" : "%.1f s", seconds);
  return text;
}

// now() + wait, or the clock's last instant: a timeout of centuries must not
// wrap into the past and time out at once.
Clock::time_point deadline_after(std::chrono::milliseconds wait) {
  const Clock::time_point now = Clock::now();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return wait >= left ? Clock::time_point::max() : now + wait;
}

std::chrono::milliseconds saturating_sum(std::chrono::milliseconds a, std::chrono::milliseconds b) {
  using ms = std::chrono::milliseconds;
  return b > ms::max() - a ? ms::max() : a + b;
}

std::string to_text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> to_bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

std::string join_keys(const std::vector<std::string>& keys) {
  std::string text;
  for (const auto& key : keys) text += (text.empty() ? "" : ", ") + key;
  return text;
}

// Connects, retrying while the master refuses or does not answer.
Socket connect_with_retries(const StoreEndpoint& endpoint, Clock::time_point deadline) {
  const std::string where = endpoint.text();
  auto pause = std::chrono::milliseconds(50);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    ConnectAttempt attempt = try_connect(endpoint.host, endpoint.port,
                                         std::clamp(left, std::chrono::milliseconds(100), std::chrono::milliseconds(5000)));
    switch (attempt.outcome) {
      case ConnectOutcome::connected:
        return std::move(attempt.socket);
      case ConnectOutcome::unresolvable:
        throw DistError("rank " + std::to_string(endpoint.rank) + " cannot resolve the master address '" +
                        endpoint.host + "': " + attempt.reason);
      case ConnectOutcome::unreachable:
        throw DistError("rank " + std::to_string(endpoint.rank) + " cannot reach the master " + where + ": " +
                        attempt.reason);
      case ConnectOutcome::failed:
        throw DistError("rank " + std::to_string(endpoint.rank) + " cannot connect to the master " + where + ": " +
                        attempt.reason);
      case ConnectOutcome::refused:
      case ConnectOutcome::timed_out:
        break;
    }
    if (Clock::now() >= deadline)
      throw DistError("rank " + std::to_string(endpoint.rank) + " could not reach the rendezvous store at " + where +
                      " (hosted by rank 0): " + attempt.reason +
                      " until the timeout; rank 0 never started listening there (is it running, and is the "
                      "master address right?)");
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace

StoreClient::StoreClient(StoreEndpoint endpoint, Socket socket, std::chrono::milliseconds timeout)
    : c10d::Store(timeout), endpoint_(std::move(endpoint)), socket_(std::move(socket)) {}

c10::intrusive_ptr<StoreClient> StoreClient::connect(const StoreEndpoint& endpoint, std::chrono::milliseconds timeout,
                                                      Clock::time_point connect_deadline) {
  check_port(endpoint.port, "master port");
  Socket socket = connect_with_retries(endpoint, connect_deadline);
  auto client = c10::make_intrusive<StoreClient>(endpoint, std::move(socket), timeout);
  const std::string where = endpoint.text();
  std::string greeting;
  try {
    greeting = client->read_frame(Clock::now() + std::min(timeout, std::chrono::milliseconds(30'000)));
  } catch (const DistError&) {
    throw DistError("the service at " + where + " is not a meshrun rendezvous store (it sent no greeting): is "
                    "another program using the master port?");
  }
  MessageReader reader(greeting);
  std::string nonce;
  try {
    if (reader.u8() != static_cast<std::uint8_t>(StoreStatus::ok) || reader.bytes() != kStoreBanner)
      throw ProtocolError("banner");
    nonce = reader.bytes();
  } catch (const ProtocolError&) {
    throw DistError("the service at " + where + " is not a meshrun rendezvous store (or another version of it)");
  }
  const Sha256Digest proof = hmac_sha256(endpoint.token, nonce);
  const std::string reply = client->call(
      MessageWriter()
          .u8(static_cast<std::uint8_t>(StoreOp::auth))
          .bytes(std::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()))
          .frame());
  if (static_cast<StoreStatus>(reply[0]) != StoreStatus::ok)
    throw DistError("job token mismatch: the rendezvous store at " + where + " (rank 0) refused rank " +
                    std::to_string(endpoint.rank) + ", whose MESHRUN_JOB_TOKEN is " +
                    (endpoint.token.empty() ? "unset" : "set") +
                    ": every process of a job needs the same token (or none); this process is not part of that job");
  return client;
}

std::string StoreClient::read_frame(Clock::time_point deadline) {
  char prefix[4];
  receive_all(socket_.fd(), prefix, 4, deadline);
  const std::uint32_t length = frame_length(prefix);
  if (length == 0 || length > kMaxFrameBytes) throw ProtocolError("malformed store reply");
  std::string payload(length, '\0');
  receive_all(socket_.fd(), payload.data(), length, deadline);
  return payload;
}

void StoreClient::lost(const std::string& reason) {
  broken_ = reason;
  socket_.close();
  throw StoreUnreachableError("lost the rendezvous store at " + endpoint_.text() + " (hosted by rank 0): " + reason);
}

std::string StoreClient::call(const std::string& frame, std::chrono::milliseconds wait_extra) {
  std::lock_guard lock(mutex_);
  if (!broken_.empty())
    throw StoreUnreachableError("lost the rendezvous store at " + endpoint_.text() + " (hosted by rank 0): " + broken_);
  // A request the server answers at once still gets the whole timeout: a
  // busy rank 0 is slow, not gone.
  const Clock::time_point deadline = deadline_after(saturating_sum(timeout_, wait_extra));
  try {
    send_all(socket_.fd(), frame.data(), frame.size(), deadline);
    std::string reply = read_frame(deadline);
    if (static_cast<StoreStatus>(reply[0]) == StoreStatus::error) {
      MessageReader reader(reply);
      reader.u8();
      throw DistError("rendezvous store: " + reader.bytes());
    }
    return reply;
  } catch (const SocketError& error) {
    lost(error.failure() == SocketError::Failure::timed_out
             ? "it did not answer within " + seconds_text(saturating_sum(timeout_, wait_extra))
             : std::string(error.what()));
  } catch (const ProtocolError& error) {
    lost(error.what());
  }
}

void StoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  call(MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::set)).bytes(key).bytes(to_text(value)).frame());
}

void StoreClient::set_text(const std::string& key, const std::string& value) { set(key, to_bytes(value)); }

std::vector<uint8_t> StoreClient::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  MessageReader reader(call(MessageWriter()
                                .u8(static_cast<std::uint8_t>(StoreOp::compare_set))
                                .bytes(key)
                                .bytes(to_text(expected))
                                .bytes(to_text(desired))
                                .frame()));
  reader.u8();
  return to_bytes(reader.bytes());
}

std::vector<uint8_t> StoreClient::get(const std::string& key) {
  MessageReader reader(call(
      MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::get)).bytes(key).i64(timeout_.count()).frame(), timeout_));
  if (static_cast<StoreStatus>(reader.u8()) == StoreStatus::timeout)
    throw DistError("timed out after " + seconds_text(timeout_) + " waiting for store key " + key);
  return to_bytes(reader.bytes());
}

std::optional<std::string> StoreClient::try_get(const std::string& key) {
  MessageReader reader(call(MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::get)).bytes(key).i64(0).frame()));
  if (static_cast<StoreStatus>(reader.u8()) == StoreStatus::timeout) return std::nullopt;
  return reader.bytes();
}

int64_t StoreClient::add(const std::string& key, int64_t value) {
  MessageReader reader(call(MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::add)).bytes(key).i64(value).frame()));
  reader.u8();
  return reader.i64();
}

bool StoreClient::deleteKey(const std::string& key) {
  MessageReader reader(call(MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::remove)).bytes(key).frame()));
  reader.u8();
  return reader.u8() != 0;
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  MessageReader reader(call(MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::check)).strings(keys).frame()));
  reader.u8();
  return reader.u8() != 0;
}

int64_t StoreClient::getNumKeys() {
  MessageReader reader(call(MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::num_keys)).frame()));
  reader.u8();
  return reader.i64();
}

std::vector<std::string> StoreClient::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  MessageReader reader(call(
      MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::wait)).strings(keys).i64(timeout.count()).frame(), timeout));
  if (static_cast<StoreStatus>(reader.u8()) == StoreStatus::ok) return {};
  return reader.strings();
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void StoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  // c10d's kNoTimeout (0) means "no limit"; the store's own timeout bounds it.
  const auto limit = timeout.count() > 0 ? timeout : timeout_;
  const auto absent = wait_for(keys, limit);
  if (!absent.empty())
    throw DistError("timed out after " + seconds_text(limit) + " waiting for store keys " + join_keys(absent));
}

std::vector<std::int64_t> StoreClient::key_ages(const std::vector<std::string>& keys) {
  MessageReader reader(call(MessageWriter().u8(static_cast<std::uint8_t>(StoreOp::ages)).strings(keys).frame()));
  reader.u8();
  const std::int64_t count = reader.i64();
  std::vector<std::int64_t> ages;
  for (std::int64_t i = 0; i < count; ++i) ages.push_back(reader.i64());
  return ages;
}

c10::intrusive_ptr<c10d::Store> StoreClient::clone() {
  return connect(endpoint_, timeout_, deadline_after(timeout_));
}

std::string StoreClient::broken_reason() {
  std::lock_guard lock(mutex_);
  return broken_;
}

std::string StoreClient::local_address() const { return dist_detail::local_address(socket_); }

}  // namespace meshrun::dist_detail
