// Timeouts far beyond any run (launch.timeout_minutes = 1e15 from a hand-built
// recipe, or a store timeout of centuries) saturate instead of wrapping
// into the past and failing at once (src/dist/helpers.cpp,
// src/dist/store_client.cpp).
#include "torch_doctest.hpp"

#include <chrono>
#include <string>

#include "meshrun/dist/dist.hpp"
#include "meshrun/launch/env.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "src/dist/store_client.hpp"
#include "src/dist/store_server.hpp"

namespace meshrun {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a huge launch.timeout_minutes becomes a long positive timeout, not an overflow") {
  for (double minutes : {1e9, 1e15, 1e300}) {
    INFO("timeout_minutes = " << minutes);
    Recipe recipe;
    recipe.launch.device = "cpu";
    recipe.launch.timeout_minutes = minutes;
    LaunchInfo launch;
    launch.world_size = 1;
    const DistOptions options = dist_options_from(recipe, launch, MapEnvironment());
    CHECK(options.timeout > std::chrono::hours(24 * 365));
  }
}

TEST_CASE("a store client with a timeout of centuries still answers") {
  using namespace dist_detail;
  StoreServer server("127.0.0.1", 0, "");
  // Past the clock's range once added to now(): the deadline saturates.
  const auto centuries = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::duration::max()) - 1000ms;
  auto store = StoreClient::connect({"127.0.0.1", server.port(), "", 1}, centuries, Clock::now() + 2s);
  store->set("k", {'v'});
  CHECK(store->get("k") == std::vector<uint8_t>{'v'});
  auto clone = store->clone();
  CHECK(clone->check({"k"}));
}

}  // namespace
}  // namespace meshrun
