// lint/'s rows of the rule table (include/meshrun/recipe/rules.hpp): the
// probes of what a recipe names on this machine, run by lint_recipe() in
// table order after recipe/'s pure rules, then the rules the planner and
// the run report on their own course. rule_catalog() joins both tables.
#include <algorithm>

#include "meshrun/lint/lint.hpp"
#include "probes.hpp"

namespace meshrun {

const std::vector<RuleRow>& lint_rules() {
  using enum RuleStage;
  using RulePass::none;
  static const std::vector<RuleRow> rows = {
      // The probes, in the order lint_recipe() runs them.
      {"data.tokenizer",
       "The data's tokenizer is there: data.tokenizer (a path resolved against the recipe's folder, a model in "
       "the local Hugging Face cache, builtin:bytes or a builtin: preset), else the actor's model folder holds "
       "tokenizer.json or tokenizer.model; and it loads (a kind meshrun reads, a chat template that parses).",
       {"data.tokenizer", "roles.actor.model"}, probe, none, lint_detail::check_tokenizer_source},
      {"data.path", "A local dataset file (.jsonl / .json) exists.", {"data.path", "data.eval_path"}, probe,
       none, lint_detail::check_data_paths},
      {"plan.output-folder",
       "The folders the run writes (checkpoints, final model, logs) can be created: the nearest existing folder "
       "on each path is a writable folder, not a file; the final model and the logs are not written into "
       "checkpoint.path or below it (among the sealed checkpoints).",
       {"checkpoint.path", "checkpoint.output", "logging.dir"}, probe, none, lint_detail::check_output_folders},
      // check_hooks also reports roles.reward-required where the script it
      // loads is the only reward source and defines no reward function.
      {"hooks.script", "The hook script exists, compiles and runs its main chunk (LuaJIT).", {"hooks.script"}, probe,
       none, check_hooks},
      {"hooks.function", "Every hook function named explicitly is defined by the script.",
       {"hooks.reward", "hooks.on_rollout", "hooks.on_step", "roles.*.hook"}, probe, none, check_hooks},
      {"env.script",
       "The environment script exists, loads in the hooks' sandbox and defines reset(ctx) and step(state, reply, "
       "ctx).",
       {"env.script"}, probe, none, check_env_script},
      {"data.line",
       "Each line of a local data file is a JSON object with the keys the algorithm reads, of the "
       "right types (lint reads the first 256 MiB).",
       {"data.path", "data.input_key", "data.output_key", "data.messages_key", "data.label_key", "data.chosen_key",
        "data.rejected_key"},
       probe, none, [](const Recipe& recipe, Diagnostics& diagnostics) { check_data_file(recipe, diagnostics); }},

      // The planner's (make_plan), once the rules above pass.
      {"mesh.heads", "tp divides the model's attention heads and key/value heads.",
       {"mesh.tp", "roles.*.mesh.tp", "rollout.tensor_parallel", "roles.*.model"}, plan},
      {"mesh.qk-norm-tp", "A model whose q/k norms span all heads (OLMo 2) runs at tp 1.",
       {"mesh.tp", "roles.*.mesh.tp", "rollout.tensor_parallel", "roles.*.model"}, plan},
      {"mesh.experts", "tp divides the width of a mixture of experts' experts (each expert is split like a dense MLP).",
       {"mesh.tp", "roles.*.mesh.tp", "rollout.tensor_parallel", "roles.*.model"}, plan},
      {"mesh.ep-experts",
       "roles.NAME.mesh.ep > 1 only where the model is a mixture of experts ([mesh] ep leaves dense roles at 1), "
       "and ep divides its number of experts.",
       {"mesh.ep", "roles.*.mesh.ep", "roles.*.model"}, plan},
      {"mesh.ep-dp", "Expert parallelism runs within dp: ep divides the dp of every role it applies to.",
       {"mesh.ep", "roles.*.mesh.ep", "mesh.dp", "roles.*.mesh.dp", "roles.*.model"}, plan},
      {"ppo.routing-replay", "ppo.routing_replay only where the actor's model is a mixture of experts.",
       {"ppo.routing_replay", "roles.*.model"}, plan},
      {"lora.experts",
       "lora_targets names no MLP projection of a mixture of experts with sparse layers: experts take no adapters.",
       {"roles.*.lora_targets", "roles.*.model"}, plan},
      {"checkpoint.value-network",
       "save_value_network has a critic to save and save_hf, whose Hugging Face copy of each checkpoint it adds the "
       "critic to (warning).",
       {"checkpoint.save_value_network", "checkpoint.save_hf", "roles.critic.model"}, plan},
      {"moe.aux-loss", "router_aux_loss_coef is set only on a role whose model is a mixture of experts (warning).",
       {"roles.*.router_aux_loss_coef", "roles.*.model"}, plan},
      {"rollout.max-length", "max_prompt_len + max_new_tokens fits the model's context (warning).",
       {"rollout.max_prompt_len", "rollout.max_new_tokens", "roles.*.model"}, plan},
      {"lora.rank", "lora_rank is at most the smaller side of every targeted projection of the model.",
       {"roles.*.lora_rank", "roles.*.lora_targets", "roles.*.model"}, plan},
      {"plan.model",
       "The model's architecture is known: a local config.json, a built-in preset or a known public name; the "
       "actor's eos_token_id in config.json and generation_config.json is a token id or a list of them.",
       {"roles.*.model"}, plan},
      {"plan.reference",
       "A reference computed on the trained role's processes (DPO's [roles.ref], else the actor's own model) has "
       "the actor's vocabulary.",
       {"roles.*.model"}, plan},
      {"plan.placement", "Every role and engine finds free slots of its shape.",
       {"roles.*.nodes", "roles.*.procs_per_node", "rollout.engines", "rollout.tensor_parallel"}, plan},
      {"plan.memory", "Every process's estimated peak memory fits its device.",
       {"roles.*.zero_stage", "roles.*.offload", "roles.*.dtype", "roles.*.gradient_checkpointing",
        "batch.micro_train", "rollout.memory_utilization", "launch.memory_gb", "colocate.sleep"},
       plan},
      {"rollout.kv-pool",
       "An engine's paged KV cache (rollout.kv_cache_mb) holds at least one whole sequence of max_prompt_len + "
       "max_new_tokens.",
       {"rollout.kv_cache_mb", "rollout.kv_block_size", "rollout.max_prompt_len", "rollout.max_new_tokens"}, plan},
      {"plan.rollout-memory",
       "RL: a step's rollout (rollout × n_samples_per_prompt samples of max_prompt_len + max_new_tokens tokens, "
       "held whole on every process) fits the device and the host's memory.",
       {"batch.rollout", "batch.n_samples_per_prompt", "rollout.max_prompt_len", "rollout.max_new_tokens",
        "launch.memory_gb"},
       plan},

      // The run's, when it meets the data.
      {"batch.rollout-prompts", "The prompt file holds at least batch.rollout prompts (checked at run time).",
       {"batch.rollout", "data.path"}, run},
  };
  return rows;
}

const std::vector<const RuleRow*>& rule_catalog() {
  static const std::vector<const RuleRow*> catalog = [] {
    std::vector<const RuleRow*> rows;
    for (const RuleRow& row : recipe_rules()) rows.push_back(&row);
    for (const RuleRow& row : lint_rules()) rows.push_back(&row);
    return rows;
  }();
  return catalog;
}

const RuleRow* find_rule(std::string_view id) {
  const auto& catalog = rule_catalog();
  const auto found = std::find_if(catalog.begin(), catalog.end(), [&](const RuleRow* row) { return row->id == id; });
  return found == catalog.end() ? nullptr : *found;
}

}  // namespace meshrun
