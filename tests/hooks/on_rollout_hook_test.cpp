#include <doctest/doctest.h>

#include <lua.hpp>

#include "hook_batch_test_support.hpp"
#include "meshrun/hooks/hook_batch.hpp"

using meshrun::call_on_rollout_hook;
using meshrun::HookBatch;
using meshrun::HookError;
using meshrun::HookScript;
using meshrun::hooks_test::batch_fixture;
using meshrun::hooks_test::hook_failure;
using meshrun::hooks_test::SyntheticBatch;

namespace {

std::unique_ptr<HookScript> rollout_hooks() {
  return HookScript::load(batch_fixture("rollout_hooks.lua"), {});
}

}  // namespace

TEST_CASE("on_rollout rewrites samples in place and drops them") {
  auto script = rollout_hooks();
  SyntheticBatch data;
  HookBatch batch = data.batch();
  const std::vector<bool> keep = call_on_rollout_hook(*script, "truncate", batch);
  CHECK(keep == std::vector<bool>{true, false, true, true});
  CHECK(data.response_len == std::vector<int32_t>{3, 4, 4, 4});
  CHECK(data.response_id(1, 1) == int64_t{1} << 40);
  for (int64_t i = 1; i <= 4; ++i) {
    CAPTURE(i);
    const int64_t kept = std::min<int64_t>(3 * i, 4);
    for (int64_t j = 2; j <= SyntheticBatch::response_tokens; ++j) {
      CAPTURE(j);
      CHECK(data.response_id(i, j) ==
            (i > 1 && j > 4 ? 0 : SyntheticBatch::token_base + 100 * i + j));
      CHECK(data.mask(i, j) == (j <= kept ? 1 : 0));
    }
  }
  // Arrays not marked writable are untouched.
  SyntheticBatch pristine;
  CHECK(data.prompt_ids == pristine.prompt_ids);
  CHECK(lua_gettop(script->state()) == 0);
}

TEST_CASE("on_rollout keep flags and drops combine") {
  auto script = rollout_hooks();
  SyntheticBatch data;
  HookBatch batch = data.batch();
  CHECK(call_on_rollout_hook(*script, "keep_flags", batch) ==
        std::vector<bool>{true, false, true, false});
  CHECK(call_on_rollout_hook(*script, "keep_all", batch) == std::vector<bool>(4, true));
}

TEST_CASE("on_rollout results of the wrong shape are errors") {
  struct Case {
    const char* function;
    const char* message;
  };
  const Case cases[] = {
      {"three_flags", "three_flags returned 3 keep flags for a batch of 4 samples"},
      {"number_flag", "number_flag keep flag 2 is a number, expected true or false"},
      {"returns_string",
       "returns_string must return nil or a table of 4 keep flags (booleans, one per sample), "
       "got a string"},
  };
  auto script = rollout_hooks();
  for (const Case& c : cases) {
    CAPTURE(c.function);
    SyntheticBatch data;
    HookBatch batch = data.batch();
    const HookError error = hook_failure([&] { call_on_rollout_hook(*script, c.function, batch); });
    CHECK(error.message() == c.message);
    CHECK(error.hook_point() == c.function);
    CHECK(error.line() > 0);
  }
}

TEST_CASE("a runtime error in on_rollout is located, and earlier writes stay") {
  meshrun::test::TempDir folder;
  auto script = meshrun::hooks_test::script_in(folder, "fails.lua",
                                               "function on_rollout(batch)\n"
                                               "  batch.response_len[1] = 0\n"
                                               "  batch:drop(1)\n"
                                               "  error('cannot filter')\n"
                                               "end\n");
  SyntheticBatch data;
  HookBatch batch = data.batch();
  const HookError error = hook_failure([&] { call_on_rollout_hook(*script, "on_rollout", batch); });
  CHECK(error.line() == 4);
  CHECK(error.message() == "cannot filter");
  CHECK(error.hook_point() == "on_rollout");
  CHECK(data.response_len[0] == 0);  // the views wrote straight into the caller's memory
}
