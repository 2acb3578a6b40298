// Liveness record: heartbeat, exit notes, and the wording of blame.
#include "torch_doctest.hpp"

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/dist/liveness.hpp"
#include "src/dist/store_server.hpp"
#include "tests/dist/store_test_support.hpp"

namespace meshrun::dist_detail {
namespace {

using namespace std::chrono_literals;
using State = PeerStatus::State;

TEST_CASE("rank lists and durations read naturally") {
  CHECK(describe_ranks({2}) == "rank 2");
  CHECK(describe_ranks({2, 3, 7}) == "ranks 2, 3, 7");
  CHECK(format_seconds(5) == "5 s");
  CHECK(format_seconds(4.23) == "4.2 s");
  CHECK(format_seconds(0.4) == "0.4 s");
  CHECK(format_seconds(90.4) == "90 s");
}

TEST_CASE("blame names stopped ranks before exited ones, and nobody when all respond") {
  const PeerStatus fine{1, State::responsive, 0.2, "", "", ""};
  const PeerStatus stopped{2, State::stopped, 4.2, "", "", ""};
  const PeerStatus silent{3, State::stopped, -1, "", "", ""};
  const PeerStatus exited{4, State::exited, 6, "failed: out of memory", "", ""};
  CHECK(blame({fine, stopped}) == "rank 2 stopped responding (last heartbeat 4.2 s ago)");
  CHECK(blame({stopped, silent, exited}) == "ranks 2, 3 stopped responding (last heartbeats 4.2 s ago, none)");
  CHECK(blame({fine, exited}) == "rank 4 exited (failed: out of memory)");
  CHECK(blame({fine}).empty());

  PeerStatus described = stopped;
  read_heartbeat_value("actor, critic\nin all_reduce on group actor/dp", described);
  CHECK(described.roles == "actor, critic");
  CHECK(described.activity == "in all_reduce on group actor/dp");
  CHECK(blame({described, silent}) ==
        "ranks 2 (actor, critic, in all_reduce on group actor/dp), 3 stopped responding (last heartbeats 4.2 s ago, "
        "none)");
  PeerStatus unreadable = stopped;
  read_heartbeat_value("no newline", unreadable);
  CHECK(unreadable.roles.empty());
  CHECK(unreadable.activity.empty());
}

TEST_CASE("a heartbeat keeps a rank responsive; once it stops the rank is named") {
  StoreServer server("127.0.0.1", 0, "");
  const JobKeys keys = job_keys_for("job", "m:1");
  LivenessMonitor monitor(test::rank_client(server, 0), keys, 100ms, 300ms);
  auto beat = std::make_unique<Heartbeat>(test::rank_client(server, 1), keys.heartbeat(1), 100ms);
  std::this_thread::sleep_for(400ms);
  auto peers = monitor.read({1, 2});
  CHECK(peers[0].state == State::responsive);
  CHECK(peers[0].heartbeat_age_s < 0.3);
  CHECK(peers[1].state == State::stopped);  // rank 2 never wrote one
  CHECK(peers[1].heartbeat_age_s == -1);

  beat.reset();
  const auto start = Clock::now();
  const std::string why = monitor.explain({1}, Clock::now() + 2s);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(why.rfind("rank 1 (starting) stopped responding (last heartbeat 0.", 0) == 0);
  CHECK(waited < 1);  // found as soon as the heartbeat went stale
}

TEST_CASE("an exit note is reported when nobody stopped; all-responsive says so") {
  StoreServer server("127.0.0.1", 0, "");
  const JobKeys keys = job_keys_for("job", "m:1");
  auto store = test::rank_client(server, 0);
  LivenessMonitor monitor(store, keys, 100ms, 300ms);
  Heartbeat one(test::rank_client(server, 1), keys.heartbeat(1), 100ms);
  Heartbeat two(test::rank_client(server, 2), keys.heartbeat(2), 100ms);
  CHECK(monitor.explain({1, 2}, Clock::now() + 200ms).find("every other member still responds") == 0);
  store->set_text(keys.exited(2), "failed: hook error");
  CHECK(monitor.explain({1, 2}, Clock::now() + 200ms) == "rank 2 exited (failed: hook error)");
}

TEST_CASE("a responsive member in another operation is named with what it is doing") {
  StoreServer server("127.0.0.1", 0, "");
  const JobKeys keys = job_keys_for("job", "m:1");
  LivenessMonitor monitor(test::rank_client(server, 0), keys, 100ms, 300ms);
  Heartbeat one(test::rank_client(server, 1), keys.heartbeat(1), 100ms);
  Heartbeat two(test::rank_client(server, 2), keys.heartbeat(2), 100ms);
  one.set_roles("actor");
  one.set_activity("in all_reduce on group world");
  two.set_roles("critic");
  two.set_activity("in broadcast on group world");
  std::this_thread::sleep_for(250ms);
  const std::string why = monitor.explain({1, 2}, Clock::now() + 200ms, "all_reduce on group world");
  CHECK_MESSAGE(why.find("every other member still responds (heartbeats at most ") == 0, why);
  CHECK_MESSAGE(why.find("old), but rank 2 (critic, in broadcast on group world) is not in this all_reduce") !=
                    std::string::npos,
                why);
}

TEST_CASE("the heartbeat's watch reports a peer silent past its limit, once, and not one that exited") {
  StoreServer server("127.0.0.1", 0, "");
  const JobKeys keys = job_keys_for("job", "m:1");
  std::mutex mutex;
  std::vector<std::string> reports;
  PeerWatch watch;
  watch.ranks = {2, 3};
  watch.keys = keys;
  watch.silent_after = 400ms;
  watch.on_silent = [&](const std::string& reason) {
    std::lock_guard lock(mutex);
    reports.push_back(reason);
  };
  auto two = std::make_unique<Heartbeat>(test::rank_client(server, 2), keys.heartbeat(2), 100ms);
  auto three = std::make_unique<Heartbeat>(test::rank_client(server, 3), keys.heartbeat(3), 100ms);
  two->set_roles("actor");
  Heartbeat watcher(test::rank_client(server, 1), keys.heartbeat(1), 100ms, std::move(watch));
  std::this_thread::sleep_for(300ms);
  test::rank_client(server, 3)->set_text(keys.exited(3), "finished");
  three.reset();  // exited: silent, but not to blame
  std::this_thread::sleep_for(300ms);
  {
    std::lock_guard lock(mutex);
    CHECK(reports.empty());  // rank 2 still beats
  }
  two.reset();
  std::this_thread::sleep_for(1200ms);
  std::lock_guard lock(mutex);
  REQUIRE(reports.size() == 1);
  CHECK_MESSAGE(reports[0].rfind("rank 2 (actor, starting) stopped responding (last heartbeat 0.", 0) == 0,
                reports[0]);
}

TEST_CASE("when the store is gone, rank 0 is named as its host") {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, "");
  const int port = server->port();
  LivenessMonitor monitor(test::rank_client(*server, 1), job_keys_for("job", "m:1"), 100ms, 300ms);
  server.reset();
  const std::string why = monitor.explain({0, 2}, Clock::now() + 1s);
  CHECK(why.find("rank 0 (the store host at 127.0.0.1:" + std::to_string(port) + ") is gone") == 0);
}

}  // namespace
}  // namespace meshrun::dist_detail
