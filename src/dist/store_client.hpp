// The rendezvous store's client: a c10d::Store over one authenticated
// connection to rank 0's StoreServer, so Gloo and NCCL rendezvous through it
// (usually behind a c10d::PrefixStore), plus the calls meshrun's own
// rendezvous and liveness checks need (try_get, missing keys on a wait,
// key ages).
//
// Requests are serialized by a mutex; a thread that must not queue behind a
// long wait (the heartbeat) opens its own client. Once the connection breaks
// every call throws StoreUnreachableError: rank 0, which hosts the store, is
// gone or unreachable.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "socket.hpp"

namespace meshrun::dist_detail {

class StoreUnreachableError : public DistError {
 public:
  using DistError::DistError;
};

struct StoreEndpoint {
  std::string host;
  int port = 0;
  std::string token;
  int rank = 0;  // who connects, for messages
  std::string text() const { return endpoint_text(host, port); }
};

class StoreClient final : public c10d::Store {
 public:
  // Connects and authenticates. A refused or timed-out connection is retried
  // until `connect_deadline` (rank 0 may start after the others); an address
  // that does not resolve, an unreachable network, or a wrong token is an
  // immediate DistError. Request timeouts default to `timeout`.
  static c10::intrusive_ptr<StoreClient> connect(const StoreEndpoint& endpoint, std::chrono::milliseconds timeout,
                                                 Clock::time_point connect_deadline);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;  // waits up to the timeout
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // Newer LibTorch asks stores for an independent copy; harmless elsewhere.
  c10::intrusive_ptr<c10d::Store> clone();

  void set_text(const std::string& key, const std::string& value);
  std::optional<std::string> try_get(const std::string& key);  // no waiting
  // The keys still missing when `timeout` ran out; empty when all appeared.
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Milliseconds since each key was last written, by the store's clock; -1
  // for a missing key.
  std::vector<std::int64_t> key_ages(const std::vector<std::string>& keys);

  const StoreEndpoint& endpoint() const { return endpoint_; }
  // Why the connection broke ("the connection was closed"); empty while it works.
  std::string broken_reason();
  std::string local_address() const;  // this end of the connection

  // Over a connected socket whose greeting is still unread; use connect().
  StoreClient(StoreEndpoint endpoint, Socket socket, std::chrono::milliseconds timeout);

 private:
  // Sends one request and returns the reply (status byte first). `wait_extra`
  // lengthens the reply deadline for requests the server parks.
  std::string call(const std::string& frame, std::chrono::milliseconds wait_extra = {});
  std::string read_frame(Clock::time_point deadline);
  [[noreturn]] void lost(const std::string& reason);

  StoreEndpoint endpoint_;
  Socket socket_;
  std::mutex mutex_;
  std::string broken_;  // why the connection is unusable; empty while it works
};

}  // namespace meshrun::dist_detail
