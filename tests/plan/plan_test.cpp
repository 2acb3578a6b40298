// make_plan() as a whole: roles taking part, architecture diagnostics,
// heads vs tp, the rollout length warning, determinism and speed.
#include <doctest/doctest.h>

#include <chrono>
#include <limits>

#include <nlohmann/json.hpp>

#include "plan_fixtures.hpp"

using namespace meshrun;
using namespace plan_test;

TEST_CASE("an unknown model or a directory without config.json is plan.model at the role's model key") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "checkpoint");
  Recipe recipe = small_ppo_recipe(4, 2, 1);
  role_of(recipe, "critic").model = "org/no-such-model";
  role_of(recipe, "ref").model = (dir.path() / "checkpoint").string();
  recipe.rollout.engines = 0;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  REQUIRE(diagnostics.error_count() == 2);
  const Diagnostic& critic = diagnostics.items()[0];
  CHECK(critic.rule == "plan.model");
  CHECK(critic.where == recipe.where("roles.critic.model"));
  CHECK(critic.message.find("unknown model \"org/no-such-model\"") != std::string::npos);
  CHECK(critic.message.find("Qwen2.5-72B") != std::string::npos);  // lists the known names
  const Diagnostic& ref = diagnostics.items()[1];
  CHECK(ref.where == recipe.where("roles.ref.model"));
  CHECK(ref.message.find("no readable config.json") != std::string::npos);

  // The rest of the plan is still made.
  CHECK(plan.role(Role::critic)->ranks == std::vector<int>{2, 3});
  CHECK(plan.role(Role::critic)->architecture.name.empty());
  CHECK(verdict_of(plan, "critic") == nullptr);
  CHECK(verdict_of(plan, "actor") != nullptr);
}

TEST_CASE("a malformed eos_token_id in the actor's generation_config.json is plan.model at lint time") {
  const auto model_errors = [](const Diagnostics& diagnostics) {
    std::vector<Diagnostic> found;
    for (const Diagnostic& d : diagnostics.items())
      if (d.rule == "plan.model") found.push_back(d);
    return found;
  };
  TempDir dir;
  Recipe recipe = sft_recipe("Qwen/Qwen2.5-7B-Instruct", 8);
  Diagnostics uncached;
  make_plan(recipe, ClusterShape::from_recipe(recipe), uncached);
  CHECK(model_errors(uncached).empty());  // a public name planned from the table: no files to check

  dir.write("model/config.json", R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300, "eos_token_id": 257})");
  dir.write("model/generation_config.json", R"({"eos_token_id": "<|im_end|>"})");
  role_of(recipe, "actor").model = (dir.path() / "model").string();
  Diagnostics diagnostics;
  make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const auto errors = model_errors(diagnostics);
  REQUIRE(errors.size() == 1);
  const Diagnostic& bad = errors[0];
  CHECK(bad.where == recipe.where("roles.actor.model"));
  CHECK(bad.message.find("generation_config.json: eos_token_id \"<|im_end|>\" is not a token id") != std::string::npos);

  dir.write("model/generation_config.json", R"({"eos_token_id": [257, 10], "temperature": 0.7})");
  Diagnostics fine;
  make_plan(recipe, ClusterShape::from_recipe(recipe), fine);
  CHECK(model_errors(fine).empty());
}

TEST_CASE("the plan says which architecture it used") {
  Recipe recipe = sft_recipe("Qwen/Qwen2.5-7B-Instruct", 8);
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const RolePlan& actor = *plan.role(Role::actor);
  CHECK(actor.model == "Qwen/Qwen2.5-7B-Instruct");
  CHECK(actor.architecture.name == "Qwen2.5-7B");
  CHECK(actor.architecture.source == "built-in table; not in the local Hugging Face cache");
  CHECK(actor.parameter_count == 7'615'616'512);
  CHECK(actor.trained);
  CHECK(actor.sequence_length == 2048);  // data.max_len for SFT
  CHECK(plan.role(Role::critic) == nullptr);
}

TEST_CASE("OLMo 2 (q/k norms over all heads) plans at tp 1 and is refused at tp 2, for roles and engines") {
  Diagnostics diagnostics;
  Recipe recipe = sft_recipe("allenai/OLMo-2-1124-7B", 8);
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  CHECK(plan.role(Role::actor)->architecture.name == "OLMo-2-1124-7B");
  CHECK(plan.role(Role::actor)->architecture.qk_norm_full_width);
  // The published count: norms as wide as q and k, two per layer after.
  CHECK(plan.role(Role::actor)->parameter_count == 7'298'617'344);
  CHECK_FALSE(has_rule(diagnostics, "mesh.qk-norm-tp"));
  recipe.roles[0].mesh.tp = 2;
  make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const Diagnostic* d = find_rule(diagnostics, "mesh.qk-norm-tp");
  REQUIRE(d);
  CHECK(d->where == recipe.where("mesh.tp"));
  CHECK(d->message.find("olmo2") != std::string::npos);
  Diagnostics engines;
  Recipe ppo = ppo_recipe("allenai/OLMo-2-1124-7B", 4, 8, 1);
  ppo.colocate.groups = {{Role::actor, Role::rollout}};
  ppo.rollout.engines = 2;
  ppo.rollout.tensor_parallel = 2;
  make_plan(ppo, ClusterShape::from_recipe(ppo), engines);
  const Diagnostic* e = find_rule(engines, "mesh.qk-norm-tp");
  REQUIRE(e);
  CHECK(e->where == ppo.where("rollout.tensor_parallel"));
}

TEST_CASE("Gemma 2's shape in the planner's table: sandwich norms, 256-wide heads, tied") {
  Diagnostics diagnostics;
  Recipe recipe = sft_recipe("google/gemma-2-9b", 8);
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const Architecture& a = plan.role(Role::actor)->architecture;
  CHECK(a.family == ModelFamily::gemma2);
  CHECK(plan.role(Role::actor)->parameter_count == 9'241'705'984);  // the published count
  CHECK(a.head_dim() == 256);
  CHECK(a.mixed_windows());
  CHECK(a.windowed(0));
  CHECK_FALSE(a.windowed(1));
  CHECK(a.final_softcap == 30.0);
}

TEST_CASE("Gemma 3's shape in the planner's table: 5 local layers to 1 global, q/k norms") {
  Diagnostics diagnostics;
  Recipe recipe = sft_recipe("google/gemma-3-12b-pt", 8);
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const Architecture& a = plan.role(Role::actor)->architecture;
  CHECK(a.family == ModelFamily::gemma3_text);
  CHECK(a.windowed(4));
  CHECK_FALSE(a.windowed(5));
  CHECK(a.window_rope_theta == 10000);
  CHECK(a.attn_softcap == 0);
  CHECK(plan.role(Role::actor)->parameter_count / 10'000'000 == 1176);  // 11.77B, the text model of Gemma 3 12B
}

TEST_CASE("Mixtures of experts: the plan shows the experts; lint checks tp over their width, LoRA on them, the aux loss") {
  Diagnostics diagnostics;
  Recipe recipe = sft_recipe("Qwen/Qwen3-30B-A3B", 8);
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const RolePlan& actor = *plan.role(Role::actor);
  CHECK(actor.architecture.family == ModelFamily::qwen3_moe);
  CHECK(actor.parameter_count == 30'532'122'624);
  CHECK(actor.router_aux_loss_coef == 0.001);  // the model's
  CHECK_FALSE(has_rule(diagnostics, "mesh.experts"));
  CHECK(format_plan_text(plan).find("8 of 128 per token on 48 of 48 layers") != std::string::npos);

  // The recipe's coefficient wins; on a dense model it is a warning.
  recipe.roles[0].router_aux_loss_coef = 0.05;
  recipe.locations["roles.actor.router_aux_loss_coef"] = {recipe.file, 40, 1};
  CHECK(make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics).role(Role::actor)->router_aux_loss_coef == 0.05);
  CHECK_FALSE(has_rule(diagnostics, "moe.aux-loss"));
  Recipe dense = sft_recipe("Qwen/Qwen2.5-7B-Instruct", 8);
  dense.roles[0].router_aux_loss_coef = 0.05;
  dense.locations["roles.actor.router_aux_loss_coef"] = {dense.file, 40, 1};
  Diagnostics dense_diagnostics;
  CHECK(make_plan(dense, ClusterShape::from_recipe(dense), dense_diagnostics).role(Role::actor)->router_aux_loss_coef == 0);
  const Diagnostic* warning = find_rule(dense_diagnostics, "moe.aux-loss");
  REQUIRE(warning);
  CHECK(warning->severity == Severity::warning);
  CHECK(warning->where == dense.where("roles.actor.router_aux_loss_coef"));
  // save_value_network without a critic, or without save_hf, saves nothing: a warning at the key.
  Recipe no_critic = sft_recipe("Qwen/Qwen2.5-7B-Instruct", 8);
  no_critic.checkpoint.save_value_network = true;
  no_critic.locations["checkpoint.save_value_network"] = {no_critic.file, 30, 1};
  Diagnostics value_network;
  make_plan(no_critic, ClusterShape::from_recipe(no_critic), value_network);
  const Diagnostic* nothing_saved = find_rule(value_network, "checkpoint.value-network");
  REQUIRE(nothing_saved);
  CHECK(nothing_saved->severity == Severity::warning);
  CHECK(nothing_saved->message.find("no critic") != std::string::npos);
  // -1 written out (a run's resolved.toml) is "the model's own": no warning.
  dense.roles[0].router_aux_loss_coef = -1;
  Diagnostics resolved_diagnostics;
  make_plan(dense, ClusterShape::from_recipe(dense), resolved_diagnostics);
  CHECK_FALSE(has_rule(resolved_diagnostics, "moe.aux-loss"));

  // OLMoE's experts are 1024 wide: tp 8 splits them, tp 16 would not (nor its heads).
  Recipe olmoe = sft_recipe("allenai/OLMoE-1B-7B-0924", 16);
  olmoe.roles[0].mesh.tp = 8;
  Diagnostics split;
  make_plan(olmoe, ClusterShape::from_recipe(olmoe), split);
  CHECK_FALSE(has_rule(split, "mesh.experts"));
  // Experts 6 wide at tp 4 (which divides the heads): refused at the tp key.
  TempDir dir;
  dir.write("moe/config.json", R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128, "moe_intermediate_size": 6,
    "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 256})");
  Recipe narrow = sft_recipe((dir.path() / "moe").string(), 4);
  narrow.roles[0].mesh.tp = 4;
  Diagnostics narrow_diagnostics;
  make_plan(narrow, ClusterShape::from_recipe(narrow), narrow_diagnostics);
  const Diagnostic* width = find_rule(narrow_diagnostics, "mesh.experts");
  REQUIRE(width);
  CHECK(width->where == narrow.where("mesh.tp"));
  CHECK(width->message.find("width 6") != std::string::npos);
  CHECK(width->message.find("moe_intermediate_size") != std::string::npos);

  // LoRA named onto expert projections is refused; by default the experts are left out.
  Recipe lora = sft_recipe("Qwen/Qwen3-30B-A3B", 8);
  lora.roles[0].lora_rank = 8;
  Diagnostics by_default;
  make_plan(lora, ClusterShape::from_recipe(lora), by_default);
  CHECK_FALSE(has_rule(by_default, "lora.experts"));
  lora.roles[0].lora_targets = {"q_proj", "down_proj"};
  lora.locations["roles.actor.lora_targets"] = {lora.file, 41, 1};
  Diagnostics named;
  make_plan(lora, ClusterShape::from_recipe(lora), named);
  const Diagnostic* refused = find_rule(named, "lora.experts");
  REQUIRE(refused);
  CHECK(refused->where == lora.where("roles.actor.lora_targets"));
  CHECK(refused->message.find("down_proj") != std::string::npos);
}

TEST_CASE("Expert parallelism: ep groups inside dp, the expert shard in memory, dense roles left at ep 1, bad ep refused") {
  Recipe recipe = sft_recipe("Qwen/Qwen3-30B-A3B", 8);
  recipe.roles[0].zero_stage = 0;
  Diagnostics plain;
  const Plan without = make_plan(recipe, ClusterShape::from_recipe(recipe), plain);
  recipe.mesh.ep = recipe.roles[0].mesh.ep = 4;
  recipe.locations["mesh.ep"] = {recipe.file, 30, 1};
  Diagnostics diagnostics;
  const Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  CHECK_FALSE(has_rule(diagnostics, "mesh.ep-dp"));
  CHECK_FALSE(has_rule(diagnostics, "mesh.ep-experts"));
  const MeshPlan& mesh = plan.role(Role::actor)->mesh;
  CHECK(mesh.ep == 4);
  // Runs of 4 neighbouring dp ranks; each expert set replicated on 2 ranks.
  CHECK(mesh.ep_groups == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(mesh.expert_replica_groups == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // 128 experts × 3 × 2048 × 768 in each of 48 layers: a quarter held per rank.
  const int64_t experts = int64_t{48} * 128 * 3 * 2048 * 768;
  const int64_t saved = without.role(Role::actor)->memory.parameters - plan.role(Role::actor)->memory.parameters;
  CHECK(saved == experts * 2 * 3 / 4);  // bf16
  CHECK(plan.role(Role::actor)->memory.activations > without.role(Role::actor)->memory.activations);  // all-to-all buffers
  CHECK(format_plan_text(plan).find("ep=4") != std::string::npos);
  CHECK(format_plan_text(plan).find("ep groups:") != std::string::npos);

  // 128 experts over ep 3, at dp 6: refused at the key.
  Recipe three = sft_recipe("Qwen/Qwen3-30B-A3B", 6);
  three.mesh.ep = three.roles[0].mesh.ep = 3;
  three.locations["mesh.ep"] = {three.file, 30, 1};
  Diagnostics uneven;
  make_plan(three, ClusterShape::from_recipe(three), uneven);
  const Diagnostic* split = find_rule(uneven, "mesh.ep-experts");
  REQUIRE(split);
  CHECK(split->where == three.where("mesh.ep"));
  CHECK(split->message.find("128 experts") != std::string::npos);
  CHECK(split->message.find("num_experts") != std::string::npos);
  // ep 4 at dp 6: not a run of whole groups.
  three.mesh.ep = three.roles[0].mesh.ep = 4;
  Diagnostics groups;
  make_plan(three, ClusterShape::from_recipe(three), groups);
  const Diagnostic* within = find_rule(groups, "mesh.ep-dp");
  REQUIRE(within);
  CHECK(within->message.find("dp = 6") != std::string::npos);

  // [mesh] ep leaves a dense role at 1; the role's own key on it is refused.
  Recipe ppo = ppo_recipe("Qwen/Qwen3-30B-A3B", 1, 8, 1);
  role_of(ppo, "ref").model = "Qwen/Qwen2.5-7B-Instruct";
  ppo.mesh.ep = 2;
  for (auto& r : ppo.roles) r.mesh.ep = 2;
  ppo.locations["mesh.ep"] = {ppo.file, 30, 1};
  Diagnostics mixed;
  const Plan shared = make_plan(ppo, ClusterShape::from_recipe(ppo), mixed);
  CHECK_FALSE(has_rule(mixed, "mesh.ep-experts"));
  CHECK(shared.role(Role::actor)->mesh.ep == 2);
  CHECK(shared.role(Role::ref)->mesh.ep == 1);
  ppo.locations["roles.ref.mesh.ep"] = {ppo.file, 50, 1};
  Diagnostics own;
  make_plan(ppo, ClusterShape::from_recipe(ppo), own);
  const Diagnostic* dense = find_rule(own, "mesh.ep-experts");
  REQUIRE(dense);
  CHECK(dense->where == ppo.where("roles.ref.mesh.ep"));
  CHECK(dense->message.find("dense") != std::string::npos);
}

TEST_CASE("tp must divide attention and key/value heads") {
  Diagnostics diagnostics;
  SUBCASE("the role's own mesh.tp") {
    Recipe recipe = sft_recipe("Llama-2-70b", 8);
    recipe.roles[0].mesh.tp = 8;  // 64 heads, 8 kv heads: fine
    recipe.locations["roles.actor.mesh.tp"] = {recipe.file, 90, 1};
    make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    CHECK_FALSE(has_rule(diagnostics, "mesh.heads"));
    recipe.roles[0].mesh.tp = 4;
    recipe.roles[0].procs_per_node = 6;
    recipe.launch.procs_per_node = 6;
    recipe.roles[0].model = "Qwen2.5-0.5B";  // 14 heads, 2 kv heads
    make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "mesh.heads");
    REQUIRE(d);
    CHECK(d->where.line == 90);
    CHECK(d->message.find("does not divide the 14 attention heads and 2 key/value heads of Qwen2.5-0.5B") !=
          std::string::npos);
  }
  SUBCASE("the global mesh.tp when the role does not set one") {
    Recipe recipe = sft_recipe("Qwen2.5-0.5B", 8);
    recipe.roles[0].mesh.tp = 4;
    make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "mesh.heads");
    REQUIRE(d);
    CHECK(d->where == recipe.where("mesh.tp"));
  }
  SUBCASE("rollout.tensor_parallel for engines") {
    Recipe recipe = ppo_recipe("Qwen2.5-0.5B", 4, 8, 1);
    recipe.colocate.groups = {{Role::actor, Role::rollout}};
    recipe.rollout.engines = 2;
    recipe.rollout.tensor_parallel = 4;
    make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "mesh.heads");
    REQUIRE(d);
    CHECK(d->where == recipe.where("rollout.tensor_parallel"));
    CHECK(d->message.find("rollout engines") == 0);
  }
}

TEST_CASE("rollout sequences longer than the model's context warn once per architecture") {
  Recipe recipe = ppo_recipe("Llama-2-7b", 4, 8, 1);
  role_of(recipe, "reward").model = "Llama-3-8B";  // 8192 tokens: long enough
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.rollout.engines = 8;
  recipe.rollout.max_prompt_len = 2048;
  recipe.rollout.max_new_tokens = 4096;
  Diagnostics diagnostics;
  make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  REQUIRE(diagnostics.warning_count() == 1);
  const Diagnostic* d = find_rule(diagnostics, "rollout.max-length");
  REQUIRE(d);
  CHECK(d->severity == Severity::warning);
  CHECK(d->where == recipe.where("rollout.max_new_tokens"));
  CHECK(d->message.find("6144 tokens exceed the 4096-token context of Llama-2-7b (actor, critic, ref)") !=
        std::string::npos);
}

TEST_CASE("plans are deterministic and large clusters plan fast") {
  Recipe recipe = ppo_recipe("Llama-3-70B", 1024, 8, 256);
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.rollout.engines = 512;
  recipe.rollout.tensor_parallel = 4;
  for (auto& r : recipe.roles) r.zero_stage = 3;
  const ClusterShape cluster = ClusterShape::from_recipe(recipe);

  Diagnostics first_diagnostics, second_diagnostics;
  auto start = std::chrono::steady_clock::now();
  Plan first = make_plan(recipe, cluster, first_diagnostics);
  auto elapsed = std::chrono::steady_clock::now() - start;
  Plan second = make_plan(recipe, cluster, second_diagnostics);
  CHECK(format_plan_json(first) == format_plan_json(second));
  CHECK(first_diagnostics.format() == second_diagnostics.format());
  CHECK(first.slots.size() == 8192);
  CHECK(first.role(Role::actor)->mesh.dp_groups.front().size() == 2048);
  MESSAGE("make_plan for 1024 × 8: " << std::chrono::duration<double, std::milli>(elapsed).count() << " ms");
  // The product target is well under 100 ms in a release build; leave room
  // for debug builds and busy machines.
  CHECK(elapsed < std::chrono::milliseconds(1000));
}

TEST_CASE("a cluster without slots is reported, not divided by") {
  Recipe recipe = sft_recipe("builtin:tiny", 1);
  ClusterShape empty;
  empty.procs_per_node = 0;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, empty, diagnostics);
  CHECK(has_rule(diagnostics, "plan.placement"));
  CHECK(plan.slots.empty());
}

TEST_CASE("a cluster of more than kMaxPlanSlots processes is reported, not laid out") {
  // fuzz/regressions/recipe/million-slots: 1024 × 1024 processes took the
  // fuzz build more than 10 s and GiBs (mostly the plan's JSON), and nodes ×
  // procs_per_node beyond 2^31 overflowed int.
  Recipe recipe = sft_recipe("builtin:tiny", 1);
  for (const ClusterShape& cluster : {ClusterShape{1024, 1024, meshrun::DeviceKind::cpu, 0}, ClusterShape{2147483647, 2147483647, meshrun::DeviceKind::cpu, 0}}) {
    Diagnostics diagnostics;
    Plan plan = make_plan(recipe, cluster, diagnostics);
    const Diagnostic* refused = find_rule(diagnostics, "plan.placement");
    REQUIRE(refused);
    CHECK(refused->message == "the cluster has " + std::to_string(cluster.world_size()) + " processes (" +
                                  std::to_string(cluster.nodes) + " nodes × " + std::to_string(cluster.procs_per_node) +
                                  "); meshrun plans at most 65536");
    CHECK(plan.slots.empty());
  }
  CHECK(ClusterShape{2147483647, 2147483647, meshrun::DeviceKind::cpu, 0}.world_size() == 4611686014132420609LL);
  Diagnostics diagnostics;
  make_plan(recipe, ClusterShape{64, 1024, meshrun::DeviceKind::cpu, 0}, diagnostics);
  CHECK_FALSE(diagnostics.format().find("meshrun plans at most") != std::string::npos);
}

TEST_CASE("optimizer steps of counts near the int limit saturate instead of overflowing") {
  // fuzz/regressions/recipe/epochs-steps-overflow: 2^62 samples × 2^31 epochs.
  meshrun::Recipe recipe = small_ppo_recipe(1, 8, 1);
  recipe.batch.rollout = 2147483647;
  recipe.batch.n_samples_per_prompt = 2147483647;
  recipe.batch.train = 1;
  recipe.ppo.max_epochs = 2147483647;
  const meshrun::StepPlan step = meshrun::StepPlan::from_recipe(recipe);
  CHECK(step.samples == 4611686014132420609LL);
  CHECK(step.optimizer_steps == std::numeric_limits<int64_t>::max());
}

TEST_CASE("the step plan resolves samples and optimizer steps once, and the plan prints it") {
  meshrun::Recipe recipe = small_ppo_recipe(1, 8, 1);
  recipe.batch.rollout = 16;
  recipe.batch.n_samples_per_prompt = 4;
  recipe.batch.train = 24;
  recipe.ppo.max_epochs = 2;
  const meshrun::StepPlan step = meshrun::StepPlan::from_recipe(recipe);
  CHECK(step.prompts == 16);
  CHECK(step.group_size == 4);
  CHECK(step.samples == 64);
  CHECK(step.train_batch == 24);
  CHECK(step.epochs == 2);
  CHECK(step.optimizer_steps == 4);  // 64 / 24 = 2 per pass, 2 passes
  CHECK(step.untrained == 16);
  meshrun::Diagnostics diagnostics;
  const meshrun::Plan plan = meshrun::make_plan(recipe, meshrun::ClusterShape{1, 8, meshrun::DeviceKind::cuda, 80}, diagnostics);
  CHECK(plan.step.optimizer_steps == 4);
  CHECK(meshrun::format_plan_text(plan).find(
            "Step: 16 prompts × 4 samples = 64 samples; 4 optimizer step(s) of 24 per step (2 epoch(s)); 16 samples "
            "left out of every pass") != std::string::npos);
  CHECK(meshrun::format_plan_json(plan).find("\"optimizer_steps\": 4") != std::string::npos);

  const meshrun::StepPlan sft = meshrun::StepPlan::from_recipe(sft_recipe("builtin:tiny", 2));
  CHECK(sft.prompts == 0);
  CHECK(sft.samples == sft.train_batch);
  CHECK(sft.optimizer_steps == 1);
}

TEST_CASE("the run plan resolves [checkpoint], [logging] and max_steps once, and the plan prints it") {
  meshrun::Recipe recipe = small_ppo_recipe(1, 8, 1);
  recipe.file = "r.toml";
  recipe.checkpoint.path = "ck";
  recipe.checkpoint.save_steps = -1;
  recipe.checkpoint.max_size_gb = 1.5;
  recipe.checkpoint.load = "require";
  recipe.checkpoint.async = true;
  recipe.checkpoint.output = "out";
  recipe.logging.steps = 3;
  recipe.logging.dir = "logs-here";
  recipe.train.max_steps = -1;
  const meshrun::RunPlan run = meshrun::RunPlan::from_recipe(recipe);
  CHECK(run.algorithm == "ppo");
  CHECK(run.recipe_file == "r.toml");
  CHECK(run.save_every == 0);  // -1 in the recipe: only after the last step
  CHECK(run.max_checkpoint_bytes == 3 * (1LL << 29));
  CHECK(run.resume == meshrun::ResumePolicy::require);
  CHECK(run.async_checkpoints);
  CHECK(run.max_steps == 0);
  CHECK(run.saves_after(7, true));
  CHECK_FALSE(run.saves_after(6, false));
  CHECK(run.logs_after(6, false));
  CHECK_FALSE(run.logs_after(7, false));
  CHECK(run.logs_after(7, true));

  recipe.checkpoint.save_steps = 4;
  recipe.checkpoint.load = "never";
  recipe.train.max_steps = 9;
  CHECK(meshrun::RunPlan::from_recipe(recipe).saves_after(8, false));
  CHECK(meshrun::RunPlan::from_recipe(recipe).resume == meshrun::ResumePolicy::never);
  CHECK(meshrun::RunPlan::from_recipe(recipe).max_steps == 9);

  meshrun::Diagnostics diagnostics;
  const meshrun::Plan plan = meshrun::make_plan(recipe, meshrun::ClusterShape{1, 8, meshrun::DeviceKind::cuda, 80}, diagnostics);
  const std::string text = meshrun::format_plan_text(plan);
  CHECK(text.find("Run: at most 9 steps; checkpoints in ck every 4 steps and after the last (keep 3, at most 1.50 GiB, "
                  "async), resume never; metrics every 3 step(s) in logs-here; final model to out") !=
        std::string::npos);
  const auto json = nlohmann::json::parse(meshrun::format_plan_json(plan));
  CHECK(json.at("run").at("save_every") == 4);
  CHECK(json.at("run").at("resume") == "never");
}

TEST_CASE("the RL plan resolves [ppo] and [rollout] once, and the plan prints it") {
  meshrun::Recipe recipe = small_ppo_recipe(1, 8, 1);
  recipe.ppo.advantage = meshrun::AdvantageEstimator::group_norm;
  recipe.ppo.eps_clip = 0.2;
  recipe.ppo.eps_clip_high = -1;  // unset: the upper bound is eps_clip
  recipe.ppo.kl_mode = meshrun::KlMode::loss;
  recipe.ppo.kl_estimator = meshrun::KlEstimator::k3;
  recipe.ppo.dynamic_sampling = true;
  recipe.ppo.max_sample_rounds = 5;
  recipe.rollout.temperature = 0.7;
  recipe.rollout.top_k = 40;
  meshrun::Diagnostics diagnostics;
  const meshrun::Plan plan = meshrun::make_plan(recipe, meshrun::ClusterShape{1, 8, meshrun::DeviceKind::cuda, 80}, diagnostics);
  const meshrun::RlPlan& rl = plan.rl;
  CHECK(rl.enabled);
  CHECK(rl.advantage == meshrun::AdvantageEstimator::group_norm);
  CHECK(rl.clip_low == 0.2);
  CHECK(rl.clip_high == 0.2);
  CHECK(rl.kl_mode == meshrun::KlMode::loss);
  CHECK(rl.kl_estimator == meshrun::KlEstimator::k3);
  CHECK(rl.max_sample_rounds == 5);
  CHECK(rl.sampling.temperature == 0.7);
  CHECK(rl.sampling.top_k == 40);
  CHECK(rl.sampling.max_new_tokens == recipe.rollout.max_new_tokens);
  CHECK(rl.has_ref == (recipe.role(Role::ref) != nullptr && !recipe.role(Role::ref)->model.empty()));
  CHECK(plan.run.seed == recipe.seed);
  for (const meshrun::RolePlan& role : plan.roles) CHECK(meshrun::role_name(role.role) == role.name);
  const std::string text = meshrun::format_plan_text(plan);
  CHECK(text.find("RL: advantage group_norm") != std::string::npos);
  CHECK(text.find("policy loss ppo clip [1 - 0.2, 1 + 0.2]") != std::string::npos);
  CHECK(text.find("dynamic sampling, up to 5 rounds") != std::string::npos);
  CHECK(text.find("temperature 0.7 top_p 1 top_k 40") != std::string::npos);
  const auto json = nlohmann::json::parse(meshrun::format_plan_json(plan));
  CHECK(json.at("rl").at("kl_mode") == "loss");
  CHECK(json.at("rl").at("sampling").at("top_k") == 40);
  CHECK(json.at("run").at("seed") == recipe.seed);

  recipe.ppo.dynamic_sampling = false;
  CHECK(meshrun::RlPlan::from_recipe(recipe).max_sample_rounds == 1);
  const meshrun::Plan sft = meshrun::make_plan(sft_recipe("builtin:tiny", 2), meshrun::ClusterShape{1, 2, meshrun::DeviceKind::cuda, 80},
                                               diagnostics);
  CHECK_FALSE(sft.rl.enabled);
  CHECK(meshrun::format_plan_text(sft).find("RL:") == std::string::npos);
  CHECK_FALSE(nlohmann::json::parse(meshrun::format_plan_json(sft)).contains("rl"));
}

TEST_CASE("a trained role's optimizer is resolved from its keys; inference roles have none") {
  meshrun::Recipe recipe = small_ppo_recipe(1, 8, 1);
  meshrun::RoleConfig& role = role_of(recipe, "actor");
  role.learning_rate = 3e-6;
  role.lr_scheduler = "linear";
  role.adam_beta2 = 0.999;
  role.max_norm = 0;
  recipe.train.bucket_mb = 8;
  recipe.train.max_skipped_steps = 4;
  meshrun::Diagnostics diagnostics;
  const meshrun::Plan plan = meshrun::make_plan(recipe, meshrun::ClusterShape{1, 8, meshrun::DeviceKind::cuda, 80}, diagnostics);
  const meshrun::RolePlan& actor = *plan.role(Role::actor);
  REQUIRE(actor.trained);
  CHECK(actor.optimizer.learning_rate == 3e-6);
  CHECK(actor.optimizer.lr_scheduler == meshrun::LrScheduleKind::linear);
  CHECK(actor.optimizer.adam_beta2 == 0.999);
  CHECK(actor.optimizer.max_norm == 0);
  CHECK(actor.optimizer.bucket_mb == 8);
  CHECK(actor.optimizer.max_skipped_steps == 4);
  const std::string text = meshrun::format_plan_text(plan);
  CHECK(text.find("AdamW lr 3e-06 (linear, warmup 0.03, min 0.1), betas 0.9/0.999, eps 1e-08, weight decay "
                  "0, clip off, buckets 8 MB, stops after 4 skipped steps in a row") != std::string::npos);
  const auto json = nlohmann::json::parse(meshrun::format_plan_json(plan));
  for (const auto& role : json.at("roles")) {
    CHECK(role.contains("optimizer") == role.at("trained").get<bool>());
    if (role.contains("optimizer")) CHECK(role.at("optimizer").at("max_skipped_steps") == 4);
  }
  recipe.train.max_skipped_steps = -1;
  const meshrun::Plan never = meshrun::make_plan(recipe, meshrun::ClusterShape{1, 8, meshrun::DeviceKind::cuda, 80}, diagnostics);
  CHECK(never.role(Role::actor)->optimizer.max_skipped_steps == -1);
  CHECK(meshrun::format_plan_text(never).find("buckets 8 MB, never stops on skipped steps") != std::string::npos);
}

TEST_CASE("lora.unsupported: a Phi-3 model's fused projections take no LoRA adapters; a config.json it cannot build is plan.model") {
  Diagnostics diagnostics;
  Recipe recipe = sft_recipe("microsoft/phi-4", 8);
  recipe.roles[0].lora_rank = 16;
  recipe.locations["roles.actor.lora_rank"] = {recipe.file, 12, 1};
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  CHECK(plan.role(Role::actor)->architecture.name == "phi-4");
  const Diagnostic* d = find_rule(diagnostics, "lora.unsupported");
  REQUIRE(d);
  CHECK(d->where.line == 12);
  CHECK(d->message.find("actor: phi-4 is a phi3 model, whose layers are fused qkv_proj and gate_up_proj") == 0);
  CHECK(d->suggestion == "remove roles.actor.lora_rank to train the whole model");
  Diagnostics full;
  recipe.roles[0].lora_rank = 0;
  make_plan(recipe, ClusterShape::from_recipe(recipe), full);
  CHECK_FALSE(has_rule(full, "lora.unsupported"));

  // Phi-4-mini rotates 3/4 of each head: refused where the model is named.
  TempDir dir;
  dir.write("phi4-mini/config.json", R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
      "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 24, "num_hidden_layers": 32,
      "num_key_value_heads": 8, "partial_rotary_factor": 0.75, "vocab_size": 200064})");
  Diagnostics partial;
  make_plan(sft_recipe((dir.path() / "phi4-mini").string(), 8), ClusterShape::from_recipe(recipe), partial);
  const Diagnostic* model = find_rule(partial, "plan.model");
  REQUIRE(model);
  CHECK(model->message.find("partial_rotary_factor 0.75 is not supported") != std::string::npos);
}

TEST_CASE("lora.rank: at most the smaller side of every targeted projection") {
  Diagnostics diagnostics;
  Recipe recipe = sft_recipe("Qwen2.5-0.5B", 2);  // hidden 896, 2 kv heads of 64: k_proj [128, 896]
  recipe.roles[0].lora_rank = 128;
  recipe.locations["roles.actor.lora_rank"] = {recipe.file, 12, 1};
  make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  CHECK_FALSE(has_rule(diagnostics, "lora.rank"));
  recipe.roles[0].lora_rank = 129;
  make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const Diagnostic* d = find_rule(diagnostics, "lora.rank");
  REQUIRE(d);
  CHECK(d->where.line == 12);
  CHECK(d->message == "lora_rank = 129 exceeds k_proj of Qwen2.5-0.5B ([128, 896]): a rank is at most 128");
  Diagnostics without_k;
  recipe.roles[0].lora_targets = {"q_proj", "o_proj"};
  make_plan(recipe, ClusterShape::from_recipe(recipe), without_k);
  CHECK_FALSE(has_rule(without_k, "lora.rank"));
}

TEST_CASE("a rollout larger than the host's or the device's memory is plan.rollout-memory") {
  Recipe recipe = small_ppo_recipe(4, 2, 1);
  recipe.locations["batch.n_samples_per_prompt"] = {recipe.file, 90, 1};
  Diagnostics fine;
  make_plan(recipe, ClusterShape::from_recipe(recipe), fine);
  CHECK_FALSE(has_rule(fine, "plan.rollout-memory"));

  // 2^30 prompts × 2^30 samples: more than any host, on cpu (no device size) too.
  recipe.batch.rollout = 1 << 30;
  recipe.batch.n_samples_per_prompt = 1 << 30;
  for (const char* device : {"cuda", "cpu"}) {
    INFO(device);
    recipe.launch.device = device;
    Diagnostics diagnostics;
    make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    REQUIRE(has_rule(diagnostics, "plan.rollout-memory"));
    const Diagnostic* d = nullptr;
    for (const auto& item : diagnostics.items())
      if (item.rule == "plan.rollout-memory") d = &item;
    CHECK(d->where.line == 90);
    CHECK(d->message.find("1073741824 prompts × 1073741824 samples") != std::string::npos);
  }

  // 2^30 samples of 4 tokens at 38 bytes each: 152 GiB, more than an 80 GiB
  // device.
  recipe.launch.device = "cuda";
  recipe.batch.rollout = 1 << 20;
  recipe.batch.n_samples_per_prompt = 1 << 10;
  recipe.rollout.max_prompt_len = 2;
  recipe.rollout.max_new_tokens = 2;
  Diagnostics device;
  make_plan(recipe, ClusterShape::from_recipe(recipe), device);
  CHECK(has_rule(device, "plan.rollout-memory"));
}

TEST_CASE("a device size past int64's bytes saturates instead of turning negative") {
  Recipe recipe = small_ppo_recipe(4, 2, 1);
  ClusterShape cluster = ClusterShape::from_recipe(recipe);
  cluster.memory_gb = 1e308;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, cluster, diagnostics);
  REQUIRE_FALSE(plan.verdicts.empty());
  for (const FitVerdict& verdict : plan.verdicts) {
    CHECK(verdict.capacity_bytes > 0);
    CHECK(verdict.fits);
  }
}
