// Helpers of the store, rendezvous and liveness tests: a client of a test
// server on loopback, and the message of the DistError an action throws.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "src/dist/store_client.hpp"
#include "src/dist/store_server.hpp"

namespace meshrun::dist_detail::test {

// A client of `server` that says it is `rank`, with a 2 s connect timeout.
inline c10::intrusive_ptr<StoreClient> rank_client(const StoreServer& server, int rank) {
  using namespace std::chrono_literals;
  return StoreClient::connect({"127.0.0.1", server.port(), "", rank}, 2s, Clock::now() + 2s);
}

// The DistError `action` throws, or "(no error)".
inline std::string dist_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const DistError& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace meshrun::dist_detail::test
