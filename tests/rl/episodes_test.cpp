// Multi-turn episodes' driver (src/rl/episodes.hpp) over a scripted Lua
// environment, with the engine's turns simulated by fixed replies: the
// observation tokens of every turn, the context the environment sees, the
// limits (max_turns, max_observation_tokens, the episode's room), and with
// chat prompts the chat template's delta: the episode's ids equal a full
// render of the conversation.
#include "tests/dist/torch_doctest.hpp"

#include <cstdlib>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "src/rl/episodes.hpp"
#include "support/temp_dir.hpp"

using namespace meshrun;
using namespace meshrun::ppo_detail;

namespace {

// Echoes what it saw; ends with done when the reply says "stop"; rewards
// each turn with its number; returns the observation "obs<turn>".
constexpr const char* kEpisodeEchoEnv = R"(
local env = {}
function env.reset(ctx)
  return {turn = 0, seen = ctx.prompt .. "|" .. tostring(ctx.label) .. "|" .. ctx.index .. "|" .. ctx.sample ..
                            "|" .. (ctx.messages and #ctx.messages or 0)}
end
function env.step(state, reply, ctx)
  state.turn = state.turn + 1
  if reply:find("stop") then return {reward = 10, done = true} end
  local observation = "obs" .. state.turn
  if reply:find("echo") then observation = state.seen end
  if reply:find("long") then observation = string.rep("x", 50) end
  if reply:find("huge") then observation = string.rep("\195\169", 100000) end
  return {observation = observation, reward = state.turn, done = false}
end
return env
)";

EnvPlan episode_env_plan(int max_turns, int64_t max_observation_tokens = 32) {
  EnvPlan plan;
  plan.enabled = true;
  plan.max_turns = max_turns;
  plan.max_observation_tokens = max_observation_tokens;
  plan.max_episode_tokens = 1000;
  plan.observation_role = "tool";
  plan.timeout_s = 10;
  return plan;
}

std::unique_ptr<EnvScript> load_episode_env(const test::TempDir& dir, const char* text) {
  dir.write("env.lua", text);
  return EnvScript::load(dir / "env.lua", env_options_of(HooksConfig{}, 10));
}

// Runs one episode as the engine would: each reply's ids (with `stop` as
// its last token) appended, then the observation the driver returns.
struct SimulatedEpisode {
  GeneratedSample sample;
  std::vector<TurnEnd> ends;
  void run(Episodes& episodes, const Tokenizer& tokenizer, const std::vector<std::string>& replies,
           std::optional<int32_t> stop, int64_t room = 1000) {
    for (const std::string& reply : replies) {
      const auto turn_begin = static_cast<int64_t>(sample.response.size());
      std::vector<int32_t> ids = tokenizer.encode(reply, false);
      if (stop) ids.push_back(*stop);
      sample.response.insert(sample.response.end(), ids.begin(), ids.end());
      sample.policy_mask.resize(sample.response.size(), 1);
      ends.push_back(episodes.end_turn(0, sample, turn_begin, room));
      if (ends.back().finished) return;
      sample.response.insert(sample.response.end(), ends.back().observation.begin(), ends.back().observation.end());
      sample.policy_mask.resize(sample.response.size(), 0);
      ++sample.turns;
    }
  }
};

std::unique_ptr<Tokenizer> episode_bpe_tokenizer(const test::TempDir& dir, const std::string& kind) {
  const std::string folder = dir / kind;
  const std::string command = "/usr/bin/python3 '" + std::string(MESHRUN_SOURCE_DIR) +
                              "/tests/tokenizer/make_bpe_tokenizer.py' " + kind + " '" + folder + "'";
  const int status = std::system(command.c_str());
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return load_tokenizer(folder);
}

}  // namespace

TEST_CASE("episodes: plain prompts append the observation's own tokens; rewards add up; done ends") {
  test::TempDir dir;
  auto env = load_episode_env(dir, kEpisodeEchoEnv);
  const auto tokenizer = load_tokenizer("builtin:bytes");
  Prompt prompt;
  prompt.text = "guess:";
  prompt.ids = tokenizer->encode(prompt.text, true);
  prompt.label = nlohmann::json("c");
  const EnvPlan plan = episode_env_plan(5);
  Episodes episodes(*env, *tokenizer, plan, {Episodes::Start{&prompt, 7, 3}});
  SimulatedEpisode episode;
  episode.run(episodes, *tokenizer, {"a", "echo", "stop", "never"}, tokenizer->eos_id());
  REQUIRE(episode.ends.size() == 3);
  CHECK(episode.ends[0].observation == tokenizer->encode("obs1", false));
  CHECK(episode.ends[1].observation == tokenizer->encode("guess:|c|7|3|0", false));
  CHECK(episode.ends[2].finished);
  CHECK(episodes.records()[0].env_reward == 1 + 2 + 10);
  CHECK(episodes.records()[0].end == EpisodeEnd::done);
  CHECK(episodes.records()[0].observations == 2);
  CHECK(episodes.env_calls() == 4);  // reset and three steps
  // The episode's text: prompt, each reply, each observation, in order.
  CHECK(tokenizer->decode(episode.sample.response, true) == "aobs1echoguess:|c|7|3|0stop");
}

TEST_CASE("episodes: max_turns, max_observation_tokens and the room left end or cut episodes") {
  test::TempDir dir;
  auto env = load_episode_env(dir, kEpisodeEchoEnv);
  const auto tokenizer = load_tokenizer("builtin:bytes");
  Prompt prompt;
  prompt.text = "p";
  prompt.ids = {1};
  SUBCASE("max_turns: the last turn is still scored, then the episode is truncated") {
    const EnvPlan plan = episode_env_plan(2);
    Episodes episodes(*env, *tokenizer, plan, {Episodes::Start{&prompt, 1, 1}});
    SimulatedEpisode episode;
    episode.run(episodes, *tokenizer, {"a", "b", "c"}, std::nullopt);
    REQUIRE(episode.ends.size() == 2);
    CHECK(episode.ends[1].finished);
    CHECK(episodes.records()[0].end == EpisodeEnd::truncated);
    CHECK(episodes.records()[0].env_reward == 1 + 2);
  }
  SUBCASE("max_observation_tokens cuts an observation, counted") {
    const EnvPlan plan = episode_env_plan(3, 8);
    Episodes episodes(*env, *tokenizer, plan, {Episodes::Start{&prompt, 1, 1}});
    SimulatedEpisode episode;
    episode.run(episodes, *tokenizer, {"long", "a"}, std::nullopt);
    CHECK(episode.ends[0].observation == tokenizer->encode(std::string(8, 'x'), false));
    CHECK(episodes.records()[0].observations_cut == 1);
    CHECK(episodes.records()[0].observations == 2);
  }
  SUBCASE("a huge observation is cut after a bounded look, on a character boundary") {
    const EnvPlan plan = episode_env_plan(3, 7);
    Episodes episodes(*env, *tokenizer, plan, {Episodes::Start{&prompt, 1, 1}});
    SimulatedEpisode episode;
    episode.run(episodes, *tokenizer, {"huge", "a"}, std::nullopt);
    REQUIRE(episode.ends[0].observation.size() == 7);
    CHECK(episode.ends[0].observation[0] == 0xC3);
    CHECK(episode.ends[0].observation[1] == 0xA9);
    CHECK(episodes.records()[0].observations_cut == 1);
  }
  SUBCASE("an observation the episode has no room for ends it") {
    const EnvPlan plan = episode_env_plan(3);
    Episodes episodes(*env, *tokenizer, plan, {Episodes::Start{&prompt, 1, 1}});
    SimulatedEpisode episode;
    episode.run(episodes, *tokenizer, {"a"}, std::nullopt, 4);  // "obs1" needs 4 and one more for the turn
    CHECK(episode.ends[0].finished);
    CHECK(episodes.records()[0].end == EpisodeEnd::truncated);
  }
}

TEST_CASE("episodes: with a chat template the delta rendering equals a full render of the conversation") {
  test::TempDir dir;
  auto env = load_episode_env(dir, kEpisodeEchoEnv);
  for (const std::string kind : {"qwen2", "llama3"}) {
    CAPTURE(kind);
    const auto tokenizer = episode_bpe_tokenizer(dir, kind);
    Prompt prompt;
    prompt.messages = {{"user", "Find the number."}};
    prompt.text = "Find the number.";
    prompt.ids = tokenizer->encode(tokenizer->apply_chat_template(prompt.messages, true), false);
    const EnvPlan plan = episode_env_plan(4);
    Episodes episodes(*env, *tokenizer, plan, {Episodes::Start{&prompt, 1, 1}});
    SimulatedEpisode episode;
    episode.run(episodes, *tokenizer, {"Is it 5?", "Then 7.", "stop"}, tokenizer->eos_id());
    REQUIRE(episode.ends.size() == 3);
    std::vector<ChatMessage> conversation = prompt.messages;
    conversation.push_back({"assistant", "Is it 5?"});
    conversation.push_back({"tool", "obs1"});
    conversation.push_back({"assistant", "Then 7."});
    conversation.push_back({"tool", "obs2"});
    conversation.push_back({"assistant", "stop"});
    // Up to the last reply's end-of-turn token: what the engine holds.
    std::vector<int32_t> ids = prompt.ids;
    ids.insert(ids.end(), episode.sample.response.begin(), episode.sample.response.end());
    const std::vector<int32_t> full = tokenizer->encode(tokenizer->apply_chat_template(conversation, false), false);
    REQUIRE(ids.size() <= full.size());
    CHECK(std::vector<int32_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(ids.size())) == ids);
    // The observation turns render with the observation role.
    CHECK(tokenizer->decode(episode.ends[0].observation, false).find("tool") != std::string::npos);
    // A reply cut before its end-of-turn token gets the template's closing as context.
    Episodes cut(*env, *tokenizer, plan, {Episodes::Start{&prompt, 1, 1}});
    SimulatedEpisode unfinished;
    unfinished.run(cut, *tokenizer, {"Is it"}, std::nullopt);
    std::vector<ChatMessage> partial = prompt.messages;
    partial.push_back({"assistant", "Is it"});
    partial.push_back({"tool", "obs1"});
    std::vector<int32_t> cut_ids = prompt.ids;
    cut_ids.insert(cut_ids.end(), unfinished.sample.response.begin(), unfinished.sample.response.end());
    CHECK(cut_ids == tokenizer->encode(tokenizer->apply_chat_template(partial, true), false));
  }
}

TEST_CASE("episodes: the plain built-in chat format continues the conversation too") {
  test::TempDir dir;
  auto env = load_episode_env(dir, kEpisodeEchoEnv);
  const auto tokenizer = load_tokenizer("builtin:bytes");
  Prompt prompt;
  prompt.messages = {{"system", "Be brief."}, {"user", "Go"}};
  prompt.text = "Go";
  prompt.ids = tokenizer->encode(tokenizer->apply_chat_template(prompt.messages, true), false);
  const EnvPlan plan = episode_env_plan(3);
  Episodes episodes(*env, *tokenizer, plan, {Episodes::Start{&prompt, 2, 2}});
  SimulatedEpisode episode;
  episode.run(episodes, *tokenizer, {"echo", "x"}, tokenizer->eos_id());
  // ctx.messages reached reset: two messages.
  CHECK(tokenizer->decode(episode.ends[0].observation, true).find("Go|nil|2|2|2") != std::string::npos);
  std::vector<ChatMessage> conversation = prompt.messages;
  conversation.push_back({"assistant", "echo"});
  conversation.push_back({"tool", "Go|nil|2|2|2"});
  std::vector<int32_t> ids = prompt.ids;
  const auto first = episode.sample.response.begin();
  const auto upto = first + static_cast<std::ptrdiff_t>(tokenizer->encode("echo", false).size() + 1 +
                                                        episode.ends[0].observation.size());
  ids.insert(ids.end(), first, upto);
  // The format writes no end-of-turn token: the model's eos stays (the
  // engine's ids are never rewritten), the rest is the full render's.
  CHECK(tokenizer->decode(ids, false).find("echo<|eos|>\n<|tool|>\n") != std::string::npos);
  CHECK(tokenizer->decode(ids, true) ==
        tokenizer->decode(tokenizer->encode(tokenizer->apply_chat_template(conversation, true), false), true));
}
