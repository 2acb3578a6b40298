// The example hooks of lua/examples, each run on a synthetic batch from a
// copy in a temporary folder (a sandboxed script's files live in its
// folder), and the quickstart recipe's hook.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "hook_batch_test_support.hpp"
#include "meshrun/hooks/env.hpp"
#include "meshrun/hooks/hook_batch.hpp"
#include <nlohmann/json.hpp>

using meshrun::call_on_step_hook;
using meshrun::call_reward_hook;
using meshrun::HookArrayType;
using meshrun::HookBatch;
using meshrun::HookOptions;
using meshrun::HookScript;
using meshrun::hooks_test::SyntheticBatch;
using meshrun::test::TempDir;
using Metrics = std::vector<std::pair<std::string, double>>;

namespace {

std::unique_ptr<HookScript> load_example(const TempDir& folder, const std::string& name,
                                         bool sandbox = true) {
  const auto copy = folder.path() / name;
  std::filesystem::copy_file(std::string(MESHRUN_SOURCE_DIR) + "/lua/examples/" + name, copy);
  HookOptions options;
  options.sandbox = sandbox;
  return HookScript::load(copy.string(), options);
}

std::vector<std::string> lines_of(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

void check_close(const std::vector<double>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    CAPTURE(i);
    CHECK(actual[i] == doctest::Approx(expected[i]).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("length_penalty: -0.01 per token beyond 256, at most -1") {
  TempDir folder;
  auto script = load_example(folder, "length_penalty.lua");

  SUBCASE("lengths from response_len") {
    std::vector<int32_t> lengths{100, 256, 300, 400};
    HookBatch batch;
    batch.size = 4;
    batch.arrays = {{"response_len", HookArrayType::int32, lengths.data(), {4}, false}};
    check_close(call_reward_hook(*script, "reward", batch), {0, 0, -0.44, -1});
  }
  SUBCASE("lengths from response_mask") {
    constexpr int64_t columns = 300;
    const int64_t lengths[] = {0, 256, 260, 300};
    std::vector<uint8_t> mask;
    for (int64_t length : lengths) {
      for (int64_t j = 0; j < columns; ++j) mask.push_back(j < length ? 1 : 0);
    }
    HookBatch batch;
    batch.size = 4;
    batch.arrays = {{"response_mask", HookArrayType::uint8, mask.data(), {4, columns}, false}};
    check_close(call_reward_hook(*script, "reward", batch), {0, 0, -0.04, -0.44});
  }
}

TEST_CASE("format_reward: 1 for \"Answer: <digits>\", else 0") {
  TempDir folder;
  auto script = load_example(folder, "format_reward.lua");
  SyntheticBatch data;  // "Answer: 42", "Answer: blue", "answer: 4", "Answer: 123\n"
  CHECK(call_reward_hook(*script, "reward", data.batch()) == std::vector<double>{1, 0, 0, 0});
  data.responses = {"Answer: 7", "Answer: 7 ", "The Answer: 7", "Answer: 1234567890"};
  CHECK(call_reward_hook(*script, "reward", data.batch()) == std::vector<double>{1, 0, 0, 1});
}

TEST_CASE("jsonl_logger: one JSON line per step next to the script") {
  for (const bool sandbox : {true, false}) {
    CAPTURE(sandbox);
    TempDir folder;
    auto script = load_example(folder, "jsonl_logger.lua", sandbox);
    CHECK(call_on_step_hook(*script, "on_step", 1, {{"loss", 0.5}, {"lr", 0.001}}) ==
          Metrics{{"logged_lines", 1}});
    CHECK(call_on_step_hook(*script, "on_step", 2, {}) == Metrics{{"logged_lines", 2}});
    CHECK(lines_of(folder.path() / "steps.jsonl") ==
          std::vector<std::string>{R"({"metrics":{"loss":0.5,"lr":0.001},"step":1})",
                                   R"({"metrics":{},"step":2})"});
  }
}

TEST_CASE("the quickstart recipe's reward hook pays for the share of \"a\"") {
  auto script = HookScript::load(
      std::string(MESHRUN_SOURCE_DIR) + "/recipes/hooks/quickstart_reward.lua", {});
  SyntheticBatch data;
  data.responses = {"aaaa", "abab", "", "bbb"};
  CHECK(call_reward_hook(*script, "reward", data.batch()) == std::vector<double>{1, 0.5, 0, 0});
}

// Labels as the PPO trainer passes them: each sample's JSON value, none for
// a sample without one.
std::function<const nlohmann::json*(int64_t)> labels_of(const std::vector<nlohmann::json>& labels) {
  return [&labels](int64_t i) -> const nlohmann::json* {
    const auto& label = labels.at(static_cast<std::size_t>(i));
    return label.is_null() ? nullptr : &label;
  };
}

TEST_CASE("math_answer_reward: 1 when the response's last number equals the label") {
  TempDir folder;
  auto script = load_example(folder, "math_answer_reward.lua");
  SyntheticBatch data;
  data.responses = {"6 x 7: so 41, no, 42", "Answer: 3.50", "about 1,000", "Answer: 4"};
  const std::vector<nlohmann::json> labels = {42, "3.5", 1000, nullptr};
  HookBatch batch = data.batch();
  batch.label = labels_of(labels);
  check_close(call_reward_hook(*script, "reward", batch), {1, 1, 1, 0});
  data.responses = {"42 is not it: 43", "Answer: 3.5", "no number", "4"};
  batch = data.batch();
  batch.label = labels_of(labels);
  check_close(call_reward_hook(*script, "reward", batch), {0, 1, 0, 0});
}

TEST_CASE("the grpo-tiny recipe's reward hook pays for the share of the labelled letter") {
  auto script = HookScript::load(std::string(MESHRUN_SOURCE_DIR) + "/recipes/hooks/grpo_tiny_reward.lua", {});
  SyntheticBatch data;
  data.responses = {"aaaa", "eaea", "", "iiio"};
  const std::vector<nlohmann::json> labels = {"a", "e", "i", "o"};
  HookBatch batch = data.batch();
  batch.label = labels_of(labels);
  check_close(call_reward_hook(*script, "reward", batch), {1, 0.5, 0, 0.25});
}

TEST_CASE("calculator_env: a tool call is evaluated into the observation; the final answer is rewarded") {
  TempDir folder;
  const auto copy = folder.path() / "calculator_env.lua";
  std::filesystem::copy_file(std::string(MESHRUN_SOURCE_DIR) + "/lua/examples/calculator_env.lua", copy);
  auto env = meshrun::EnvScript::load(copy.string(), HookOptions{});
  const nlohmann::json label = 42;
  auto episode = env->reset(meshrun::EnvContext{"What is 6 * (3 + 4)?", nullptr, &label, 1, 1});
  meshrun::EnvStepResult call = env->step(
      *episode, R"js(Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "6 * (3 + 4)"}}</tool_call>)js");
  CHECK(call.observation == std::optional<std::string>(R"({"result":42})"));
  CHECK(call.reward == doctest::Approx(-0.05));
  CHECK_FALSE(call.done);
  const auto error_of = [&](const std::string& reply) { return env->step(*episode, reply).observation.value_or(""); };
  CHECK(error_of("<tool_call>not json</tool_call>") == "error: the tool call is not a JSON object");
  CHECK(error_of(R"(<tool_call>{"name": "search"}</tool_call>)") == "error: unknown tool search; the tool is calculator");
  CHECK(error_of(R"(<tool_call>{"name": "calculator", "arguments": {"expression": "1 / 0"}}</tool_call>)") ==
        "error: division by zero");
  CHECK(error_of(R"js(<tool_call>{"name": "calculator", "arguments": {"expression": "os.exit()"}}</tool_call>)js")
            .starts_with("error: a number was expected"));
  const meshrun::EnvStepResult answer = env->step(*episode, "The answer is 42.");
  CHECK(answer.done);
  CHECK(answer.reward == 1);
  CHECK_FALSE(answer.observation);
  CHECK(env->step(*episode, "It is 41").reward == 0);
}

TEST_CASE("the agent-tiny recipe's environment answers higher or lower and pays for finding the letter") {
  auto env = meshrun::EnvScript::load(std::string(MESHRUN_SOURCE_DIR) + "/recipes/hooks/agent_tiny_env.lua", {});
  const nlohmann::json label = "f";
  auto episode = env->reset(meshrun::EnvContext{"xy guess:", nullptr, &label, 1, 1});
  meshrun::EnvStepResult first = env->step(*episode, "zzd");
  CHECK(first.observation == std::optional<std::string>(" higher, one of efgh:"));
  CHECK(first.reward == 0);
  meshrun::EnvStepResult second = env->step(*episode, "h");
  CHECK(second.observation == std::optional<std::string>(" lower, one of efg:"));
  CHECK(second.reward == doctest::Approx(0.1));  // kept to the hint
  meshrun::EnvStepResult none = env->step(*episode, "xyz");
  CHECK(none.observation == std::optional<std::string>(" one of efg:"));
  meshrun::EnvStepResult found = env->step(*episode, "f");
  CHECK(found.done);
  CHECK(found.reward == doctest::Approx(0.25));  // the fourth turn
}
