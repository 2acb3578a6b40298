// Memory estimates against figures computed by hand from docs/planning.md.
// Llama-2-7b throughout: N = 6,738,415,616 parameters, h = 4096, L = 32,
// I = 11008, kv_dim = 4096, vocab = 32000; bf16 (e = 2) unless stated.
#include <doctest/doctest.h>

#include "plan_fixtures.hpp"

using namespace meshrun;
using namespace plan_test;

namespace {

constexpr int64_t N = 6'738'415'616;
// Activation elements per token and layer at tp 1: 4h + 2h + 2·kv_dim + 4I.
constexpr int64_t kLayerElements = 4 * 4096 + 2 * 4096 + 2 * 4096 + 4 * 11008;  // 76800

MemoryEstimate sft_memory(int zero_stage, void (*adjust)(Recipe&) = nullptr) {
  Recipe recipe = sft_recipe("meta-llama/Llama-2-7b-hf", 8);
  recipe.roles[0].zero_stage = zero_stage;
  if (adjust) adjust(recipe);
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  REQUIRE(plan.role(Role::actor));
  return plan.role(Role::actor)->memory;
}

}  // namespace

TEST_CASE("trained role: each ZeRO stage shards one more state over dp × sp = 8") {
  const int64_t weights = 2 * N;      // 13,476,831,232
  const int64_t optimizer = 12 * N;   // fp32 master + Adam m, v: 80,860,987,392
  MemoryEstimate s0 = sft_memory(0), s1 = sft_memory(1), s2 = sft_memory(2), s3 = sft_memory(3);

  // The gradient as the engine holds it: ZeRO-0 the bf16 gradient and its
  // fp32 copy to reduce (6 bytes a parameter); ZeRO-1/2 the bf16 gradient
  // (across micro-steps, during backward) and the fp32 shard; ZeRO-3 the
  // shard, and the working set of its largest unit U (a decoder layer:
  // 4 · 4096² + 3 · 4096 · 11008 + 2 · 4096): its gathered bf16 weights
  // and gradient, the fp32 copies of two units being reduced and their
  // outputs (4 / 8 each).
  CHECK(s0.parameters == 13'476'831'232);
  CHECK(s0.gradients == 6 * N);  // 40,430,493,696
  CHECK(s0.gradients == 40'430'493'696);
  CHECK(s0.optimizer == 80'860'987'392);

  CHECK(s1.parameters == weights);
  CHECK(s1.gradients == weights + 4 * N / 8);
  CHECK(s1.optimizer == optimizer / 8);  // 10,107,623,424

  CHECK(s2.parameters == weights);
  CHECK(s2.gradients == weights + 4 * N / 8);  // 16,846,039,040
  CHECK(s2.gradients == 16'846'039'040);
  CHECK(s2.optimizer == 10'107'623'424);

  const int64_t unit = 202'383'360;
  CHECK(s3.parameters == 2 * N / 8 + 2 * unit);  // 2,089,370,624
  CHECK(s3.parameters == 2'089'370'624);
  CHECK(s3.gradients == 4 * N / 8 + (2 + 2 * 4 + 1) * unit);  // 5,595,424,768
  CHECK(s3.gradients == 5'595'424'768);
  CHECK(s3.optimizer == 10'107'623'424);
  CHECK(s3.optimizer_host == 0);

  // Micro-batch 1 × 2048 tokens, no checkpointing: L × t × elements × e.
  CHECK(s3.activations == 32 * 2048 * kLayerElements * 2);  // 10,066,329,600
  CHECK(s3.activations == 10'066'329'600);
  // Logits: t × vocab × (e + 4 for the fp32 log-softmax).
  CHECK(s3.logits == 2048 * 32000 * 6);  // 393,216,000
  CHECK(s3.overhead == kGiB);
  CHECK(s3.kv_cache == 0);
  CHECK(s3.total() == int64_t{2'089'370'624} + 5'595'424'768 + 10'107'623'424 + 10'066'329'600 + 393'216'000 + kGiB);
}

TEST_CASE("offload moves the optimizer states to host memory") {
  MemoryEstimate m = sft_memory(3, [](Recipe& r) { r.roles[0].offload = true; });
  CHECK(m.optimizer == 0);
  CHECK(m.optimizer_host == 10'107'623'424);
  CHECK(m.parameters == 2'089'370'624);
}

TEST_CASE("async checkpoints hold a snapshot of the owned fp32 state in CPU memory, outside the device total") {
  const MemoryEstimate sync = sft_memory(2);
  CHECK(sync.checkpoint_host == 0);
  const MemoryEstimate z2 = sft_memory(2, [](Recipe& r) { r.checkpoint.async = true; });
  CHECK(z2.checkpoint_host == 12 * N / 8);  // master, m and v of the 1/8 shard: 10,107,623,424
  CHECK(z2.total() == sync.total());
  const MemoryEstimate z0 = sft_memory(0, [](Recipe& r) { r.checkpoint.async = true; });
  CHECK(z0.checkpoint_host == 12 * N);  // below ZeRO stage 1 every rank writes the whole state
}

TEST_CASE("gradient checkpointing keeps one hidden state per layer plus one layer's working set") {
  MemoryEstimate m = sft_memory(3, [](Recipe& r) { r.roles[0].gradient_checkpointing = true; });
  // L × t × h × e + t × elements × e = 536,870,912 + 314,572,800.
  CHECK(m.activations == 32LL * 2048 * 4096 * 2 + 2048 * kLayerElements * 2);
  CHECK(m.activations == 851'443'712);

  // The plan carries both settings, whichever the recipe chose.
  Recipe recipe = sft_recipe("Llama-2-7b", 8);
  Diagnostics diagnostics;
  for (bool checkpointing : {false, true}) {
    recipe.roles[0].gradient_checkpointing = checkpointing;
    Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    CHECK(plan.role(Role::actor)->activations_checkpointed == 851'443'712);
    CHECK(plan.role(Role::actor)->activations_not_checkpointed == 10'066'329'600);
  }
}

TEST_CASE("fp32 needs no master copy and doubles every element") {
  MemoryEstimate m = sft_memory(0, [](Recipe& r) { r.roles[0].dtype = "fp32"; });
  CHECK(m.parameters == 4 * N);  // 26,953,662,464
  CHECK(m.gradients == 4 * N);
  CHECK(m.optimizer == 8 * N);  // 53,907,323,328
  CHECK(m.activations == 20'132'659'200);
  CHECK(m.logits == 2048 * 32000 * 8);
}

TEST_CASE("tp divides every state and the sharded activations; sp divides the tokens") {
  Recipe recipe = sft_recipe("Llama-2-7b", 8);
  recipe.roles[0].zero_stage = 1;
  recipe.roles[0].mesh = {2, 2, 2};
  recipe.batch.micro_train = 2;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const RolePlan& actor = *plan.role(Role::actor);
  CHECK(actor.memory.parameters == 2 * N / 2);      // 6,738,415,616
  CHECK(actor.memory.gradients == (2 * N + 4 * N / 4) / 2);  // bf16 and the fp32 shard over z 4, then tp 2
  CHECK(actor.memory.gradients == 10'107'623'424);
  CHECK(actor.memory.optimizer == 12 * N / (2 * 4));  // z = dp 2 × sp 2, then tp 2
  // t = 2 × 2048 / 2 = 2048 tokens; elements = 4h + (2h + 2kv + 4I) / 2 = 46592;
  // and each layer gathers the other sp rank's keys and values: 2048 × 2kv / 2.
  CHECK(actor.memory.activations == 32LL * (2048 * 46592 + 2048 * 4096) * 2);  // 6,643,777,536
  CHECK(actor.memory.logits == 2048 * 16000 * 6);
  CHECK(actor.gradient_accumulation == 2);  // train 8 / (micro 2 × dp 2)
}

TEST_CASE("inference roles hold parameters and one layer; value heads have no logits") {
  Recipe recipe = ppo_recipe("Llama-2-7b", 4, 8, 1);
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.rollout.engines = 4;
  recipe.rollout.tensor_parallel = 2;
  role_of(recipe, "ref").zero_stage = 3;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);

  const RolePlan& ref = *plan.role(Role::ref);
  CHECK_FALSE(ref.trained);
  // ZeRO-3 shards inference weights too, gathering one decoder layer at a time.
  CHECK(ref.memory.parameters == 2 * N / 8 + 2 * 202'383'360);
  CHECK(ref.memory.gradients == 0);
  CHECK(ref.memory.optimizer == 0);
  // micro_rollout 1 × (1024 + 1024) tokens, one layer.
  CHECK(ref.memory.activations == 2048 * kLayerElements * 2);  // 314,572,800
  CHECK(ref.memory.logits == 2048 * 32000 * 6);

  const int64_t value_model = N - 32000 * 4096 + 4096;  // 6,607,347,712
  const RolePlan& reward = *plan.role(Role::reward);
  CHECK(reward.parameter_count == value_model);
  CHECK(reward.memory.parameters == 2 * value_model);  // ZeRO-0: replicated
  CHECK(reward.memory.logits == 0);

  const RolePlan& critic = *plan.role(Role::critic);
  CHECK(critic.trained);
  CHECK(critic.parameter_count == value_model);
  CHECK(critic.memory.logits == 0);
  CHECK(critic.memory.optimizer == 12 * value_model);
}

TEST_CASE("rollout engines: weights, KV cache at memory_utilization") {
  Recipe recipe = ppo_recipe("Llama-2-7b", 4, 8, 1);
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.rollout.engines = 4;
  recipe.rollout.tensor_parallel = 2;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  REQUIRE(plan.engines.size() == 4);
  const EnginePlan& engine = plan.engines[0];
  const int64_t budget = 77'309'411'328;  // floor(0.9 × 80 GiB)
  CHECK(engine.budget_bytes == budget);
  CHECK(engine.memory.parameters == N);  // 2N / tp 2
  CHECK(engine.memory.overhead == kGiB);
  CHECK(engine.memory.kv_cache == budget - N - kGiB);  // 69,497,253,888
  // K and V × 32 layers × 16 kv heads per process × 128 × 2 bytes.
  CHECK(engine.kv_bytes_per_token == 2 * 32 * 16 * 128 * 2);
  CHECK(engine.kv_cache_tokens == 265'110);
  CHECK(engine.kv_cache_sequences == 129);  // 265,110 / 2048
  CHECK(engine.memory.total() == budget);
}

TEST_CASE("engines keep at least one kv head per process; without capacity the cache is not sized") {
  Recipe recipe = ppo_recipe("builtin:tiny", 1, 8, 1);
  recipe.rollout.max_prompt_len = 256;  // within builtin:tiny's 512-token context
  recipe.rollout.max_new_tokens = 256;
  recipe.colocate.all = true;
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 4;  // tiny has 2 kv heads: replicated, 1 per process
  Diagnostics diagnostics;
  std::string error;
  Plan plan = make_plan(recipe, *ClusterShape::parse("1x8:cpu", error), diagnostics);
  // tp 4 does not divide 2 kv heads: reported, yet the plan still sizes the engines.
  REQUIRE(diagnostics.items().size() == 1);
  CHECK(diagnostics.items()[0].rule == "mesh.heads");
  REQUIRE(plan.engines.size() == 2);
  const EnginePlan& engine = plan.engines[1];
  CHECK(engine.kv_bytes_per_token == 2 * 2 * 1 * 16 * 2);
  CHECK(engine.budget_bytes == 0);
  CHECK(engine.kv_cache_tokens == 0);
  // The paged pool is then max_batch whole sequences, allocated beside the weights.
  CHECK(engine.max_batch == (plan.step.samples + 1) / 2);
  CHECK(engine.kv_pool_blocks == engine.max_batch * (512 / 16));
  CHECK(engine.memory.kv_cache == engine.kv_pool_tokens() * engine.kv_bytes_per_token);
  CHECK(engine.memory.overhead == 256 * 1024 * 1024);  // cpu process overhead
  for (const auto& v : plan.verdicts) {
    CHECK(v.capacity_bytes == 0);
    CHECK(v.fits);
  }
}

TEST_CASE("the engines' paged KV pool: max_batch, kv_cache_mb and the budget size it, capped at max_batch sequences") {
  Recipe recipe = ppo_recipe("builtin:tiny", 1, 2, 1);
  recipe.rollout.max_prompt_len = 100;
  recipe.rollout.max_new_tokens = 60;  // 160 tokens: 10 blocks of 16
  recipe.colocate.all = true;
  recipe.rollout.engines = 2;
  std::string error;
  const auto plan_of = [&](const Recipe& r, const char* cluster) {
    Diagnostics diagnostics;
    Plan plan = make_plan(r, *ClusterShape::parse(cluster, error), diagnostics);
    INFO(diagnostics.format());
    REQUIRE(plan.engines.size() == 2);
    return std::make_pair(plan, diagnostics);
  };
  auto [plan, diagnostics] = plan_of(recipe, "1x2:cpu");
  CHECK(diagnostics.empty());
  const int64_t samples = (plan.step.samples + 1) / 2;  // each engine's share
  REQUIRE(samples > 1);
  EnginePlan engine = plan.engines[0];
  CHECK(engine.max_batch == samples);
  CHECK(engine.kv_block_size == 16);
  CHECK(engine.prefill_chunk == 512);
  CHECK(engine.kv_pool_blocks == samples * 10);
  const int64_t bytes_per_token = engine.kv_bytes_per_token;

  recipe.rollout.max_batch = 1;
  recipe.rollout.kv_block_size = 32;  // 160 = 5 blocks of 32
  engine = plan_of(recipe, "1x2:cpu").first.engines[0];
  CHECK(engine.max_batch == 1);
  CHECK(engine.kv_pool_blocks == 5);
  recipe.rollout.max_batch = 100000;  // at most the engine's share
  CHECK(plan_of(recipe, "1x2:cpu").first.engines[0].max_batch == samples);

  // kv_cache_mb: what the megabytes hold, in whole blocks.
  recipe.rollout.kv_block_size = 16;
  recipe.rollout.kv_cache_mb = 1;
  engine = plan_of(recipe, "1x2:cpu").first.engines[0];
  const int64_t blocks = std::min<int64_t>(samples * 10, 1024 * 1024 / (bytes_per_token * 16));
  CHECK(engine.kv_pool_blocks == blocks);
  CHECK(engine.memory.kv_cache == blocks * 16 * bytes_per_token);

  // A device of known size: the budget's tokens, capped at max_batch sequences.
  recipe.rollout.kv_cache_mb = 0;
  engine = plan_of(recipe, "1x2:cuda:80").first.engines[0];
  CHECK(engine.kv_cache_tokens > samples * 160);
  CHECK(engine.kv_pool_blocks == samples * 10);
  CHECK(engine.memory.kv_cache == engine.budget_bytes - engine.memory.parameters - engine.memory.overhead);
}

TEST_CASE("engines decode with CUDA graphs on CUDA unless rollout.cuda_graphs, the cluster or the model says not") {
  Recipe recipe = ppo_recipe("builtin:tiny", 1, 2, 1);
  recipe.rollout.max_prompt_len = 100;
  recipe.rollout.max_new_tokens = 60;
  recipe.colocate.all = true;
  recipe.rollout.engines = 2;
  std::string error;
  const auto engine_of = [&](const char* cluster) {
    Diagnostics diagnostics;
    Plan plan = make_plan(recipe, *ClusterShape::parse(cluster, error), diagnostics);
    INFO(diagnostics.format());
    REQUIRE(!plan.engines.empty());
    return plan.engines[0];
  };
  EnginePlan engine = engine_of("1x2:cuda:80");
  CHECK(engine.decode_graphs);
  CHECK(engine.eager_reason.empty());
  engine = engine_of("1x2:cpu");
  CHECK_FALSE(engine.decode_graphs);
  CHECK(engine.eager_reason == "not on CUDA");
  recipe.rollout.engines = 1;
  recipe.rollout.tensor_parallel = 2;
  engine = engine_of("1x2:cuda:80");
  CHECK_FALSE(engine.decode_graphs);
  CHECK(engine.eager_reason.find("tensor parallelism") != std::string::npos);
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 1;
  recipe.rollout.cuda_graphs = false;
  engine = engine_of("1x2:cuda:80");
  CHECK_FALSE(engine.decode_graphs);
  CHECK(engine.eager_reason == "rollout.cuda_graphs = false");
}

TEST_CASE("a kv_cache_mb that cannot hold one sequence is rollout.kv-pool, located at the key") {
  Recipe recipe = ppo_recipe("Llama-2-7b", 1, 8, 1);
  recipe.rollout.max_prompt_len = 1024;
  recipe.rollout.max_new_tokens = 1024;  // 2048 tokens × 512 KiB per token (tp 1) = 1 GiB
  recipe.colocate.all = true;
  recipe.rollout.engines = 8;
  recipe.rollout.kv_cache_mb = 1000;
  std::string error;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, *ClusterShape::parse("1x8:cuda:80", error), diagnostics);
  bool found = false;
  for (const auto& item : diagnostics.items()) {
    if (item.rule != "rollout.kv-pool") continue;
    found = true;
    CHECK(item.message.rfind("rollout.kv_cache_mb = 1000 holds ", 0) == 0);
    CHECK(item.message.find("= 2048 tokens needs 128 blocks (1024 MB)") != std::string::npos);
  }
  CHECK(found);
  recipe.rollout.kv_cache_mb = 1024;
  Diagnostics enough;
  make_plan(recipe, *ClusterShape::parse("1x8:cuda:80", error), enough);
  for (const auto& item : enough.items()) CHECK(item.rule != "rollout.kv-pool");
}

TEST_CASE("LoRA: gradients, optimizer state and snapshots of the adapters only; the frozen base whole per rank") {
  // Rank 16 on q, k, v, o (4096 → 4096 each) and gate, up (4096 → 11008), down (11008 → 4096):
  // per layer 16 · (4 · 8192 + 3 · 15104) = 1,249,280; 32 layers.
  constexpr int64_t A = 32 * 16 * (4 * 8192 + 3 * 15104);  // 39,976,960
  const auto with_lora = [](Recipe& recipe) {
    recipe.roles[0].lora_rank = 16;
    recipe.checkpoint.async = true;
  };
  const MemoryEstimate s0 = sft_memory(0, with_lora), s3 = sft_memory(3, with_lora);
  CHECK(s0.parameters == 2 * N + 2 * A);
  CHECK(s0.gradients == 6 * A);  // bf16 and the fp32 copy dp reduces
  CHECK(s0.optimizer == 12 * A);
  CHECK(s0.checkpoint_host == 12 * A);
  // ZeRO-3 shards the adapters over dp 8, not the frozen base; its units
  // are a layer's adapters (A / 32), gathered with their gradient, the
  // fp32 copies of two being reduced and their outputs.
  CHECK(s3.parameters == 2 * N + (2 * A + 7) / 8 + 2 * (A / 32));
  CHECK(s3.gradients == 4 * A / 8 + (2 + 2 * 4 + 1) * (A / 32));
  CHECK(s3.optimizer == 12 * A / 8);
}

namespace {

// DPO of Llama-2-7b on 8 processes: a pair trains as two sequences, so a
// micro-batch of 1 pair is t = 2 × 2048 tokens.
Plan dpo_plan(void (*adjust)(Recipe&), Diagnostics& diagnostics) {
  Recipe recipe = sft_recipe("meta-llama/Llama-2-7b-hf", 8);
  recipe.algorithm = Algorithm::dpo;
  if (adjust) adjust(recipe);
  return make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
}

}  // namespace

TEST_CASE("DPO's reference on the actor's processes: its weights on the device, or in CPU memory under sleep") {
  Diagnostics diagnostics;
  SUBCASE("the actor's own model, resident throughout") {
    const Plan plan = dpo_plan(nullptr, diagnostics);
    const RolePlan& actor = *plan.role(Role::actor);
    CHECK(actor.reference_model == "meta-llama/Llama-2-7b-hf");
    CHECK(actor.reference_parameter_count == N);
    CHECK(actor.memory.reference == 2 * N);  // e·N, no ZeRO, tp 1
    CHECK(actor.memory.reference_host == 0);
    Recipe sft = sft_recipe("meta-llama/Llama-2-7b-hf", 8);
    Diagnostics sft_diagnostics;
    const Plan sft_plan = make_plan(sft, ClusterShape::from_recipe(sft), sft_diagnostics);
    const RolePlan& sft_actor = *sft_plan.role(Role::actor);
    CHECK(sft_actor.reference_model.empty());
    CHECK(sft_actor.memory.reference == 0);
    // Twice the sequences per micro-batch, plus the reference's weights.
    CHECK(actor.memory.total() == sft_actor.memory.total() + sft_actor.memory.activations +
                                      sft_actor.memory.logits + 2 * N);
  }
  SUBCASE("split by the actor's tp, never sharded by ZeRO") {
    const Plan plan = dpo_plan(
        [](Recipe& r) {
          r.roles[0].mesh.tp = 2;
          r.roles[0].zero_stage = 3;
        },
        diagnostics);
    CHECK(plan.role(Role::actor)->memory.reference == N);
  }
  SUBCASE("with colocate.sleep only the forward's excess over the training activations") {
    // t = 4096: its one-layer forward (4096 × 76800 × 2) is far below the
    // 32 layers' activations, so the device peak is the training phase.
    const Plan plain = dpo_plan([](Recipe& r) { r.colocate.sleep = true; }, diagnostics);
    CHECK(plain.role(Role::actor)->memory.reference == 0);
    CHECK(plain.role(Role::actor)->memory.reference_host == 2 * N);
    // With gradient checkpointing the activations are L × t × h × e + t × A × e
    // = 1,073,741,824 + 629,145,600, and the reference phase is larger.
    const Plan checkpointed = dpo_plan(
        [](Recipe& r) {
          r.colocate.sleep = true;
          r.roles[0].gradient_checkpointing = true;
        },
        diagnostics);
    const MemoryEstimate& m = checkpointed.role(Role::actor)->memory;
    CHECK(m.activations == 1'702'887'424);
    CHECK(m.reference == 2 * N + 4096 * kLayerElements * 2 - 1'702'887'424);  // 12,403,089,408
    CHECK(m.reference == 12'403'089'408);
    CHECK(m.reference_host == 2 * N);
  }
  SUBCASE("a [roles.ref] model of its own") {
    const Plan plan = dpo_plan(
        [](Recipe& r) {
          r.roles.push_back(role("ref", "meta-llama/Llama-2-13b-hf", 0, 0));
        },
        diagnostics);
    const RolePlan& actor = *plan.role(Role::actor);
    CHECK(plan.role(Role::ref) == nullptr);  // it takes no processes
    CHECK(actor.reference_model == "meta-llama/Llama-2-13b-hf");
    CHECK(actor.reference_architecture.name == "Llama-2-13b");
    CHECK(actor.reference_parameter_count == actor.reference_architecture.parameters());
    CHECK(actor.reference_parameter_count > N);
    CHECK(actor.memory.reference == 2 * actor.reference_parameter_count);
  }
  // 7B at ZeRO-0 does not fit 80 GiB (plan.memory); nothing else is wrong.
  for (const char* rule : {"plan.reference", "plan.model", "mesh.heads"}) CHECK_FALSE(has_rule(diagnostics, rule));
}

TEST_CASE("DPO with LoRA on the actor's own model: the reference is its base with the adapters off, no copy") {
  Diagnostics diagnostics;
  const auto with_lora = [](Recipe& r) {
    r.roles[0].lora_rank = 16;
    r.roles[0].lora_targets = {"q_proj", "v_proj"};
  };
  const Plan plan = dpo_plan(with_lora, diagnostics);
  const RolePlan& actor = *plan.role(Role::actor);
  CHECK(actor.reference_shares_base);
  CHECK(actor.memory.reference == 0);
  CHECK(actor.memory.reference_host == 0);
  CHECK(contains(format_plan_text(plan), "with its adapters off (no second copy)"));
  // Another model as the reference is a copy again.
  const Plan other = dpo_plan(
      [](Recipe& r) {
        r.roles[0].lora_rank = 16;
        r.roles[0].lora_targets = {"q_proj", "v_proj"};
        r.roles.push_back(role("ref", "meta-llama/Llama-2-13b-hf", 0, 0));
      },
      diagnostics);
  CHECK_FALSE(other.role(Role::actor)->reference_shares_base);
  CHECK(other.role(Role::actor)->memory.reference == 2 * other.role(Role::actor)->reference_parameter_count);
  // Without LoRA the actor trains its own weights: the reference is a copy.
  CHECK_FALSE(dpo_plan(nullptr, diagnostics).role(Role::actor)->reference_shares_base);
}

TEST_CASE("a reference that cannot score the actor's tokens or split like it is an error at its model key") {
  Diagnostics diagnostics;
  SUBCASE("another vocabulary") {
    const Plan plan = dpo_plan(
        [](Recipe& r) { r.roles.push_back(role("ref", "meta-llama/Meta-Llama-3-8B", 0, 0)); }, diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.reference");
    REQUIRE(d);
    CHECK(d->where.line > 0);
    CHECK(d->message.find("vocabulary of 128256 tokens, actor's meta-llama/Llama-2-7b-hf one of 32000") !=
          std::string::npos);
    CHECK(plan.role(Role::actor)->memory.reference == 0);
  }
  SUBCASE("heads the actor's tp does not divide") {
    // Llama-2-13b's 40 heads split 5 ways; Llama-2-7b's 32 do not.
    const Plan plan = dpo_plan(
        [](Recipe& r) {
          r.roles[0].model = "meta-llama/Llama-2-13b-hf";
          r.roles[0].mesh.tp = 5;
          r.roles[0].procs_per_node = 5;
          r.launch.procs_per_node = 5;
          r.roles.push_back(role("ref", "meta-llama/Llama-2-7b-hf", 0, 0));
        },
        diagnostics);
    REQUIRE(diagnostics.error_count() == 1);
    const Diagnostic& d = diagnostics.items()[0];
    CHECK(d.rule == "mesh.heads");
    CHECK(d.message.find("the reference of actor (meta-llama/Llama-2-7b-hf)") != std::string::npos);
    CHECK(plan.role(Role::actor)->reference_architecture.name == "Llama-2-7b");
  }
  SUBCASE("an unknown reference model") {
    dpo_plan([](Recipe& r) { r.roles.push_back(role("ref", "org/no-such-model", 0, 0)); }, diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.model");
    REQUIRE(d);
    CHECK(d->message.find("the reference of actor") != std::string::npos);
  }
}
