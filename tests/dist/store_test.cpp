// The rendezvous store: server and client over real loopback sockets.
#include "torch_doctest.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "src/dist/store_client.hpp"
#include "src/dist/socket.hpp"
#include "src/dist/store_server.hpp"
#include "tests/dist/store_test_support.hpp"

namespace meshrun::dist_detail {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

c10::intrusive_ptr<StoreClient> client_of(const StoreServer& server, const std::string& token = "",
                                          std::chrono::milliseconds timeout = 2s) {
  return StoreClient::connect({"127.0.0.1", server.port(), token, 1}, timeout, Clock::now() + timeout);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST_CASE("set, get, add, check, delete and count keys") {
  StoreServer server("127.0.0.1", 0, "");
  auto store = client_of(server);
  store->set("a", bytes("one"));
  CHECK(text(store->get("a")) == "one");
  store->set("a", bytes("two"));
  CHECK(text(store->get("a")) == "two");
  CHECK(store->add("n", 5) == 5);
  CHECK(store->add("n", -2) == 3);
  CHECK(text(store->get("n")) == "3");
  CHECK(store->check({"a", "n"}));
  CHECK_FALSE(store->check({"a", "missing"}));
  CHECK(store->getNumKeys() == 2);
  CHECK(store->deleteKey("a"));
  CHECK_FALSE(store->deleteKey("a"));
  CHECK(store->getNumKeys() == 1);
  CHECK(store->try_get("a") == std::nullopt);
  CHECK(store->try_get("n") == std::optional<std::string>("3"));
  store->set("empty", {});
  CHECK(store->try_get("empty") == std::optional<std::string>(""));
}

TEST_CASE("compareSet follows c10d: set when absent and expected empty, swap when equal") {
  StoreServer server("127.0.0.1", 0, "");
  auto store = client_of(server);
  CHECK(text(store->compareSet("k", bytes("x"), bytes("y"))) == "x");  // absent, expected non-empty: untouched
  CHECK_FALSE(store->check({"k"}));
  CHECK(text(store->compareSet("k", {}, bytes("first"))) == "first");
  CHECK(text(store->compareSet("k", {}, bytes("second"))) == "first");  // held value wins
  CHECK(text(store->compareSet("k", bytes("first"), bytes("third"))) == "third");
  CHECK(text(store->get("k")) == "third");
}

TEST_CASE("a get or wait parks until another client writes the key") {
  StoreServer server("127.0.0.1", 0, "");
  auto waiter = client_of(server);
  auto writer = client_of(server);
  std::thread later([&] {
    std::this_thread::sleep_for(150ms);
    writer->set("late", bytes("here"));
    writer->set("later", bytes("too"));
  });
  const auto start = Clock::now();
  CHECK(text(waiter->get("late")) == "here");
  waiter->wait({"late", "later"});
  CHECK(seconds_since(start) >= 0.1);
  later.join();
}

TEST_CASE("a wait that times out names the keys still missing") {
  StoreServer server("127.0.0.1", 0, "");
  auto store = client_of(server);
  store->set("present", {});
  const auto start = Clock::now();
  CHECK(store->wait_for({"present", "absent/1", "absent/2"}, 300ms) == std::vector<std::string>{"absent/1", "absent/2"});
  CHECK(seconds_since(start) >= 0.25);
  CHECK(seconds_since(start) < 2);
  const std::string error = test::dist_error_of([&] { store->wait({"present", "gone"}, 200ms); });
  CHECK(error.find("timed out after 0.2 s waiting for store keys gone") != std::string::npos);
  CHECK(test::dist_error_of([&] { store->get("never"); }).find("waiting for store key never") != std::string::npos);
}

TEST_CASE("key ages come from the server's clock; a missing key has none") {
  StoreServer server("127.0.0.1", 0, "");
  auto store = client_of(server);
  store->set("old", {});
  std::this_thread::sleep_for(250ms);
  store->set("new", {});
  const auto ages = store->key_ages({"old", "new", "missing"});
  REQUIRE(ages.size() == 3);
  CHECK(ages[0] >= 240);
  CHECK(ages[1] < 200);
  CHECK(ages[2] == -1);
}

TEST_CASE("the job token is proven with a challenge; a wrong or missing one is refused") {
  StoreServer server("127.0.0.1", 0, "s3cret");
  auto member = client_of(server, "s3cret");
  member->set("k", bytes("v"));
  const std::string wrong = test::dist_error_of([&] { client_of(server, "guess"); });
  CHECK(wrong.find("job token mismatch") != std::string::npos);
  CHECK(wrong.find("MESHRUN_JOB_TOKEN is set") != std::string::npos);
  CHECK(test::dist_error_of([&] { client_of(server, ""); }).find("MESHRUN_JOB_TOKEN is unset") != std::string::npos);
  // The refused clients changed nothing, and the member carries on.
  CHECK(text(member->get("k")) == "v");
  CHECK(member->getNumKeys() == 1);

  StoreServer open_store("127.0.0.1", 0, "");
  CHECK(test::dist_error_of([&] { client_of(open_store, "s3cret"); }).find("job token mismatch") != std::string::npos);
}

TEST_CASE("a stranger's huge frame before the token is dropped, not buffered; the members carry on") {
  StoreServer server("127.0.0.1", 0, "s3cret");
  auto member = client_of(server, "s3cret");
  member->set("k", bytes("v"));
  ConnectAttempt stranger = try_connect("127.0.0.1", server.port(), 2s);
  REQUIRE(stranger.outcome == ConnectOutcome::connected);
  // A frame header announcing 200 MiB, then bytes of it: the store closes
  // the connection after a few KiB instead of holding them.
  std::string flood(64 << 10, 'x');
  const std::uint32_t length = 200u << 20;
  for (int i = 0; i < 4; ++i) flood[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));  // little-endian
  size_t sent_total = 0;
  bool closed = false;
  const auto deadline = Clock::now() + 5s;
  while (!closed && Clock::now() < deadline) {
    const ssize_t sent = ::send(stranger.socket.fd(), flood.data(), flood.size(), MSG_NOSIGNAL);
    if (sent < 0) {
      closed = errno == EPIPE || errno == ECONNRESET;
      if (!closed) std::this_thread::sleep_for(10ms);
      continue;
    }
    sent_total += static_cast<size_t>(sent);
    if (sent_total > (64u << 20)) break;  // the kernel buffers a few MiB at most: it must have closed long before
  }
  CHECK(closed);
  CHECK(text(member->get("k")) == "v");
}

TEST_CASE("a taken port is an immediate error that says so") {
  StoreServer first("127.0.0.1", 0, "");
  const auto start = Clock::now();
  const std::string error = test::dist_error_of([&] { StoreServer second("127.0.0.1", first.port(), ""); });
  CHECK(seconds_since(start) < 1);
  CHECK(error.find("rank 0 cannot listen on 127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
  CHECK(error.find("Address already in use") != std::string::npos);
  CHECK(error.find("MASTER_PORT") != std::string::npos);
}

TEST_CASE("the server listens on the given address only") {
  StoreServer server("127.0.0.1", 0, "");
  // 127.0.0.2 is loopback too, but not the address the store was bound to.
  const auto attempt = try_connect("127.0.0.2", server.port(), 500ms);
  CHECK(attempt.outcome == ConnectOutcome::refused);
}

TEST_CASE("connecting retries while nobody listens, then names the master") {
  int port = 0;
  {
    StoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  const auto start = Clock::now();
  const std::string error = test::dist_error_of(
      [&] { StoreClient::connect({"127.0.0.1", port, "", 3}, 1s, Clock::now() + 600ms); });
  CHECK(seconds_since(start) >= 0.5);
  CHECK(seconds_since(start) < 3);
  CHECK(error.find("rank 3 could not reach the rendezvous store at 127.0.0.1:" + std::to_string(port)) !=
        std::string::npos);
  CHECK(error.find("Connection refused") != std::string::npos);
}

TEST_CASE("a rank started before rank 0 connects once the store is up") {
  int port = 0;
  {
    StoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  std::unique_ptr<StoreServer> server;
  std::thread rank0([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<StoreServer>("127.0.0.1", port, "");
  });
  auto store = StoreClient::connect({"127.0.0.1", port, "", 1}, 2s, Clock::now() + 5s);
  store->set("k", {});
  CHECK(store->check({"k"}));
  rank0.join();
}

TEST_CASE("a malformed port or an unresolvable master fails at once") {
  const auto start = Clock::now();
  CHECK(test::dist_error_of([] { StoreClient::connect({"127.0.0.1", 0, "", 1}, 1s, Clock::now() + 5s); })
            .find("malformed master port 0") != std::string::npos);
  CHECK(test::dist_error_of([] { StoreClient::connect({"127.0.0.1", 70000, "", 1}, 1s, Clock::now() + 5s); })
            .find("between 1 and 65535") != std::string::npos);
  CHECK(test::dist_error_of([] { StoreClient::connect({"no-such-host.invalid", 29500, "", 1}, 1s, Clock::now() + 5s); })
            .find("cannot resolve the master address 'no-such-host.invalid'") != std::string::npos);
  CHECK(seconds_since(start) < 4);
}

TEST_CASE("a service that is not a meshrun store is recognized") {
  // The kernel accepts the connection into the backlog; nobody greets it.
  Socket listener = listen_on("127.0.0.1", 0);
  const std::string error =
      test::dist_error_of([&] { StoreClient::connect({"127.0.0.1", bound_port(listener), "", 1}, 500ms, Clock::now() + 2s); });
  CHECK(error.find("is not a meshrun rendezvous store") != std::string::npos);
}

TEST_CASE("a client whose server went away says rank 0 is gone") {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, "");
  auto store = client_of(*server);
  store->set("k", {});
  server.reset();
  const std::string error = test::dist_error_of([&] { store->set("k", {}); });
  CHECK(error.find("lost the rendezvous store at 127.0.0.1:") != std::string::npos);
  CHECK(error.find("hosted by rank 0") != std::string::npos);
  CHECK_THROWS_AS(store->check({"k"}), StoreUnreachableError);
}

}  // namespace
}  // namespace meshrun::dist_detail
