// The catalogue of every rule id that a diagnostic can name, with the keys it
// reads. docs/recipes.md lists them; a test checks that every rule reported
// anywhere is catalogued here.
#include "meshrun/recipe/schema.hpp"
#include "schema_internal.hpp"

namespace meshrun::schema_detail {

void register_rules(Schema& s) {
  auto rule = [&](std::string id, std::string summary, std::vector<std::string> keys) {
    s.rules.push_back({std::move(id), std::move(summary), std::move(keys)});
  };
  // Schema rules: checked by the loader for every key.
  rule("schema.syntax", "The file is valid TOML, its keys nesting at most 32 levels deep.", {});
  rule("schema.unknown-key", "Every key and table is one the schema knows (with a suggestion).", {});
  rule("schema.type", "Every value has the key's type.", {});
  rule("schema.range", "Numbers lie in the key's range.", {});
  rule("schema.choice", "Strings are one of the key's values (with a suggestion).", {});
  rule("schema.reserved",
       "Chat template variables do not set the names the renderer sets itself (messages, add_generation_prompt, "
       "bos_token, eos_token).",
       {"data.chat_template_kwargs"});
  rule("schema.required", "Required keys are present.", {"algorithm"});
  rule("schema.file", "The recipe file exists and can be read.", {});
  rule("schema.include", "Included files exist, parse, include no cycle, and number at most 64 reads in all.", {"include"});
  rule("schema.override", "A --set override has the form section.key=value.", {});

  rule("launch.backend-device", "device \"cpu\" needs backend \"gloo\" or \"auto\".",
       {"launch.device", "launch.backend"});
  rule("launch.local-nodes", "The local launcher runs on one node: launch.type \"local\" needs nodes = 1.",
       {"launch.type", "launch.nodes"});

  rule("mesh.product", "tp × sp × dp equals the role's process count.",
       {"mesh.tp", "mesh.sp", "mesh.dp", "roles.*.mesh.tp", "roles.*.mesh.sp", "roles.*.mesh.dp",
        "roles.*.nodes", "roles.*.procs_per_node"});
  rule("mesh.infer", "With dp = -1, tp × sp divides the role's process count.",
       {"mesh.tp", "mesh.sp", "mesh.dp", "roles.*.mesh.tp", "roles.*.mesh.sp", "roles.*.mesh.dp"});
  rule("mesh.tp-node", "A tensor-parallel group stays on one node: tp ≤ the role's procs_per_node.",
       {"mesh.tp", "roles.*.mesh.tp", "roles.*.procs_per_node"});
  rule("mesh.sp-unsupported", "sp > 1 only where the algorithm supports sequence parallelism (its row in the algorithm table says so).",
       {"mesh.sp", "roles.*.mesh.sp", "algorithm"});
  rule("mesh.sp-sequence",
       "Sequence parallelism cuts each sequence into 2 × sp chunks: the longest sequence holds at least that many "
       "tokens.",
       {"mesh.sp", "roles.*.mesh.sp", "data.max_len", "rollout.max_prompt_len", "rollout.max_new_tokens"});
  rule("mesh.heads", "tp divides the model's attention heads and key/value heads.",
       {"mesh.tp", "roles.*.mesh.tp", "rollout.tensor_parallel", "roles.*.model"});

  rule("batch.train-divisible",
       "train is a multiple of micro_train × dp of every trained role (gradient accumulation ≥ 1).",
       {"batch.train", "batch.micro_train", "mesh.dp", "roles.*.mesh.dp"});
  rule("batch.rollout-divisible",
       "rollout × n_samples_per_prompt is divisible by micro_rollout and by the actor's dp.",
       {"batch.rollout", "batch.n_samples_per_prompt", "batch.micro_rollout"});
  rule("batch.train-samples",
       "RL: train is at most rollout × n_samples_per_prompt (error), and divides it, or the rest of each pass goes "
       "untrained (warning).",
       {"batch.train", "batch.rollout", "batch.n_samples_per_prompt"});
  rule("batch.group-samples", "Advantage estimators that compare a prompt's samples need n_samples_per_prompt > 1.",
       {"ppo.advantage", "batch.n_samples_per_prompt"});

  rule("roles.actor-required", "Every algorithm trains an actor.", {"roles.*"});
  rule("roles.critic-required", "An advantage estimator that needs a critic (gae) has [roles.critic].",
       {"ppo.advantage", "roles.*"});
  rule("roles.critic-unused", "A critic is only used by an advantage estimator that needs one (warning).",
       {"ppo.advantage", "roles.*"});
  rule("roles.reward-required", "PPO needs a reward model, a reward hook, or both.",
       {"roles.*.model", "roles.*.hook", "hooks.reward"});
  rule("roles.model-required", "Every role names a model (the reward role may name a hook instead, not both).",
       {"roles.*.model", "roles.*.hook"});
  rule("roles.hook-reward-only", "Only the reward role can be a hook.", {"roles.*.hook"});
  rule("roles.unused", "Roles other than the actor are unused by SFT (warning).", {"algorithm", "roles.*"});
  rule("roles.placement", "A role's nodes and procs_per_node fit the cluster's.",
       {"roles.*.nodes", "roles.*.procs_per_node", "launch.nodes", "launch.procs_per_node"});
  rule("roles.fit",
       "The processes of all non-colocated roles plus rollout engines × tensor_parallel fit in "
       "nodes × procs_per_node.",
       {"roles.*.nodes", "roles.*.procs_per_node", "rollout.engines", "rollout.tensor_parallel",
        "launch.nodes", "launch.procs_per_node"});

  rule("rollout.tp-node", "An engine stays on one node: tensor_parallel ≤ procs_per_node.",
       {"rollout.tensor_parallel", "launch.procs_per_node"});
  rule("rollout.max-length", "max_prompt_len + max_new_tokens fits the model's context (warning).",
       {"rollout.max_prompt_len", "rollout.max_new_tokens", "roles.*.model"});

  rule("colocate.unknown-role", "Colocation groups name roles of the recipe (or \"rollout\").", {"colocate.groups"});
  rule("colocate.duplicate", "A role is in at most one colocation group.", {"colocate.groups"});
  rule("colocate.conflict", "Use colocate.all or colocate.groups, not both.", {"colocate.all", "colocate.groups"});
  rule("colocate.equal-placement", "Colocated roles have the same nodes and procs_per_node.",
       {"colocate.groups", "colocate.all", "roles.*.nodes", "roles.*.procs_per_node"});
  rule("colocate.engines",
       "Engines colocated with roles (colocate.all, or \"rollout\" in a group) have exactly the "
       "group's processes: engines × tensor_parallel.",
       {"colocate.all", "colocate.groups", "rollout.engines", "rollout.tensor_parallel"});

  rule("ppo.clip-high", "eps_clip_high ≥ eps_clip.", {"ppo.eps_clip_high", "ppo.eps_clip"});
  rule("ppo.dual-clip", "dual_clip is 0 (off) or > 1.", {"ppo.dual_clip"});
  rule("dpo.label-smoothing", "label_smoothing (cDPO) only with the sigmoid loss.",
       {"dpo.label_smoothing", "dpo.loss"});
  rule("dpo.pair-keys", "A preference pair's chosen and rejected responses have different keys.",
       {"data.chosen_key", "data.rejected_key"});
  rule("dpo.packing", "Preference pairs are not packed.", {"data.packing", "algorithm"});
  rule("ppo.kl-needs-ref", "kl_mode \"loss\" needs a [roles.ref] model.", {"ppo.kl_mode", "roles.*"});
  rule("ppo.dynamic-sampling-groups", "dynamic_sampling needs n_samples_per_prompt ≥ 2.",
       {"ppo.dynamic_sampling", "batch.n_samples_per_prompt"});
  rule("ppo.overlong-buffer", "overlong_buffer < rollout.max_new_tokens.",
       {"ppo.overlong_buffer", "rollout.max_new_tokens"});
  rule("data.line", "Each line of a local data file is a JSON object with the keys the algorithm reads, of the "
       "right types (lint reads the first 256 MiB).",
       {"data.path", "data.input_key", "data.output_key", "data.messages_key", "data.label_key", "data.chosen_key",
        "data.rejected_key"});
  rule("batch.rollout-prompts", "The prompt file holds at least batch.rollout prompts (checked at run time).",
       {"batch.rollout", "data.path"});
  rule("data.label-unused", "data.label_key is only read by reinforcement algorithms (warning).",
       {"data.label_key", "algorithm"});
  rule("data.loss-turns-unused", "data.loss_turns applies to SFT's chat samples only (warning).",
       {"data.loss_turns", "algorithm"});
  rule("data.required", "SFT and PPO read a dataset: data.path is set.", {"data.path"});
  rule("data.path", "A local dataset file (.jsonl / .json) exists.", {"data.path", "data.eval_path"});
  rule("data.tokenizer",
       "The data's tokenizer is there: data.tokenizer (a path resolved against the recipe's folder, a model in "
       "the local Hugging Face cache, builtin:bytes or a builtin: preset), else the actor's model folder holds "
       "tokenizer.json or tokenizer.model.",
       {"data.tokenizer", "roles.actor.model"});
  rule("plan.output-folder",
       "The folders the run writes (checkpoints, final model, logs) can be created: the nearest existing folder "
       "on each path is a writable folder, not a file.",
       {"checkpoint.path", "checkpoint.output", "logging.dir"});
  rule("data.eval-unsupported", "data.eval_path only where the algorithm evaluates (sft, dpo, rm).",
       {"data.eval_path", "algorithm"});

  rule("lora.unsupported",
       "LoRA adapters only on the actor of an algorithm that trains them (sft, dpo, ppo), of a model whose "
       "projections are unfused (not Phi-3's qkv_proj / gate_up_proj).",
       {"roles.*.lora_rank", "algorithm", "roles.*.model"});
  rule("lora.target", "lora_targets names each adapted projection once, each a projection of the decoder layer.",
       {"roles.*.lora_targets", "roles.*.lora_rank"});
  rule("lora.rank", "lora_rank is at most the smaller side of every targeted projection of the model.",
       {"roles.*.lora_rank", "roles.*.lora_targets", "roles.*.model"});

  rule("hooks.script", "The hook script exists, compiles and runs its main chunk (LuaJIT).", {"hooks.script"});
  rule("hooks.function", "Every hook function named explicitly is defined by the script.",
       {"hooks.reward", "hooks.on_rollout", "hooks.on_step", "roles.*.hook"});
  rule("hooks.needs-script", "Naming a hook function needs hooks.script.",
       {"hooks.script", "roles.*.hook", "hooks.reward", "hooks.on_rollout", "hooks.on_step"});

  rule("plan.model",
       "The model's architecture is known: a local config.json, a built-in preset or a known public name; the "
       "actor's eos_token_id in config.json and generation_config.json is a token id or a list of them.",
       {"roles.*.model"});
  rule("plan.reference",
       "A reference computed on the trained role's processes (DPO's [roles.ref], else the actor's own model) has "
       "the actor's vocabulary.",
       {"roles.*.model"});
  rule("plan.placement", "Every role and engine finds free slots of its shape.",
       {"roles.*.nodes", "roles.*.procs_per_node", "rollout.engines", "rollout.tensor_parallel"});
  rule("plan.memory", "Every process's estimated peak memory fits its device.",
       {"roles.*.zero_stage", "roles.*.offload", "roles.*.dtype", "roles.*.gradient_checkpointing",
        "batch.micro_train", "rollout.memory_utilization", "launch.memory_gb", "colocate.sleep"});
  rule("plan.rollout-memory",
       "RL: a step's rollout (rollout × n_samples_per_prompt samples of max_prompt_len + max_new_tokens tokens, "
       "held whole on every process) fits the device and the host's memory.",
       {"batch.rollout", "batch.n_samples_per_prompt", "rollout.max_prompt_len", "rollout.max_new_tokens",
        "launch.memory_gb"});
}

}  // namespace meshrun::schema_detail
