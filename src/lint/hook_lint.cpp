// Lint of the [hooks] section: load the script the way every rank will (same
// sandbox, same limits) and check that each function the recipe names exists.
#include <filesystem>

#include "meshrun/hooks/env.hpp"
#include "meshrun/hooks/hooks.hpp"
#include "meshrun/lint/lint.hpp"

namespace meshrun {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

}  // namespace

void check_hooks(const Recipe& recipe, Diagnostics& diagnostics) {
  const HooksConfig& hooks = recipe.hooks;
  if (hooks.script.empty()) return;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(hooks.script, ec)) {
    diagnostics.error(recipe.where("hooks.script"), "hooks.script",
                      "hook script \"" + hooks.script + "\" does not exist");
    return;
  }
  std::unique_ptr<HookScript> script;
  try {
    script = HookScript::load(hooks.script, hook_options_of(hooks));
  } catch (const HookError& error) {
    SourceLocation where = error.line() > 0 ? SourceLocation{error.script(), error.line(), 0}
                                            : recipe.where("hooks.script");
    diagnostics.error(where, "hooks.script", "hook script fails to load: " + error.message(),
                      "the script is named at " + recipe.where("hooks.script").str());
    return;
  }
  const std::vector<std::string> defined = script->function_names();
  auto require = [&](const std::string& key, const std::string& function, const std::string& hook_point) {
    if (script->has_function(function)) return;
    diagnostics.error(recipe.where(key), "hooks.function",
                      "hook function \"" + function + "\" for " + hook_point + " is not defined by " +
                          hooks.script + " (it defines: " + join(defined) + ")");
  };
  // A renamed hook must exist; the default names are optional (a resolved
  // recipe writes them out even when the script has no such function).
  const HooksConfig defaults;
  if (hooks.reward != defaults.reward) require("hooks.reward", hooks.reward, "reward");
  if (hooks.on_rollout != defaults.on_rollout) require("hooks.on_rollout", hooks.on_rollout, "on_rollout");
  if (hooks.on_step != defaults.on_step) require("hooks.on_step", hooks.on_step, "on_step");
  const RoleConfig* reward = recipe.role(Role::reward);
  if (reward && !reward->hook.empty()) require("roles.reward.hook", reward->hook, "the reward role");
  bool reward_model = reward && (!reward->model.empty() || !reward->hook.empty());
  const bool env_rewards = !recipe.env.script.empty() && row_of(recipe.algorithm).rollout_engines;
  if (row_of(recipe.algorithm).needs_reward && !reward_model && !env_rewards && !script->has_function(hooks.reward)) {
    diagnostics.error(recipe.where("hooks.script"), "roles.reward-required",
                      "algorithm \"" + name_of(recipe.algorithm) + "\" needs a reward: there is no reward model, and " + hooks.script +
                          " defines no function \"" + hooks.reward + "\" (it defines: " + join(defined) + ")",
                      "define reward(batch) in the script, or add [roles.reward] with a model");
  }
}

void check_env_script(const Recipe& recipe, Diagnostics& diagnostics) {
  const EnvConfig& env = recipe.env;
  if (env.script.empty() || !row_of(recipe.algorithm).rollout_engines) return;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(env.script, ec)) {
    diagnostics.error(recipe.where("env.script"), "env.script", "environment script \"" + env.script + "\" does not exist");
    return;
  }
  try {
    EnvScript::load(env.script, env_options_of(recipe.hooks, env.timeout_s));
  } catch (const HookError& error) {
    const SourceLocation where =
        error.line() > 0 ? SourceLocation{error.script(), error.line(), 0} : recipe.where("env.script");
    diagnostics.error(where, "env.script", "environment script fails to load: " + error.message(),
                      "the script is named at " + recipe.where("env.script").str());
  }
}

}  // namespace meshrun
