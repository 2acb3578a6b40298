// The rendezvous store's server, run by rank 0: a key-value store over TCP
// (protocol in store_protocol.hpp), bound to the master address only, served
// by one thread that polls every connection. It keeps, for each key, when it
// was last written by its own clock, so heartbeat ages are comparable across
// machines whose clocks disagree.
//
// Invariants: a connection can do nothing before it has proven the job token;
// a get or wait that cannot be answered yet is parked and answered when the
// keys appear or its deadline passes; a closed connection drops its waiter.
#pragma once

#include <memory>
#include <string>

namespace meshrun::dist_detail {

class StoreServer {
 public:
  // Binds host:port (port 0: any free port) before returning, so a taken port
  // is an immediate DistError; then serves on a background thread.
  StoreServer(const std::string& host, int port, std::string token);
  ~StoreServer();  // closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  const std::string& host() const;
  int port() const;  // the bound port

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrun::dist_detail
