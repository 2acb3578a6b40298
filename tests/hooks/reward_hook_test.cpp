#include <doctest/doctest.h>

#include <lua.hpp>
#include <stdexcept>

#include "hook_batch_test_support.hpp"
#include "meshrun/hooks/hook_batch.hpp"

using meshrun::call_reward_hook;
using meshrun::HookArrayType;
using meshrun::HookBatch;
using meshrun::HookError;
using meshrun::HookScript;
using meshrun::hooks_test::batch_fixture;
using meshrun::hooks_test::hook_failure;
using meshrun::hooks_test::SyntheticBatch;

namespace {

std::unique_ptr<HookScript> reward_hooks(bool sandbox = true) {
  meshrun::HookOptions options;
  options.sandbox = sandbox;
  return HookScript::load(batch_fixture("reward_hooks.lua"), options);
}

HookError reward_failure(const std::string& function) {
  auto script = reward_hooks();
  SyntheticBatch data;
  const HookBatch batch = data.batch();
  return hook_failure([&] { call_reward_hook(*script, function, batch); });
}

}  // namespace

TEST_CASE("reward reads every element type through the views") {
  for (const bool sandbox : {true, false}) {
    CAPTURE(sandbox);
    auto script = reward_hooks(sandbox);
    SyntheticBatch data;
    const std::vector<double> rewards = call_reward_hook(*script, "from_views", data.batch());
    REQUIRE(rewards.size() == 4);
    for (int i = 1; i <= 4; ++i) {
      CAPTURE(i);
      const double expected = 3 * i * 1000 + 3 * i * 100 + data.scores[i - 1] + data.values[i - 1] +
                              (100 * i + 2) + (10 * i + 3) / 1000.0;
      CHECK(rewards[i - 1] == doctest::Approx(expected).epsilon(1e-12));
    }
    CHECK(lua_gettop(script->state()) == 0);
  }
}

TEST_CASE("the batch tells its size, shapes and fields") {
  auto script = reward_hooks();
  SyntheticBatch data;
  HookBatch batch = data.batch();
  // Arrays need not have batch.size rows; shapes returns 9 values.
  batch.size = 9;
  const std::vector<double> shapes = call_reward_hook(*script, "shapes", batch);
  CHECK(shapes == std::vector<double>{9, 9, 4, 16, 4, 16, 4, 9, 1});
}

TEST_CASE("int64 elements read as plain Lua numbers") {
  auto script = reward_hooks();
  SyntheticBatch data;
  CHECK(call_reward_hook(*script, "int64_as_keys", data.batch()) ==
        std::vector<double>{11, 10, 10, 10});
}

TEST_CASE("texts are decoded on demand, once per sample and call") {
  auto script = reward_hooks();
  SyntheticBatch data;
  const std::vector<double> rewards = call_reward_hook(*script, "text_lengths", data.batch());
  REQUIRE(rewards.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(rewards[i] == doctest::Approx(static_cast<double>(data.responses[i].size()) +
                                        static_cast<double>(data.prompts[i].size()) / 100));
  }
  CHECK(data.response_decodes == 4);
  CHECK(data.prompt_decodes == 4);

  // A new call decodes again: the cache lives as long as the call.
  call_reward_hook(*script, "text_lengths", data.batch());
  CHECK(data.response_decodes == 8);
}

TEST_CASE("totable copies on request") {
  auto script = reward_hooks();
  SyntheticBatch data;
  CHECK(call_reward_hook(*script, "copies", data.batch()) == std::vector<double>{41, 1, 9, 16});
}

TEST_CASE("views read the caller's memory, not a copy") {
  auto script = reward_hooks();
  SyntheticBatch data;
  HookBatch batch = data.batch();
  batch.response_text = [&data](int64_t) {
    data.response_len[0] = 99;
    return std::string("changed");
  };
  CHECK(call_reward_hook(*script, "aliasing", batch) == std::vector<double>{3, 99, 0, 0});
}

TEST_CASE("a script reaches no pointer or metatable behind the views") {
  for (const bool sandbox : {true, false}) {
    CAPTURE(sandbox);
    auto script = reward_hooks(sandbox);
    SyntheticBatch data;
    CHECK_NOTHROW(call_reward_hook(*script, "opaque", data.batch()));
  }
}

TEST_CASE("reward results of the wrong shape are errors that say what was wrong") {
  struct Case {
    const char* function;
    const char* message;
  };
  const Case cases[] = {
      {"three_values", "three_values returned 3 values for a batch of 4 samples"},
      {"five_values", "five_values returned 5 values for a batch of 4 samples"},
      {"returns_nothing",
       "returns_nothing must return a table of 4 numbers (one per sample), got nil"},
      {"returns_number",
       "returns_number must return a table of 4 numbers (one per sample), got a number"},
      {"string_value", "string_value value 2 is a string, expected a number"},
      {"nan_value", "nan_value value 2 is nan"},
      {"inf_value", "inf_value value 3 is -inf"},
      {"huge_value", "huge_value value 2 is -1e+308, beyond ±1e+30 (the reward statistics would overflow)"},
      {"hole", "hole value 3 is nil, expected a number"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.function);
    const HookError error = reward_failure(c.function);
    CHECK(error.message() == c.message);
    CHECK(error.hook_point() == c.function);
    CHECK(error.script() == batch_fixture("reward_hooks.lua"));
    CHECK(error.line() > 0);  // where the function is defined
    CHECK(error.traceback().empty());
  }
  CHECK(reward_failure("three_values").line() == 91);
}

TEST_CASE("a runtime error in reward names the script line and the hook point") {
  const HookError error = reward_failure("runtime_error");
  CHECK(error.line() == 101);
  CHECK(error.hook_point() == "runtime_error");
  CHECK(error.message() == "attempt to index global 'nil_value' (a nil value)");
  CHECK(error.traceback().find("reward_hooks.lua:105:") != std::string::npos);
  CHECK(std::string(error.what())
            .starts_with(batch_fixture("reward_hooks.lua") +
                         ":101: in hook point 'runtime_error': "));
}

TEST_CASE("a missing hook function is a HookError") {
  const HookError error = reward_failure("no_such_function");
  CHECK(error.hook_point() == "no_such_function");
  CHECK(error.message() == "the script defines no function 'no_such_function'");
  CHECK(error.line() == 0);
}

TEST_CASE("a batch that breaks the rules is refused before Lua runs") {
  auto script = reward_hooks();
  SyntheticBatch data;
  auto refused = [&](const std::function<void(HookBatch&)>& spoil, const std::string& message) {
    HookBatch batch = data.batch();
    spoil(batch);
    try {
      call_reward_hook(*script, "from_views", batch);
      FAIL("expected std::logic_error: " << message);
    } catch (const std::logic_error& error) {
      CHECK(std::string(error.what()) == message);
    }
    CHECK(lua_gettop(script->state()) == 0);
  };
  refused([](HookBatch& b) { b.arrays[1].name = "prompt_ids"; },
          "hook batch: the name \"prompt_ids\" is used twice");
  refused([](HookBatch& b) { b.fields.emplace_back("scores", 1); },
          "hook batch: the name \"scores\" is used twice");
  refused([](HookBatch& b) { b.arrays[0].name = "size"; },
          "hook batch: array name \"size\" is taken by the batch object (batch.size)");
  refused([](HookBatch& b) { b.fields.emplace_back("drop", 1); },
          "hook batch: field name \"drop\" is taken by the batch object (batch.drop)");
  refused([](HookBatch& b) { b.arrays[0].name = "2nd"; },
          "hook batch: array name \"2nd\" is not a Lua identifier");
  refused([](HookBatch& b) { b.arrays[0].name = "end"; },
          "hook batch: array name \"end\" is not a Lua identifier");
  refused(
      [](HookBatch& b) {
        b.arrays[0].shape = {2, 2, 2};
      },
      "hook batch: array \"prompt_ids\" has 3 dimensions; views are 1-D or 2-D");
  refused(
      [](HookBatch& b) {
        b.arrays[0].shape = {4, -1};
      },
      "hook batch: array \"prompt_ids\" has an extent of -1");
  refused([](HookBatch& b) { b.arrays[0].data = nullptr; },
          "hook batch: array \"prompt_ids\" has elements but no data");
  refused([](HookBatch& b) { b.arrays[0].type = static_cast<HookArrayType>(42); },
          "hook batch: array \"prompt_ids\" has an unknown element type 42");
  refused([](HookBatch& b) { b.size = -1; }, "hook batch: size -1 is out of range");
}

TEST_CASE("an empty array needs no data") {
  auto script = reward_hooks();
  SyntheticBatch data;
  HookBatch batch = data.batch();
  batch.arrays.push_back({"nothing", HookArrayType::float32, nullptr, {0, 5}, false});
  CHECK(call_reward_hook(*script, "int64_as_keys", batch).size() == 4);
}
