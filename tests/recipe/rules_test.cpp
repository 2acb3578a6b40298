// Tests of src/recipe/rules.cpp: for every cross-field rule, a recipe that
// breaks it (asserting the rule id and the line:column it points at) and one
// that keeps it. Recipes are raw strings whose first line is line 1, so each
// location can be read off the text.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>

#include <sys/stat.h>

#include "diagnostic_matchers.hpp"

namespace meshrun {
namespace {

using test::Checked;

Checked check(std::string_view text, const std::vector<std::string>& sets = {}) {
  Checked checked = test::validate_text(text, sets);
  INFO("diagnostics:\n" << checked.diagnostics.format());
  REQUIRE(checked.recipe);  // the rules run only on recipes that loaded
  return checked;
}

// A valid SFT recipe and a valid PPO recipe, for the passing cases.
constexpr const char* kValidSft = R"(algorithm = "sft"
[launch]
procs_per_node = 2
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
)";

constexpr const char* kValidPpo = R"(algorithm = "ppo"
[launch]
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
procs_per_node = 1
[roles.critic]
model = "builtin:tiny"
procs_per_node = 1
[roles.reward]
model = "builtin:tiny"
procs_per_node = 1
[data]
path = "prompts"
)";

TEST_CASE("the valid base recipes break no rule") {
  CHECK(check(kValidSft).diagnostics.empty());
  CHECK(check(kValidPpo).diagnostics.empty());
}

// ---------------------------------------------------------------- launch

TEST_CASE("launch.backend-device: nccl needs cuda") {
  auto broken = check(R"(algorithm = "sft"
[launch]
device = "cpu"
backend = "nccl"
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "launch.backend-device", 4, 1);
  REQUIRE(d);
  CHECK(d->message == "backend \"nccl\" needs device \"cuda\", but launch.device is \"cpu\" (recipe.toml:3:1)");
  CHECK(d->suggestion == "use backend = \"gloo\" or \"auto\" on cpu");
  CHECK(broken.diagnostics.error_count() == 1);

  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"launch.device=cpu", "launch.backend=gloo"}).diagnostics,
                      "launch.backend-device");
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"launch.device=cpu"}).diagnostics, "launch.backend-device");
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"launch.backend=nccl"}).diagnostics, "launch.backend-device");
}

TEST_CASE("launch.local-nodes: the local launcher runs on one node") {
  auto broken = check(R"(algorithm = "sft"
[launch]
type = "local"
nodes = 2
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "launch.local-nodes", 3, 1);
  REQUIRE(d);
  CHECK(d->message == "the local launcher starts processes on this machine only, but launch.nodes = 2");
  CHECK(broken.diagnostics.error_count() == 1);

  CHECK(check(kValidSft, {"launch.type=local"}).diagnostics.empty());
  CHECK(check(kValidSft, {"launch.type=slurm", "launch.nodes=2"}).diagnostics.empty());
}

TEST_CASE("launch.ray-address: a Ray job server's http address") {
  for (const char* address : {"127.0.0.1:6379", "ray://head:10001", "http://", "http://a b:8265"}) {
    auto broken = check(kValidSft, {std::string("launch.address=") + address});
    const auto found = test::with_rule(broken.diagnostics, "launch.ray-address");
    REQUIRE_MESSAGE(found.size() == 1, address);
    CHECK(found[0].message.find("is not a Ray job server's address (http://host:port)") != std::string::npos);
  }
  CHECK(check(kValidSft, {"launch.address=http://head:8265"}).diagnostics.empty());
  CHECK(check(kValidSft, {"launch.address=https://ray.example.org"}).diagnostics.empty());
  CHECK(check(kValidSft, {"launch.type=ray"}).diagnostics.empty());
}

// ---------------------------------------------------------------- roles

TEST_CASE("roles.actor-required: every algorithm trains an actor") {
  auto sft = check(R"(algorithm = "sft"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(sft.diagnostics, "roles.actor-required", 1, 1);
  REQUIRE(d);
  CHECK(d->message == "algorithm \"sft\" trains an actor, but the recipe has no [roles.actor]");

  auto ppo = check(R"(seed = 1
algorithm = "ppo"
[roles.critic]
model = "builtin:tiny"
)");
  CHECK_DIAGNOSTIC(ppo.diagnostics, "roles.actor-required", 2, 1);

  CHECK_NO_DIAGNOSTIC(check(kValidSft).diagnostics, "roles.actor-required");
}

TEST_CASE("roles.hook-reward-only: only the reward role can be a hook") {
  auto broken = check(R"(algorithm = "sft"
[roles.actor]
model = "builtin:tiny"
hook = "score"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "roles.hook-reward-only", 4, 1);
  REQUIRE(d);
  CHECK(d->message == "only the reward role can be computed by a hook, not actor");

  auto passing = check(kValidPpo, {"roles.reward.model=", "roles.reward.hook=score", "hooks.script=/h.lua"});
  CHECK_NO_DIAGNOSTIC(passing.diagnostics, "roles.hook-reward-only");
  CHECK_NO_ERRORS(passing.diagnostics);
}

TEST_CASE("roles.model-required: a role names a model, the reward role a model or a hook") {
  SUBCASE("no model, located at the role's table") {
    auto broken = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[roles.critic]
zero_stage = 1
[roles.reward]
model = "builtin:tiny"
[data]
path = "prompts"
)");
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "roles.model-required", 4, 8);
    REQUIRE(d);
    CHECK(d->message == "role critic names no model");
    CHECK(d->suggestion == "set model = a model directory, a public model name or \"builtin:tiny\"");
  }
  SUBCASE("a reward role with neither") {
    auto broken = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[ppo]
advantage = "reinforce"
[roles.reward]
[hooks]
script = "/h.lua"
)");
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "roles.model-required", 6, 8);
    REQUIRE(d);
    CHECK(d->message == "role reward names no model or hook");
  }
  SUBCASE("a reward role with both") {
    auto broken = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[ppo]
advantage = "reinforce"
[roles.reward]
model = "builtin:tiny"
hook = "score"
[hooks]
script = "/h.lua"
)");
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "roles.model-required", 8, 1);
    REQUIRE(d);
    CHECK(d->message == "the reward role names both a model and a hook");
  }
  SUBCASE("passing: models everywhere, or a reward hook") {
    CHECK_NO_DIAGNOSTIC(check(kValidPpo).diagnostics, "roles.model-required");
    CHECK_NO_DIAGNOSTIC(
        check(kValidPpo, {"roles.reward.model=", "roles.reward.hook=score", "hooks.script=/h.lua"}).diagnostics,
        "roles.model-required");
  }
}

TEST_CASE("roles.unused: SFT warns about roles other than the actor") {
  auto sft = check(R"(algorithm = "sft"
[roles.actor]
model = "builtin:tiny"
[roles.ref]
model = "builtin:tiny"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(sft.diagnostics, "roles.unused", 4, 8);
  REQUIRE(d);
  CHECK(d->severity == Severity::warning);
  CHECK(d->message == "role ref is not used by algorithm \"sft\"");
  CHECK_NO_ERRORS(sft.diagnostics);

  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"roles.ref.model=builtin:tiny", "roles.ref.procs_per_node=1",
                                        "launch.procs_per_node=5"})
                          .diagnostics,
                      "roles.unused");
}

TEST_CASE("roles.placement: a role's nodes and procs_per_node fit the cluster's") {
  auto broken = check(R"(algorithm = "sft"
[launch]
nodes = 1
procs_per_node = 2
[roles.actor]
model = "builtin:tiny"
nodes = 2
procs_per_node = 4
[data]
path = "prompts"
)");
  auto nodes = FIND_DIAGNOSTIC(broken.diagnostics, "roles.placement", 7, 1);
  REQUIRE(nodes);
  CHECK(nodes->message == "role actor wants 2 nodes, but launch.nodes = 1");
  auto procs = FIND_DIAGNOSTIC(broken.diagnostics, "roles.placement", 8, 1);
  REQUIRE(procs);
  CHECK(procs->message == "role actor wants 4 processes per node, but launch.procs_per_node = 2");

  SUBCASE("a reward hook takes no processes, so its placement is not checked") {
    auto hook = check(kValidPpo, {"roles.reward.model=", "roles.reward.hook=score", "roles.reward.nodes=9",
                                  "hooks.script=/h.lua"});
    CHECK_NO_DIAGNOSTIC(hook.diagnostics, "roles.placement");
  }
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"roles.actor.nodes=1", "roles.actor.procs_per_node=2"}).diagnostics,
                      "roles.placement");
}

TEST_CASE("roles.critic-required: advantage gae needs a critic") {
  SUBCASE("gae by default: located at algorithm") {
    auto broken = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 3
[roles.actor]
model = "builtin:tiny"
procs_per_node = 1
[roles.reward]
model = "builtin:tiny"
procs_per_node = 1
[data]
path = "prompts"
)");
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "roles.critic-required", 1, 1);
    REQUIRE(d);
    CHECK(d->message == "advantage \"gae\" needs a critic, but the recipe has no [roles.critic]");
    CHECK(broken.diagnostics.error_count() == 1);
  }
  SUBCASE("gae set explicitly: located at ppo.advantage") {
    auto broken = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[ppo]
advantage = "gae"
)");
    CHECK_DIAGNOSTIC(broken.diagnostics, "roles.critic-required", 5, 1);
  }
  CHECK_NO_DIAGNOSTIC(check(kValidPpo).diagnostics, "roles.critic-required");
  CHECK_NO_DIAGNOSTIC(check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[ppo]
advantage = "reinforce"
)").diagnostics,
                      "roles.critic-required");
}

TEST_CASE("roles.critic-unused: only gae uses the critic") {
  auto unused = check(kValidPpo, {"ppo.advantage=reinforce"});
  auto d = FIND_DIAGNOSTIC(unused.diagnostics, "roles.critic-unused", 7, 8);
  REQUIRE(d);
  CHECK(d->severity == Severity::warning);
  CHECK(d->message == "advantage \"reinforce\" does not use the critic");
  CHECK_NO_ERRORS(unused.diagnostics);

  CHECK_NO_DIAGNOSTIC(check(kValidPpo).diagnostics, "roles.critic-unused");
}

TEST_CASE("roles.reward-required: PPO needs a reward model, hook or script") {
  auto broken = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 3
[roles.actor]
model = "builtin:tiny"
procs_per_node = 1
[roles.critic]
model = "builtin:tiny"
procs_per_node = 1
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "roles.reward-required", 1, 1);
  REQUIRE(d);
  CHECK(d->message ==
        "algorithm \"ppo\" needs a reward: the recipe has no [roles.reward] model or hook, no [hooks] script and no "
        "[env] script");
  CHECK(broken.diagnostics.error_count() == 1);

  SUBCASE("a hook script may define the reward (checked by the hook lint)") {
    auto script = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 3
[roles.actor]
model = "builtin:tiny"
procs_per_node = 1
[roles.critic]
model = "builtin:tiny"
procs_per_node = 1
[data]
path = "prompts"
[hooks]
script = "/h.lua"
)");
    CHECK(script.diagnostics.empty());
  }
  SUBCASE("an environment's step rewards are a reward") {
    auto env = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 3
[roles.actor]
model = "builtin:tiny"
procs_per_node = 1
[roles.critic]
model = "builtin:tiny"
procs_per_node = 1
[data]
path = "prompts"
[env]
script = "/env.lua"
)");
    CHECK(env.diagnostics.empty());
  }
  SUBCASE("SFT needs no reward") { CHECK_NO_DIAGNOSTIC(check(kValidSft).diagnostics, "roles.reward-required"); }
}

// ---------------------------------------------------------------- env

TEST_CASE("env.*: multi-turn episodes need rollouts, a single-process engine, room for a turn, no overlong buffer") {
  const std::string base = R"(algorithm = "ppo"
[launch]
procs_per_node = 3
[roles.actor]
model = "builtin:tiny"
procs_per_node = 2
[data]
path = "prompts"
[rollout]
max_prompt_len = 64
max_new_tokens = 32
[ppo]
advantage = "reinforce"
[env]
script = "/env.lua"
)";
  const auto with = [&](const std::string& after, const std::string& added) {
    std::string text = base;
    text.replace(text.find(after), after.size(), after + "\n" + added);
    return text;
  };
  CHECK(check(base).diagnostics.empty());
  SUBCASE("an episode shorter than a prompt and one turn") {
    auto result = check(base + "max_episode_tokens = 90\n");
    auto d = FIND_DIAGNOSTIC(result.diagnostics, "env.episode-length", 16, 1);
    REQUIRE(d);
    CHECK(d->message.find("rollout.max_prompt_len + rollout.max_new_tokens = 96") != std::string::npos);
    CHECK(check(base + "max_episode_tokens = 96\n").diagnostics.empty());
  }
  SUBCASE("a tensor-parallel engine") {
    REQUIRE(FIND_DIAGNOSTIC(check(with("max_new_tokens = 32", "tensor_parallel = 2")).diagnostics, "env.engine-tp",
                            12, 1));
  }
  SUBCASE("an overlong buffer with several turns") {
    const std::string buffered = with("advantage = \"reinforce\"", "overlong_buffer = 8");
    REQUIRE(FIND_DIAGNOSTIC(check(buffered + "max_turns = 3\n").diagnostics, "env.overlong", 14, 1));
    CHECK(check(buffered).diagnostics.empty());  // one turn: as before
  }
  SUBCASE("an algorithm that generates nothing") {
    std::string sft = base;
    sft.replace(0, std::string(R"(algorithm = "ppo")").size(), R"(algorithm = "sft")");
    REQUIRE(FIND_DIAGNOSTIC(check(sft).diagnostics, "env.needs-rollouts", 15, 1));
  }
  SUBCASE("[env] keys without a script") {
    std::string keys = base;
    keys.replace(keys.find("script = \"/env.lua\""), 19, "max_turns = 4");
    auto result = check(keys);
    auto d = FIND_DIAGNOSTIC(result.diagnostics, "env.needs-script", 15, 1);
    REQUIRE(d);
    CHECK(d->severity == Severity::warning);
  }
}

// ---------------------------------------------------------------- colocate

TEST_CASE("colocate.conflict: all or groups, not both") {
  auto broken = check(kValidPpo, {"colocate.all=true", "colocate.groups=[[\"actor\", \"critic\"]]"});
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "colocate.conflict", 1, 10);
  REQUIRE(d);
  CHECK(d->where.file == "--set[2]");
  CHECK(d->message ==
        "colocate.all = true already puts every role together; colocate.groups is ambiguous beside it");
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"colocate.all=true"}).diagnostics, "colocate.conflict");
}

TEST_CASE("colocate.unknown-role: groups name roles of the recipe, or rollout") {
  auto broken = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[roles.critic]
model = "builtin:tiny"
[roles.reward]
model = "builtin:tiny"
[colocate]
groups = [["actor", "refs"], ["critic", "ref"], ["reward", "polisher"]]
[data]
path = "prompts"
)");
  auto found = test::with_rule(broken.diagnostics, "colocate.unknown-role");
  REQUIRE(found.size() == 3);
  for (const auto& d : found) CHECK(d.where == SourceLocation{"recipe.toml", 9, 1});
  CHECK(found[0].message == "colocation group names unknown role \"refs\"");
  CHECK(found[0].suggestion == "did you mean \"ref\"?");
  CHECK(found[1].message == "colocation group names ref, but the recipe has no [roles.ref]");
  CHECK(found[2].message == "colocation group names unknown role \"polisher\"");
  CHECK(found[2].suggestion == "roles are actor, critic, reward, ref and rollout");

  auto passing = check(kValidPpo, {"colocate.groups=[[\"actor\", \"rollout\"], [\"critic\", \"reward\"]]",
                                   "rollout.engines=1"});
  CHECK_NO_DIAGNOSTIC(passing.diagnostics, "colocate.unknown-role");
}

TEST_CASE("colocate.duplicate: a role is in one group at most") {
  auto broken = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[roles.critic]
model = "builtin:tiny"
[roles.reward]
model = "builtin:tiny"
[data]
path = "prompts"
[colocate]
groups = [["actor", "critic"], ["critic", "reward"]]
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "colocate.duplicate", 11, 1);
  REQUIRE(d);
  CHECK(d->message == "critic is in more than one colocation group");
  CHECK(test::with_rule(broken.diagnostics, "colocate.duplicate").size() == 1);

  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"colocate.groups=[[\"actor\", \"critic\"], [\"reward\"]]"}).diagnostics,
                      "colocate.duplicate");
}

TEST_CASE("colocate.equal-placement: colocated roles have the same shape") {
  SUBCASE("in a group") {
    auto broken = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
procs_per_node = 2
[roles.critic]
model = "builtin:tiny"
procs_per_node = 1
[roles.reward]
model = "builtin:tiny"
procs_per_node = 1
[colocate]
groups = [["actor", "critic"]]
[data]
path = "prompts"
)");
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "colocate.equal-placement", 14, 1);
    REQUIRE(d);
    CHECK(d->message == "colocated roles actor and critic differ in placement: 1 node × 2 vs 1 node × 1");
    CHECK(d->suggestion == "give colocated roles the same nodes and procs_per_node");
  }
  SUBCASE("under colocate.all") {
    auto broken = check(kValidPpo, {"colocate.all=true", "roles.reward.procs_per_node=2"});
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "colocate.equal-placement", 1, 10);
    REQUIRE(d);
    CHECK(d->where.file == "--set[1]");
    CHECK(d->message == "colocated roles actor and reward differ in placement: 1 node × 1 vs 1 node × 2");
  }
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"colocate.groups=[[\"actor\", \"critic\"]]"}).diagnostics,
                      "colocate.equal-placement");
}

TEST_CASE("colocate.engines: colocated engines have exactly the group's processes") {
  SUBCASE("under colocate.all") {
    auto broken = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
[ppo]
advantage = "reinforce"
[roles.reward]
model = "builtin:tiny"
[rollout]
engines = 2
[colocate]
all = true
[data]
path = "prompts"
)");
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "colocate.engines", 13, 1);
    REQUIRE(d);
    CHECK(d->message ==
          "engines colocated with actor need exactly its 4 processes, but rollout.engines × tensor_parallel = 2 × 1 = 2");
    CHECK(d->suggestion == "set engines = 4 or change tensor_parallel");
    CHECK(broken.diagnostics.error_count() == 1);

    // 2 engines × 2 processes = the actor's 4.
    CHECK(check(R"(algorithm = "ppo"
[launch]
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
[ppo]
advantage = "reinforce"
[roles.reward]
model = "builtin:tiny"
[rollout]
engines = 2
tensor_parallel = 2
[colocate]
all = true
[data]
path = "prompts"
)")
              .diagnostics.empty());
  }
  SUBCASE("in a group with rollout") {
    auto broken = check(kValidPpo, {"colocate.groups=[[\"actor\", \"rollout\"]]", "rollout.tensor_parallel=2",
                                    "launch.procs_per_node=5"});
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "colocate.engines", 1, 10);
    REQUIRE(d);
    CHECK(d->message ==
          "engines colocated with actor need exactly its 1 process, but rollout.engines × tensor_parallel = 1 × 2 = 2");
    // tensor_parallel = 2 does not divide 1 process: no engine count fits.
    CHECK(d->suggestion == "make engines × tensor_parallel = 1, e.g. engines = 1 and tensor_parallel = 1");
  }
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"colocate.groups=[[\"actor\", \"rollout\"]]"}).diagnostics,
                      "colocate.engines");
}

TEST_CASE("roles.fit: roles and engines fit in nodes × procs_per_node") {
  auto broken = check(R"(algorithm = "ppo"
[launch]
nodes = 1
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
[roles.critic]
model = "builtin:tiny"
procs_per_node = 2
[roles.reward]
model = "builtin:tiny"
procs_per_node = 1
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "roles.fit", 3, 1);
  REQUIRE(d);
  // actor 1 × 4, critic 1 × 2, reward 1 × 1, one engine of 1 process.
  CHECK(d->message ==
        "roles and engines need 8 processes (actor 4, critic 2, reward 1, engines 1×1 = 1), but the cluster has "
        "launch.nodes × procs_per_node = 1 × 4 = 4");
  CHECK(d->suggestion == "add nodes, give roles fewer processes, or colocate roles ([colocate] groups or all)");

  SUBCASE("colocation makes it fit") {
    auto colocated = check(R"(algorithm = "ppo"
[launch]
nodes = 1
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
[roles.critic]
model = "builtin:tiny"
[roles.reward]
model = "builtin:tiny"
[rollout]
engines = 4
[colocate]
all = true
[data]
path = "prompts"
)");
    CHECK(colocated.diagnostics.empty());
  }
  SUBCASE("without launch.nodes set, the error is at the [launch] header") {
    auto whole = check(kValidPpo, {"launch.procs_per_node=3"});
    auto w = FIND_DIAGNOSTIC(whole.diagnostics, "roles.fit", 2, 2);  // the [launch] header
    REQUIRE(w);
  }
  CHECK_NO_DIAGNOSTIC(check(kValidPpo).diagnostics, "roles.fit");
}

// ---------------------------------------------------------------- mesh

TEST_CASE("mesh.tp-node: a tensor-parallel group stays on one node") {
  auto broken = check(R"(algorithm = "sft"
[launch]
type = "slurm"
nodes = 2
procs_per_node = 2
[mesh]
tp = 4
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "mesh.tp-node", 7, 1);
  REQUIRE(d);
  CHECK(d->message == "tp = 4 spans nodes: role actor (2 nodes × 2) has 2 processes per node");
  CHECK(broken.diagnostics.error_count() == 1);

  SUBCASE("a role's own mesh is located at its own key") {
    auto own = check(R"(algorithm = "sft"
[launch]
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
procs_per_node = 2
mesh.tp = 4
[data]
path = "prompts"
)");
    CHECK_DIAGNOSTIC(own.diagnostics, "mesh.tp-node", 7, 6);
  }
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"mesh.tp=2"}).diagnostics, "mesh.tp-node");
}

TEST_CASE("mesh.infer: with dp = -1, tp × sp divides the processes") {
  auto broken = check(R"(algorithm = "sft"
[launch]
procs_per_node = 3
[mesh]
tp = 2
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "mesh.infer", 5, 1);
  REQUIRE(d);
  CHECK(d->message == "cannot infer dp: role actor (1 node × 3) has 3 processes, not divisible by tp × sp = 2 × 1");

  SUBCASE("per role, [roles.NAME.mesh] over [mesh]") {
    auto role = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 6
[mesh]
tp = 2
[roles.actor]
model = "builtin:tiny"
procs_per_node = 2
[roles.critic]
model = "builtin:tiny"
procs_per_node = 3
[roles.critic.mesh]
tp = 1
sp = 2
[roles.reward]
model = "builtin:tiny"
procs_per_node = 1
mesh.tp = 1
[data]
path = "prompts"
)");
    // critic: 3 processes, tp × sp = 1 × 2; sp does not divide (line 14).
    auto c = FIND_DIAGNOSTIC(role.diagnostics, "mesh.infer", 14, 1);
    REQUIRE(c);
    CHECK(c->message.find("role critic") != std::string::npos);
    CHECK(test::with_rule(role.diagnostics, "mesh.infer").size() == 1);
  }
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"mesh.tp=2"}).diagnostics, "mesh.infer");
}

TEST_CASE("mesh.sp-unsupported and mesh.sp-sequence: sp where the runtime can split the sequences") {
  // SFT splits sequences over sp; a sequence shorter than 2 × sp chunks cannot be.
  CHECK(check(kValidSft, {"mesh.sp=2"}).diagnostics.empty());
  auto short_rows = check(R"(algorithm = "sft"
[launch]
procs_per_node = 4
[mesh]
sp = 4
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
max_len = 6
)");
  auto d = FIND_DIAGNOSTIC(short_rows.diagnostics, "mesh.sp-sequence", 5, 1);
  REQUIRE(d);
  CHECK(d->message == "sp = 4 cuts each sequence into 2 × sp = 8 chunks, but data.max_len is 6");
  CHECK(d->suggestion == "use sp ≤ 3");
  CHECK(test::with_rule(short_rows.diagnostics, "mesh.sp-sequence").size() == 1);
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"mesh.sp=2", "data.max_len=4"}).diagnostics, "mesh.sp-sequence");
  // PPO's sequences are a prompt and its response.
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"mesh.sp=2"}).diagnostics, "mesh.sp-unsupported");
  constexpr const char* kPpoSp8 = R"(algorithm = "ppo"
[launch]
procs_per_node = 8
[mesh]
sp = 8
[roles.actor]
model = "builtin:tiny"
[roles.reward]
model = "builtin:tiny"
[colocate]
all = true
[rollout]
engines = 8
[ppo]
advantage = "reinforce"
[data]
path = "prompts"
)";
  auto short_rollout = check(kPpoSp8, {"rollout.max_prompt_len=6", "rollout.max_new_tokens=8"});
  const auto errors = test::with_rule(short_rollout.diagnostics, "mesh.sp-sequence");
  REQUIRE(errors.size() == 2);  // actor and reward
  CHECK(errors.front().message ==
        "sp = 8 cuts each sequence into 2 × sp = 16 chunks, but rollout.max_prompt_len + rollout.max_new_tokens is 14");
  CHECK(check(kPpoSp8, {"rollout.max_prompt_len=8", "rollout.max_new_tokens=8"}).diagnostics.empty());
}

TEST_CASE("data.eval-unsupported: an evaluation set only where the algorithm evaluates") {
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"data.eval_path=held_out"}).diagnostics, "data.eval-unsupported");
  auto ppo = check(kValidPpo, {"data.eval_path=held_out"});
  const auto errors = test::with_rule(ppo.diagnostics, "data.eval-unsupported");
  REQUIRE(errors.size() == 1);
  CHECK(errors.front().message == "algorithm \"ppo\" does not evaluate on a held-out set");
  auto missing = check(kValidSft, {"data.eval_path=/no/such/eval.jsonl"});
  CHECK(test::has_rule(missing.diagnostics, "data.path"));
}

TEST_CASE("data.loss-turns-unused: loss_turns is SFT's; elsewhere a choice other than the default warns") {
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"data.loss_turns=last"}).diagnostics, "data.loss-turns-unused");
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"data.loss_turns=all"}).diagnostics, "data.loss-turns-unused");
  auto ppo = check(kValidPpo, {"data.loss_turns=last"});
  const auto warnings = test::with_rule(ppo.diagnostics, "data.loss-turns-unused");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings.front().severity == Severity::warning);
  CHECK(warnings.front().message ==
        "algorithm \"ppo\" does not train on chat samples' assistant turns; data.loss_turns = \"last\" is ignored");
  CHECK(test::has_rule(test::validate_text(kValidSft, {"data.loss_turns=first"}).diagnostics, "schema.choice"));
}

TEST_CASE("lora.target and lora.unsupported: adapters on projections that exist, where they are trained") {
  CHECK(check(kValidSft, {"roles.actor.lora_rank=8"}).diagnostics.empty());
  CHECK(check(kValidSft, {"roles.actor.lora_rank=8", "roles.actor.lora_targets=[\"q_proj\", \"down_proj\"]"})
            .diagnostics.empty());
  auto typo = check(kValidSft, {"roles.actor.lora_rank=8", "roles.actor.lora_targets=[\"q_proj\", \"up_prj\", \"q_proj\"]"});
  const auto targets = test::with_rule(typo.diagnostics, "lora.target");
  REQUIRE(targets.size() == 2);
  CHECK(targets[0].message == "\"up_prj\" names no projection of a Llama-style decoder layer");
  CHECK(targets[0].suggestion == "did you mean \"up_proj\"?");
  CHECK(targets[1].message == "\"q_proj\" is listed twice");
  CHECK(test::has_rule(check(kValidSft, {"roles.actor.lora_rank=8", "roles.actor.lora_targets=[]"}).diagnostics,
                       "lora.target"));
  // Targets are not checked while LoRA is off.
  CHECK(check(kValidSft, {"roles.actor.lora_targets=[\"nothing\"]"}).diagnostics.empty());

  auto ppo = check(kValidPpo, {"roles.actor.lora_rank=8", "roles.critic.lora_rank=4"});
  const auto critic = test::with_rule(ppo.diagnostics, "lora.unsupported");
  REQUIRE(critic.size() == 1);
  CHECK(critic[0].message == "critic is not trained; only the actor's training takes LoRA adapters");
  auto rm = check(kValidSft, {"algorithm=rm", "roles.actor.lora_rank=8"});
  const auto unsupported = test::with_rule(rm.diagnostics, "lora.unsupported");
  REQUIRE(unsupported.size() == 1);
  CHECK(unsupported[0].message == "algorithm \"rm\" does not train LoRA adapters (sft, dpo and ppo do)");
}

TEST_CASE("mesh.product: tp × sp × dp equals the processes") {
  auto broken = check(R"(algorithm = "sft"
[launch]
procs_per_node = 4
[mesh]
dp = 3
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "mesh.product", 5, 1);
  REQUIRE(d);
  CHECK(d->message == "tp × sp × dp = 1 × 1 × 3 = 3, but role actor (1 node × 4) has 4 processes");
  CHECK(d->suggestion == "set dp = 4, or -1 to infer it");

  SUBCASE("when no dp fits, the suggestion is to infer it") {
    auto no_fit = check(R"(algorithm = "sft"
[launch]
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
[roles.actor.mesh]
tp = 3
dp = 1
[data]
path = "prompts"
)");
    auto n = FIND_DIAGNOSTIC(no_fit.diagnostics, "mesh.product", 8, 1);
    REQUIRE(n);
    CHECK(n->suggestion == "set dp = -1 to infer it");
  }
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"mesh.dp=2"}).diagnostics, "mesh.product");
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"mesh.tp=2", "mesh.dp=1"}).diagnostics, "mesh.product");
}

// ---------------------------------------------------------------- batch

TEST_CASE("batch.train-divisible: train is a multiple of micro_train × dp") {
  auto broken = check(R"(algorithm = "sft"
[launch]
procs_per_node = 4
[batch]
micro_train = 3
train = 30
[roles.actor]
model = "builtin:tiny"
[data]
path = "prompts"
)");
  // dp = 4, micro_train × dp = 12; 30 lies between 24 and 36.
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "batch.train-divisible", 6, 1);
  REQUIRE(d);
  CHECK(d->message == "train = 30 is not a multiple of micro_train × dp = 3 × 4 = 12 (role actor)");
  CHECK(d->suggestion == "use train = 24 or 36");

  SUBCASE("train smaller than one step") {
    auto small = check(kValidSft, {"batch.micro_train=4", "batch.train=6"});
    // dp = 2, micro_train × dp = 8.
    auto s = FIND_DIAGNOSTIC(small.diagnostics, "batch.train-divisible", 1, 7);
    REQUIRE(s);
    CHECK(s->suggestion == "use train = 8 or 16");
  }
  SUBCASE("checked for the critic too, in PPO") {
    auto critic = check(kValidPpo, {"roles.critic.procs_per_node=3", "launch.procs_per_node=6"});
    // critic dp = 3 does not divide train = 8; the actor's dp = 1 does.
    auto found = test::with_rule(critic.diagnostics, "batch.train-divisible");
    REQUIRE(found.size() == 1);
    CHECK(found[0].message.find("(role critic)") != std::string::npos);
  }
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"batch.micro_train=2", "batch.train=12"}).diagnostics,
                      "batch.train-divisible");
}

TEST_CASE("batch.rollout-divisible: rollout samples divide by micro_rollout and the actor's dp") {
  auto broken = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 4
[roles.actor]
model = "builtin:tiny"
procs_per_node = 2
[roles.critic]
model = "builtin:tiny"
procs_per_node = 1
[roles.reward]
hook = "score"
[hooks]
script = "/h.lua"
[batch]
micro_rollout = 2
rollout = 3
train = 6
[data]
path = "prompts"
)");
  auto micro = FIND_DIAGNOSTIC(broken.diagnostics, "batch.rollout-divisible", 15, 1);
  REQUIRE(micro);
  CHECK(micro->message == "rollout × n_samples_per_prompt = 3 × 1 = 3 is not divisible by micro_rollout = 2");
  auto dp = FIND_DIAGNOSTIC(broken.diagnostics, "batch.rollout-divisible", 16, 1);
  REQUIRE(dp);
  CHECK(dp->message == "rollout × n_samples_per_prompt = 3 × 1 = 3 is not divisible by the actor's dp = 2");

  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"batch.rollout=3", "batch.n_samples_per_prompt=2",
                                        "batch.micro_rollout=3"})
                          .diagnostics,
                      "batch.rollout-divisible");
  // SFT has no rollout.
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"batch.rollout=3", "batch.micro_rollout=2"}).diagnostics,
                      "batch.rollout-divisible");
}

TEST_CASE("batch.group-samples: rloo and group_norm need several samples per prompt") {
  auto broken = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 3
[roles.actor]
model = "builtin:tiny"
procs_per_node = 1
[roles.reward]
model = "builtin:tiny"
procs_per_node = 1
[ppo]
advantage = "rloo"
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "batch.group-samples", 11, 1);
  REQUIRE(d);
  CHECK(d->message == "advantage \"rloo\" compares the samples of each prompt, but n_samples_per_prompt = 1");
  CHECK(d->suggestion == "set n_samples_per_prompt ≥ 2");

  SUBCASE("located at n_samples_per_prompt when it is set") {
    auto set = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[batch]
n_samples_per_prompt = 1
[ppo]
advantage = "group_norm"
)");
    CHECK_DIAGNOSTIC(set.diagnostics, "batch.group-samples", 5, 1);
  }
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"ppo.advantage=rloo", "batch.n_samples_per_prompt=2"}).diagnostics,
                      "batch.group-samples");
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"ppo.advantage=reinforce"}).diagnostics, "batch.group-samples");
}

TEST_CASE("batch.train-samples: RL samples per step that train does not divide are a warning") {
  auto broken = check(kValidPpo, {"batch.rollout=5", "batch.n_samples_per_prompt=4", "batch.train=8",
                                  "batch.micro_train=1", "batch.micro_rollout=4"});
  const auto found = test::with_rule(broken.diagnostics, "batch.train-samples");
  REQUIRE(found.size() == 1);
  CHECK(found[0].severity == Severity::warning);
  CHECK(found[0].message == "rollout × n_samples_per_prompt = 20 samples per step are not a multiple of train = 8: "
                            "the last 4 of each pass are not trained on");
  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"batch.rollout=4", "batch.n_samples_per_prompt=4", "batch.train=8"}).diagnostics,
                      "batch.train-samples");
}

// ---------------------------------------------------------------- rollout

TEST_CASE("rollout.tp-node: an engine stays on one node") {
  auto broken = check(R"(algorithm = "ppo"
[launch]
type = "slurm"
nodes = 2
procs_per_node = 2
[roles.actor]
model = "builtin:tiny"
[roles.reward]
hook = "score"
[ppo]
advantage = "reinforce"
[hooks]
script = "/h.lua"
[rollout]
tensor_parallel = 4
[colocate]
all = true
[data]
path = "prompts"
)");
  auto d = FIND_DIAGNOSTIC(broken.diagnostics, "rollout.tp-node", 15, 1);
  REQUIRE(d);
  CHECK(d->message ==
        "an engine's tensor_parallel = 4 processes must share one node, but launch.procs_per_node = 2");
  // actor 2 × 2 = 4 processes = one engine of 4: colocation itself is fine.
  CHECK(broken.diagnostics.error_count() == 1);

  CHECK_NO_DIAGNOSTIC(check(kValidPpo, {"rollout.tensor_parallel=4", "launch.procs_per_node=7"}).diagnostics,
                      "rollout.tp-node");
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"rollout.tensor_parallel=4"}).diagnostics, "rollout.tp-node");
}

// ---------------------------------------------------------------- data

TEST_CASE("data.required: a dataset is named") {
  SUBCASE("no [data]: located at algorithm") {
    auto broken = check(R"(algorithm = "sft"
[roles.actor]
model = "builtin:tiny"
)");
    auto d = FIND_DIAGNOSTIC(broken.diagnostics, "data.required", 1, 1);
    REQUIRE(d);
    CHECK(d->message == "algorithm \"sft\" reads a dataset, but data.path is not set");
    CHECK(d->suggestion == "set [data] path to a JSONL file");
  }
  SUBCASE("[data] without path: located at the table") {
    auto broken = check(R"(algorithm = "sft"
[roles.actor]
model = "builtin:tiny"
[data]
input_key = "question"
)");
    CHECK_DIAGNOSTIC(broken.diagnostics, "data.required", 4, 2);
  }
  CHECK_NO_DIAGNOSTIC(check(kValidSft).diagnostics, "data.required");
}

TEST_CASE("data.path: a local dataset file exists") {
  test::TempDir dir;
  dir.write("data/train.jsonl", "{}\n");
  const std::string recipe = dir.write("r.toml", R"(algorithm = "sft"
[roles.actor]
model = "builtin:tiny"
[data]
path = "data/missing.jsonl"
)");
  Diagnostics diagnostics;
  auto loaded = load_recipe(recipe, {}, diagnostics);
  REQUIRE(loaded);
  validate_recipe(*loaded, diagnostics);
  check_recipe_paths(*loaded, diagnostics);  // lint's filesystem part (src/lint/path_lint.cpp)
  auto d = FIND_DIAGNOSTIC(diagnostics, "data.path", 5, 1);
  REQUIRE(d);
  CHECK(d->where.file == recipe);
  // The path is resolved against the recipe's folder, not the working directory.
  CHECK(d->message == "dataset file \"" + (dir / "data/missing.jsonl") + "\" does not exist");

  SUBCASE("an existing file") {
    // --set is relative to the working directory, so name it absolutely.
    Diagnostics absolute;
    auto present = load_recipe(recipe, {Override{"data.path=" + (dir / "data/train.jsonl")}}, absolute);
    REQUIRE(present);
    validate_recipe(*present, absolute);
    check_recipe_paths(*present, absolute);
    CHECK(absolute.empty());
  }
  SUBCASE("a dataset name is not a file") {
    CHECK_NO_DIAGNOSTIC(check(kValidSft, {"data.path=org/prompts"}).diagnostics, "data.path");
  }
  SUBCASE("a folder, a pipe or a dangling link says what it is") {
    std::filesystem::create_directories(dir / "data/a-folder");
    REQUIRE(::mkfifo((dir / "data/a-pipe").c_str(), 0600) == 0);
    std::filesystem::create_symlink(dir / "data/gone", dir / "data/a-link");
    for (const auto& [name, reason] : std::vector<std::pair<std::string, std::string>>{
             {"a-folder", "is a folder, not a file"},
             {"a-pipe", "is not a regular file (a pipe or device)"},
             {"a-link", "is a link to nothing"}}) {
      CAPTURE(name);
      Diagnostics found;
      auto odd = load_recipe(recipe, {Override{"data.path=" + (dir / ("data/" + name))}}, found);
      REQUIRE(odd);
      check_recipe_paths(*odd, found);
      auto wrong = FIND_DIAGNOSTIC(found, "data.path", 1, 6);
      REQUIRE(wrong);
      CHECK(wrong->message == "dataset file \"" + (dir / ("data/" + name)) + "\" " + reason);
    }
  }
}

// ---------------------------------------------------------------- hooks

TEST_CASE("hooks.needs-script: naming a hook function needs a script") {
  auto broken = check(R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[roles.reward]
hook = "score"
[ppo]
advantage = "reinforce"
[hooks]
on_step = "log_step"
[data]
path = "prompts"
)");
  auto step = FIND_DIAGNOSTIC(broken.diagnostics, "hooks.needs-script", 9, 1);
  REQUIRE(step);
  CHECK(step->message == "hooks.on_step names a hook function, but [hooks] script is not set");
  auto reward = FIND_DIAGNOSTIC(broken.diagnostics, "hooks.needs-script", 5, 1);
  REQUIRE(reward);
  CHECK(reward->message == "roles.reward.hook names a hook function, but [hooks] script is not set");
  CHECK(test::with_rule(broken.diagnostics, "hooks.needs-script").size() == 2);

  auto passing = check(R"(algorithm = "ppo"
[launch]
procs_per_node = 2
[roles.actor]
model = "builtin:tiny"
procs_per_node = 1
[roles.reward]
hook = "score"
[ppo]
advantage = "reinforce"
[hooks]
script = "/h.lua"
on_step = "log_step"
reward = "shape"
on_rollout = "look"
[data]
path = "prompts"
)");
  CHECK(passing.diagnostics.empty());
}

// ---------------------------------------------------------------- large counts

TEST_CASE("counts near the int limit are multiplied in 64 bits, never wrapped") {
  // After fuzz/recipe_fuzz.cpp found a wrapped launch.nodes, review of the
  // same arithmetic found nodes × procs_per_node, tp × sp × dp, micro_train ×
  // dp and rollout × n_samples_per_prompt overflowing int with counts that
  // fit (fuzz/regressions/recipe/*-overflow*).
  const auto message_of = [](const Checked& checked, std::string_view rule) {
    const auto found = test::with_rule(checked.diagnostics, rule);
    INFO("all diagnostics:\n" << checked.diagnostics.format());
    REQUIRE(found.size() == 1);
    return found.front().message;
  };
  auto world = check(kValidSft, {"launch.nodes=2147483647"});
  CHECK(message_of(world, "batch.train-divisible") ==
        "train = 8 is not a multiple of micro_train × dp = 1 × 4294967294 = 4294967294 (role actor)");

  auto mesh = check(kValidSft, {"mesh.tp=2147483647", "mesh.sp=2147483647", "mesh.dp=2147483647"});
  CHECK(test::has_rule(mesh.diagnostics, "mesh.product"));

  auto samples = check(kValidPpo, {"batch.rollout=2147483647", "batch.n_samples_per_prompt=2147483647",
                                   "batch.micro_rollout=3"});
  CHECK(message_of(samples, "batch.rollout-divisible").starts_with(
      "rollout × n_samples_per_prompt = 2147483647 × 2147483647 = 4611686014132420609 is not divisible by "
      "micro_rollout = 3"));
  CHECK(message_of(samples, "batch.train-samples")
            .starts_with("rollout × n_samples_per_prompt = 4611686014132420609 samples per step are not a multiple"));

  auto fit = check(kValidPpo, {"rollout.engines=2147483647", "rollout.tensor_parallel=2"});
  CHECK(message_of(fit, "roles.fit").find("engines 2147483647×2 = 4294967294") != std::string::npos);
}

// ---------------------------------------------------------------- all at once

TEST_CASE("every broken rule of a recipe is reported in one run") {
  auto broken = check(R"(algorithm = "ppo"
[launch]
type = "local"
nodes = 2
device = "cpu"
backend = "nccl"
procs_per_node = 2
[mesh]
dp = 3
[roles.actor]
model = "builtin:tiny"
[colocate]
groups = [["actor", "critic"]]
[batch]
n_samples_per_prompt = 1
[ppo]
advantage = "rloo"
)");
  std::vector<std::string> found;
  for (const auto& d : broken.diagnostics.sorted()) found.push_back(d.where.str() + " " + d.rule);
  CHECK(found == std::vector<std::string>{
                     "recipe.toml:1:1 roles.reward-required",
                     "recipe.toml:1:1 data.required",
                     "recipe.toml:3:1 launch.local-nodes",
                     "recipe.toml:4:1 roles.fit",
                     "recipe.toml:6:1 launch.backend-device",
                     "recipe.toml:9:1 mesh.product",
                     "recipe.toml:13:1 colocate.unknown-role",
                     "recipe.toml:15:1 batch.group-samples",
                 });
}


TEST_CASE("output folders under a file are plan.output-folder errors at their keys") {
  test::TempDir dir;
  const std::string blocker = dir.write("blocker", "a file\n").string();
  const std::string text = "algorithm = \"sft\"\n"
                           "[roles.actor]\n"
                           "model = \"builtin:tiny\"\n"
                           "[data]\n"
                           "path = \"prompts\"\n"
                           "[checkpoint]\n"
                           "path = \"" + blocker + "/ckpt\"\n"
                           "output = \"" + blocker + "\"\n"
                           "[logging]\n"
                           "dir = \"" + (dir / "logs/not/yet") + "\"\n";
  Checked checked = check(text);
  CHECK_DIAGNOSTIC(checked.diagnostics, "plan.output-folder", 7, 1);
  auto output = FIND_DIAGNOSTIC(checked.diagnostics, "plan.output-folder", 8, 1);
  REQUIRE(output);
  CHECK(output->message == "checkpoint.output \"" + blocker + "\" needs a folder, but \"" + blocker + "\" is a file");
  CHECK(test::with_rule(checked.diagnostics, "plan.output-folder").size() == 2);
  CHECK_NO_DIAGNOSTIC(check(kValidSft).diagnostics, "plan.output-folder");

  if (::geteuid() != 0) {  // root writes anywhere
    std::filesystem::create_directories(dir / "locked");
    std::filesystem::permissions(dir / "locked", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    Checked locked = check(kValidSft, {"logging.dir=" + (dir / "locked/logs")});
    CHECK(test::has_rule(locked.diagnostics, "plan.output-folder"));
    std::filesystem::permissions(dir / "locked", std::filesystem::perms::owner_all);
  }
}

TEST_CASE("the final model or the logs among the checkpoints are plan.output-folder errors at their keys") {
  test::TempDir dir;
  const std::string run = dir / "run";
  const auto recipe = [&](const std::string& output, const std::string& logs) {
    return "algorithm = \"sft\"\n"
           "[roles.actor]\n"
           "model = \"builtin:tiny\"\n"
           "[data]\n"
           "path = \"prompts\"\n"
           "[checkpoint]\n"
           "path = \"" + run + "/checkpoints\"\n"
           "output = \"" + output + "\"\n"
           "[logging]\n"
           "dir = \"" + logs + "\"\n";
  };
  // Into a sealed checkpoint (global_step_2), and the logs in the root.
  Checked inside = check(recipe(run + "/checkpoints/global_step_2", run + "/./checkpoints/"));
  auto output = FIND_DIAGNOSTIC(inside.diagnostics, "plan.output-folder", 8, 1);
  REQUIRE(output);
  CHECK(output->message.find("is checkpoint.path \"" + run + "/checkpoints\" or inside it") != std::string::npos);
  CHECK_DIAGNOSTIC(inside.diagnostics, "plan.output-folder", 10, 1);
  // Beside them, as the recipes lay a run out: the logs above the
  // checkpoints, the model next to them (a shared prefix is not "inside").
  CHECK_NO_DIAGNOSTIC(check(recipe(run + "/model", run)).diagnostics, "plan.output-folder");
  CHECK_NO_DIAGNOSTIC(check(recipe(run + "/checkpoints-model", run)).diagnostics, "plan.output-folder");
}

TEST_CASE("a tokenizer named by a path that does not exist is data.tokenizer at the key") {
  Checked missing = check(std::string(kValidSft) + "tokenizer = \"/nonexistent/tokenizer\"\n");
  auto d = FIND_DIAGNOSTIC(missing.diagnostics, "data.tokenizer", 8, 1);
  REQUIRE(d);
  CHECK(d->message == "tokenizer /nonexistent/tokenizer: no such file or directory");
  CHECK(test::has_rule(check(kValidSft, {"data.tokenizer=../no-such-folder/tokenizer"}).diagnostics, "data.tokenizer"));
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"data.tokenizer=builtin:bytes"}).diagnostics, "data.tokenizer");
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"data.tokenizer=builtin:tiny"}).diagnostics, "data.tokenizer");
  CHECK(test::has_rule(check(kValidSft, {"data.tokenizer=builtin:typo"}).diagnostics, "data.tokenizer"));
}

// The run loads the tokenizer by the same resolution lint checks, so a name
// the run could not find fails here, not after the workers started.
TEST_CASE("data.tokenizer: a hub name not in the local cache, or a folder without tokenizer files, is refused") {
  Checked uncached = check(kValidSft, {"data.tokenizer=org/some-model"});
  const auto hub = test::with_rule(uncached.diagnostics, "data.tokenizer");
  REQUIRE(hub.size() == 1);
  CHECK(hub[0].message.find("org/some-model") != std::string::npos);
  CHECK(hub[0].message.find("Hugging Face cache") != std::string::npos);

  test::TempDir dir;
  dir.write("weights-only/config.json", "{}");
  Checked bare = check(kValidSft, {"data.tokenizer=" + dir.file("weights-only")});
  const auto folder = test::with_rule(bare.diagnostics, "data.tokenizer");
  REQUIRE(folder.size() == 1);
  CHECK(folder[0].message.find("has neither tokenizer.json nor tokenizer.model") != std::string::npos);
  Checked implicit = check(kValidSft, {"roles.actor.model=" + dir.file("weights-only")});
  const auto actor = test::with_rule(implicit.diagnostics, "data.tokenizer");
  REQUIRE(actor.size() == 1);
  CHECK(actor[0].message.rfind("the data is tokenized with the actor's model, but model directory", 0) == 0);
  // A tokenizer that is there but would not load fails here too, not when
  // the workers start: a file that is no SentencePiece model, a
  // tokenizer.json that does not parse.
  dir.write("with-tokenizer/tokenizer.model", "not a SentencePiece model");
  const auto unloadable =
      test::with_rule(check(kValidSft, {"data.tokenizer=" + dir.file("with-tokenizer")}).diagnostics, "data.tokenizer");
  REQUIRE(unloadable.size() == 1);
  CHECK(unloadable[0].message.rfind("the tokenizer does not load: ", 0) == 0);
  dir.write("broken-json/tokenizer.json", "{\"model\": ");
  const auto broken =
      test::with_rule(check(kValidSft, {"roles.actor.model=" + dir.file("broken-json")}).diagnostics, "data.tokenizer");
  REQUIRE(broken.size() == 1);
  CHECK(broken[0].message.rfind("the data is tokenized with the actor's model, whose tokenizer does not load: ", 0) == 0);
  CHECK_NO_DIAGNOSTIC(check(kValidSft, {"data.tokenizer=builtin:bytes"}).diagnostics, "data.tokenizer");
}

TEST_CASE("rollout.async-engines: asynchronous rollouts need engines on processes of their own") {
  const std::string separate = R"(algorithm = "ppo"
[launch]
procs_per_node = 3
[roles.actor]
model = "builtin:tiny"
procs_per_node = 2
[data]
path = "prompts"
[hooks]
script = "/h.lua"
[ppo]
advantage = "reinforce"
[rollout]
max_staleness = 1
)";
  CHECK(check(separate).diagnostics.empty());
  auto colocated = check(separate + "[colocate]\nall = true\n");
  auto d = FIND_DIAGNOSTIC(colocated.diagnostics, "rollout.async-engines", 14, 1);
  REQUIRE(d);
  CHECK(d->message.find("colocate.all") != std::string::npos);
  auto grouped = check(separate + "[colocate]\ngroups = [[\"actor\", \"rollout\"]]\n");
  REQUIRE(FIND_DIAGNOSTIC(grouped.diagnostics, "rollout.async-engines", 14, 1));
  // The decoupled correction is for asynchronous rollouts only.
  std::string decoupled = separate;
  decoupled.replace(decoupled.find("advantage = \"reinforce\""), 23,
                    "advantage = \"reinforce\"\nrollout_correction = \"decoupled\"");
  CHECK(check(decoupled).diagnostics.empty());
  decoupled.replace(decoupled.find("max_staleness = 1"), 17, "max_staleness = 0");
  REQUIRE(FIND_DIAGNOSTIC(check(decoupled).diagnostics, "ppo.rollout-correction-async", 13, 1));
  // Partial rollouts interrupt asynchronous generation only.
  CHECK(check(separate + "partial = true\n").diagnostics.empty());
  std::string partial_sync = separate + "partial = true\n";
  partial_sync.replace(partial_sync.find("max_staleness = 1"), 17, "max_staleness = 0");
  auto partial = check(partial_sync);
  REQUIRE(partial.diagnostics.items().size() == 1);
  auto p = FIND_DIAGNOSTIC(partial.diagnostics, "rollout.partial-async", 15, 1);
  REQUIRE(p);
  CHECK(p->message.find("max_staleness") != std::string::npos);
}

}  // namespace
}  // namespace meshrun
