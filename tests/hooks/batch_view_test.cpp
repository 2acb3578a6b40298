#include <doctest/doctest.h>

#include <chrono>
#include <lua.hpp>

#include "hook_batch_test_support.hpp"
#include "meshrun/hooks/hook_batch.hpp"
#include <nlohmann/json.hpp>

using meshrun::call_on_rollout_hook;
using meshrun::call_on_step_hook;
using meshrun::call_reward_hook;
using meshrun::HookBatch;
using meshrun::HookError;
using meshrun::HookOptions;
using meshrun::HookScript;
using meshrun::hooks_test::batch_fixture;
using meshrun::hooks_test::hook_failure;
using meshrun::hooks_test::script_in;
using meshrun::hooks_test::SyntheticBatch;
using meshrun::test::TempDir;

namespace {

enum class Point { reward, on_rollout };

struct Access {
  Point point;
  const char* code;     // one line, run inside the hook
  const char* message;  // HookError::message(), exactly
};

// Runs `code` at line 2 of reward or on_rollout over a SyntheticBatch and
// returns the HookError it must raise.
HookError access_failure(const Access& access) {
  TempDir folder;
  const std::string body = std::string(access.code) + "\n";
  auto script = script_in(folder, "access.lua",
                          "function reward(batch)\n" + body +
                              "  return {0, 0, 0, 0}\n"
                              "end\n"
                              "function on_rollout(batch)\n" +
                              body + "end\n");
  SyntheticBatch data;
  HookBatch batch = data.batch();
  return hook_failure([&] {
    if (access.point == Point::reward) {
      call_reward_hook(*script, "reward", batch);
    } else {
      call_on_rollout_hook(*script, "on_rollout", batch);
    }
  });
}

void check_access_failures(std::initializer_list<Access> accesses) {
  for (const Access& access : accesses) {
    CAPTURE(access.code);
    const HookError error = access_failure(access);
    CHECK(error.message() == access.message);
    CHECK(error.line() == (access.point == Point::reward ? 2 : 6));
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("reads out of bounds name the array, the index and the bounds") {
  check_access_failures({
      {Point::reward, "local x = batch.response_ids[5]", "response_ids[5]: row 5 out of 1..4"},
      {Point::reward, "local x = batch.response_ids[0]", "response_ids[0]: row 0 out of 1..4"},
      {Point::reward, "local x = batch.response_ids[3][17]",
       "response_ids[3][17]: column 17 out of 1..16"},
      {Point::reward, "local x = batch.response_mask[2][0]",
       "response_mask[2][0]: column 0 out of 1..16"},
      {Point::reward, "local x = batch.response_ids[1.5]",
       "response_ids[1.5]: row 1.5 is not an integer"},
      {Point::reward, "local x = batch.response_ids[true]",
       "response_ids[true]: row true is not a number"},
      {Point::reward, "local x = batch.response_ids:get(5, 1)",
       "response_ids[5][1]: row 5 out of 1..4"},
      {Point::reward, "local x = batch.response_ids:get(2, 17)",
       "response_ids[2][17]: column 17 out of 1..16"},
      {Point::reward, "local x = batch.response_ids:get(1)",
       "response_ids[1][nil]: column nil is not a number"},
      {Point::reward, "local x = batch.scores[5]", "scores[5]: index 5 out of 1..4"},
      {Point::reward, "local x = batch.scores:get(-1)", "scores[-1]: index -1 out of 1..4"},
      {Point::reward, "local x = batch.response_ids.get(1, 2)",
       "get: call it on a 2-D view, v:get(...)"},
      {Point::reward, "local x = batch.scores.get(1)", "get: call it on a 1-D view, v:get(...)"},
      {Point::reward, "local x = batch:response_text(5)",
       "batch:response_text(5): sample 5 out of 1..4"},
      {Point::reward, "local x = batch:prompt_text(0)",
       "batch:prompt_text(0): sample 0 out of 1..4"},
      {Point::reward, "local x = batch.response_text(1)",
       "response_text: call it as batch:response_text(i)"},
  });
}

TEST_CASE("writes in reward are refused: every array is read-only there") {
  check_access_failures({
      {Point::reward, "batch.response_ids[1][1] = 5",
       "response_ids[1][1]: response_ids is read-only"},
      {Point::reward, "batch.response_ids:set(1, 1, 5)",
       "response_ids[1][1]: response_ids is read-only"},
      {Point::reward, "batch.response_len[1] = 1", "response_len[1]: response_len is read-only"},
      {Point::reward, "batch.scores:set(2, 1)", "scores[2]: scores is read-only"},
      {Point::reward, "batch:drop(1)",
       "batch:drop(1): only on_rollout hooks may drop samples (this is reward)"},
      {Point::reward, "batch.size = 3",
       "batch.size: the batch cannot be assigned to; write through its arrays' views"},
  });
}

TEST_CASE("writes in on_rollout are checked for bounds, access and type") {
  check_access_failures({
      {Point::on_rollout, "batch.prompt_ids[1][1] = 5",
       "prompt_ids[1][1]: prompt_ids is read-only"},
      {Point::on_rollout, "batch.scores[1] = 5", "scores[1]: scores is read-only"},
      {Point::on_rollout, "batch.response_ids[1][17] = 5",
       "response_ids[1][17]: column 17 out of 1..16"},
      {Point::on_rollout, "batch.response_ids:set(5, 1, 0)",
       "response_ids[5][1]: row 5 out of 1..4"},
      {Point::on_rollout, "batch.response_len[5] = 1", "response_len[5]: index 5 out of 1..4"},
      {Point::on_rollout, "batch.response_len['1'] = 1",
       "response_len[\"1\"]: index \"1\" is not a number"},
      {Point::on_rollout, "batch.response_ids[1] = 3",
       "response_ids[1]: assign elements, response_ids[i][j] = x or response_ids:set(i, j, x)"},
      {Point::on_rollout, "batch.response_ids[1][1] = 1.5",
       "response_ids[1][1]: 1.5 is not an integer"},
      {Point::on_rollout, "batch.response_ids[1][1] = '7'",
       "response_ids[1][1]: expected a number, got a string"},
      {Point::on_rollout, "batch.response_ids[1][1] = 2^63",
       "response_ids[1][1]: 9.2233720368548e+18 is out of the int64 range"},
      {Point::on_rollout, "batch.response_len[1] = 2^31",
       "response_len[1]: 2147483648 is out of the int32 range"},
      {Point::on_rollout, "batch.response_mask[1][1] = 1",
       "response_mask[1][1]: expected true or false, got a number"},
      {Point::on_rollout, "batch:drop(0)", "batch:drop(0): sample 0 out of 1..4"},
      {Point::on_rollout, "batch:drop(2.5)", "batch:drop(2.5): sample 2.5 is not an integer"},
  });
}

TEST_CASE("texts that the batch lacks or cannot decode are errors at the script line") {
  TempDir folder;
  auto script =
      script_in(folder, "texts.lua",
                "function prompt(batch) return {#batch:prompt_text(1), 0, 0, 0} end\n"
                "function response(batch) return {#batch:response_text(2), 0, 0, 0} end\n");
  SyntheticBatch data;
  HookBatch batch = data.batch();
  batch.prompt_text = nullptr;
  batch.response_text = [](int64_t) -> std::string { throw std::runtime_error("no tokenizer"); };

  HookError error = hook_failure([&] { call_reward_hook(*script, "prompt", batch); });
  CHECK(error.message() == "batch:prompt_text(1): prompt texts are not available in this batch");
  CHECK(error.line() == 1);
  error = hook_failure([&] { call_reward_hook(*script, "response", batch); });
  CHECK(error.message() == "batch:response_text(2): decoding failed: no tokenizer");
  CHECK(error.line() == 2);
}

TEST_CASE("a hook's huge error message is cut to a few KiB, the rest counted") {
  TempDir folder;
  auto script = script_in(folder, "shout.lua",
                          "function reward(batch) error(string.rep('e', 1048576)) end\n"
                          "function short(batch) error('short and whole') end\n");
  SyntheticBatch data;
  const HookBatch batch = data.batch();
  const HookError error = hook_failure([&] { call_reward_hook(*script, "reward", batch); });
  CHECK(error.message().size() < 5000);
  CHECK(error.message().find(" more bytes cut)") != std::string::npos);
  CHECK(std::string(error.what()).size() < 20000);
  CHECK(hook_failure([&] { call_reward_hook(*script, "short", batch); }).message() == "short and whole");
}

TEST_CASE("batch:label(i) gives each sample's label as a Lua value, nil when absent") {
  TempDir folder;
  auto script = script_in(folder, "labels.lua",
                          "function reward(batch)\n"
                          "  local out = {}\n"
                          "  for i = 1, batch.size do\n"
                          "    local label = batch:label(i)\n"
                          "    if type(label) == 'table' then out[i] = label.answer + #label.steps + (label.ok and 100 or 0)\n"
                          "    elseif type(label) == 'string' then out[i] = tonumber(label)\n"
                          "    elseif label == nil then out[i] = -1\n"
                          "    else out[i] = label end\n"
                          "  end\n"
                          "  return out\n"
                          "end\n"
                          "function deep(batch) return {batch:label(1), 0, 0, 0} end\n"
                          "function outside(batch) return {batch:label(5), 0, 0, 0} end\n");
  SyntheticBatch data;
  HookBatch batch = data.batch();
  std::vector<nlohmann::json> labels = {nlohmann::json::parse(R"({"answer": 42, "steps": [1, 2], "ok": true})"),
                                        "7", 2.5};
  batch.label = [&labels](int64_t i) -> const nlohmann::json* {
    return i < static_cast<int64_t>(labels.size()) ? &labels[static_cast<size_t>(i)] : nullptr;
  };
  CHECK(call_reward_hook(*script, "reward", batch) == std::vector<double>{144, 7, 2.5, -1});
  // Without labels every sample's is nil.
  HookBatch unlabeled = data.batch();
  CHECK(call_reward_hook(*script, "reward", unlabeled) == std::vector<double>{-1, -1, -1, -1});

  nlohmann::json deep = 1;
  for (int level = 0; level < meshrun::kMaxLabelDepth + 1; ++level) deep = nlohmann::json::array({deep});
  labels[0] = deep;
  HookError error = hook_failure([&] { call_reward_hook(*script, "deep", batch); });
  CHECK(error.message() == "batch:label(1): the label nests deeper than 64 levels");
  CHECK(error.line() == 12);
  error = hook_failure([&] { call_reward_hook(*script, "outside", batch); });
  CHECK(error.message() == "batch:label(5): sample 5 out of 1..4");
}

TEST_CASE("a hook that runs out of time or instructions is named with the sample it was at") {
  TempDir folder;
  HookOptions options;
  options.instruction_limit = 0;
  options.wall_seconds = 0.2;
  auto script = script_in(folder, "stuck.lua",
                          "function reward(batch)\n"
                          "  for i = 1, batch.size do\n"
                          "    local text = batch:response_text(i)\n"
                          "    while i == 3 do end\n"
                          "  end\n"
                          "end\n"
                          "function rows(batch)\n"
                          "  local row = batch.response_ids[2]\n"
                          "  while true do end\n"
                          "end\n"
                          "function early(batch) while true do end end\n",
                          options);
  SyntheticBatch data;
  HookBatch batch = data.batch();
  HookError error = hook_failure([&] { call_reward_hook(*script, "reward", batch); });
  CHECK(error.message() == "wall-clock limit of 0.2 s exceeded while at sample 3 of 4");
  CHECK(error.hook_point() == "reward");
  CHECK(error.line() == 4);
  error = hook_failure([&] { call_on_rollout_hook(*script, "rows", batch); });
  CHECK(error.message() == "wall-clock limit of 0.2 s exceeded while at sample 2 of 4");
  // Before any sample was read there is none to name.
  error = hook_failure([&] { call_reward_hook(*script, "early", batch); });
  CHECK(error.message() == "wall-clock limit of 0.2 s exceeded");
}

TEST_CASE("a view kept after its hook returned refuses every use") {
  TempDir folder;
  auto script = script_in(folder, "keeps.lua",
                          "function reward(batch)\n"
                          "  kept_batch, kept_matrix = batch, batch.response_ids\n"
                          "  kept_row, kept_vector = batch.response_ids[1], batch.scores\n"
                          "  return {0, 0, 0, 0}\n"
                          "end\n"
                          "function failing_reward(batch)\n"
                          "  later = batch.response_len\n"
                          "  error('stop')\n"
                          "end\n"
                          "local uses = {\n"
                          "  function() return kept_matrix[1] end,\n"
                          "  function() return kept_row[1] end,\n"
                          "  function() return kept_vector[1] end,\n"
                          "  function() return kept_matrix:get(1, 1) end,\n"
                          "  function() return #kept_matrix end,\n"
                          "  function() return kept_batch.size end,\n"
                          "  function() return kept_batch:response_text(1) end,\n"
                          "  function() kept_row[1] = 0 end,\n"
                          "  function() return later[1] end,\n"
                          "}\n"
                          "function on_step(step) uses[step]() end\n"
                          "function describe() return {shown = tostring(kept_matrix) == "
                          "'int64 view response_ids[4][16]'} end\n");
  {
    SyntheticBatch data;  // freed before the views are used again
    call_reward_hook(*script, "reward", data.batch());
    CHECK_THROWS_AS(call_reward_hook(*script, "failing_reward", data.batch()), HookError);
  }
  const char* const messages[] = {
      "response_ids: batch used after its hook returned",
      "response_ids: batch used after its hook returned",
      "scores: batch used after its hook returned",
      "response_ids: batch used after its hook returned",
      "response_ids: batch used after its hook returned",
      "batch.size: batch used after its hook returned",
      "batch.response_text: batch used after its hook returned",
      "response_ids: batch used after its hook returned",
      "response_len: batch used after its hook returned",
  };
  for (int step = 1; step <= 9; ++step) {
    CAPTURE(step);
    const HookError error = hook_failure([&] { call_on_step_hook(*script, "on_step", step, {}); });
    CHECK(error.message() == messages[step - 1]);
    CHECK(error.line() == 10 + step);
  }
  // Describing a view reads no element, so it still works.
  CHECK(call_on_step_hook(*script, "describe", 1, {}) ==
        std::vector<std::pair<std::string, double>>{{"shown", 1}});
}

TEST_CASE("the instruction limit stops a hot loop that reads views") {
  HookOptions options;
  options.instruction_limit = 1'000'000;
  auto script = HookScript::load(batch_fixture("hot_loop.lua"), options);
  SyntheticBatch data;
  const auto start = std::chrono::steady_clock::now();
  const HookError error = hook_failure([&] { call_reward_hook(*script, "reward", data.batch()); });
  CHECK(seconds_since(start) < 2.0);
  // The loop reads row 2 of a matrix view: the sample it was at.
  CHECK(error.message() == "instruction limit of 1000000 exceeded while at sample 2 of 4");
  CHECK(error.hook_point() == "reward");
  CHECK(error.line() >= 4);
  CHECK(error.line() <= 5);
  CHECK(lua_gettop(script->state()) == 0);
}

TEST_CASE("views over zero rows and zero-sample batches work") {
  TempDir folder;
  auto script = script_in(folder, "empty.lua",
                          "function reward(batch)\n"
                          "  assert(#batch.tokens == 0 and batch.tokens.cols == 3)\n"
                          "  assert(#batch.lengths == 0 and #batch.lengths:totable() == 0)\n"
                          "  assert(not pcall(function() return batch.tokens[1] end))\n"
                          "  return {}\n"
                          "end\n");
  HookBatch batch;
  batch.size = 0;
  batch.arrays = {{"tokens", meshrun::HookArrayType::int32, nullptr, {0, 3}, false},
                  {"lengths", meshrun::HookArrayType::int64, nullptr, {0}, false}};
  CHECK(call_reward_hook(*script, "reward", batch).empty());
}

TEST_CASE("a batch and its views are collected once the call is over") {
  // The runtime keys its state by proxy in weak tables; a state that referred
  // back to its proxy would keep both alive for ever (LuaJIT has no
  // ephemerons), and memory would grow with every call.
  auto script = HookScript::load(batch_fixture("reward_hooks.lua"), {});
  lua_State* state = script->state();
  SyntheticBatch data;
  // A full collection after every call keeps the weak tables from filling
  // up with garbage between cycles, so only a leak makes memory grow.
  auto memory_after_calls = [&](int calls) {
    for (int call = 0; call < calls; ++call) {
      call_reward_hook(*script, "from_views", data.batch());
      lua_gc(state, LUA_GCCOLLECT, 0);
    }
    return lua_gc(state, LUA_GCCOUNT, 0);  // KiB
  };
  const int warmed_up = memory_after_calls(50);
  const int later = memory_after_calls(1000);
  CHECK(later <= warmed_up + 8);
}
