// Environments of multi-turn episodes: a Lua script ([env] script) whose
// reset(ctx) starts an episode and whose step(state, reply, ctx) answers
// each model turn with {observation = string or nil, reward = number or
// nil, done = boolean or nil}. The functions are found as hooks are (a
// global, or a field of the table the main chunk returns).
//
// An episode keeps reset's result (any Lua value, nil too) and its ctx in
// the script's registry until the EnvEpisode goes away; step sees both.
// Every call runs protected under the script's limits (instruction count,
// wall clock = env.timeout_s, memory); a Lua error, an exceeded limit or a
// result of the wrong shape (not a table, a reward that is not a finite
// number, done not a boolean, an observation not a string) is thrown as a
// HookError whose hook point is the function's name and whose message
// starts with the episode's sample index. An EnvScript is not thread-safe;
// its episodes must go away before it does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "meshrun/hooks/hooks.hpp"

struct lua_State;

namespace meshrun {

struct HooksConfig;

// What ctx holds for one episode (the caller's memory, read while reset
// builds ctx).
struct EnvContext {
  std::string_view prompt;                    // ctx.prompt: the prompt's text
  const nlohmann::json* messages = nullptr;   // ctx.messages: a chat prompt's messages; null: none
  const nlohmann::json* label = nullptr;      // ctx.label; null: nil
  int64_t index = 1;   // ctx.index: the sample's 1-based index in the step
  int64_t sample = 1;  // ctx.sample: the 1-based k-th sample of its prompt
};

struct EnvStepResult {
  std::optional<std::string> observation;  // none: the episode ends
  double reward = 0;                       // nil counts 0
  bool done = false;                       // nil counts false
};

// An episode's state and ctx, held in the script's registry.
class EnvEpisode {
 public:
  ~EnvEpisode();
  EnvEpisode(const EnvEpisode&) = delete;
  EnvEpisode& operator=(const EnvEpisode&) = delete;
  int64_t index() const { return index_; }

 private:
  friend class EnvScript;
  EnvEpisode(lua_State* state, int64_t index) : state_(state), index_(index) {}
  lua_State* state_;
  int64_t index_;
  int context_ = -2;  // LUA_NOREF
  int state_value_ = -2;
};

class EnvScript {
 public:
  // Loads the script (HookScript::load) and checks it defines reset and
  // step: a HookError at hook point "load" otherwise.
  static std::unique_ptr<EnvScript> load(const std::string& path, const HookOptions& options);

  // reset(ctx).
  std::unique_ptr<EnvEpisode> reset(const EnvContext& context);
  // step(state, reply, ctx).
  EnvStepResult step(EnvEpisode& episode, std::string_view reply);

  const HookScript& script() const { return *script_; }

 private:
  explicit EnvScript(std::unique_ptr<HookScript> script) : script_(std::move(script)) {}
  std::unique_ptr<HookScript> script_;
};

// The limits env calls run under: [hooks]' sandbox, instruction and memory
// limits, with the wall clock of env.timeout_s.
HookOptions env_options_of(const HooksConfig& hooks, double timeout_s);

}  // namespace meshrun
