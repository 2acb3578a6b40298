// The shipped 70B recipes, end to end through lint_recipe (file, rules,
// planner): the layout of OpenRLHF's multi-node guide, that it fits as
// shipped, and that its plain form (Adam states on the GPU) does not.
#include <doctest/doctest.h>

#include <string>

#include "meshrun/lint/lint.hpp"

namespace meshrun {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
const std::string kRecipes = std::string(MESHRUN_SOURCE_DIR) + "/recipes/";

bool has_rule(const Diagnostics& diagnostics, const std::string& rule) {
  for (const auto& d : diagnostics.items())
    if (d.rule == rule) return true;
  return false;
}

const FitVerdict* verdict_of(const Plan& plan, const std::string& who) {
  for (const auto& verdict : plan.verdicts)
    if (verdict.who == who) return &verdict;
  return nullptr;
}

TEST_CASE("ppo70b: 4 nodes × 8, a node per role, 2 engines of tp 4 on the actor's node, all fit") {
  LintReport report = lint_recipe(kRecipes + "ppo70b.toml", {});
  INFO(report.diagnostics.format());
  REQUIRE(report.ok());
  REQUIRE(report.plan);
  const Plan& plan = *report.plan;
  CHECK(plan.cluster.world_size() == 32);
  const Role node_of_role[] = {Role::actor, Role::critic, Role::reward, Role::ref};
  for (int node = 0; node < 4; ++node) {
    const RolePlan* role = plan.role(node_of_role[node]);
    REQUIRE(role);
    CHECK(role->ranks.front() == node * 8);
    CHECK(role->ranks.back() == node * 8 + 7);
    CHECK(role->mesh.dp == 8);
    CHECK(role->architecture.name == "Llama-2-70b");
  }
  CHECK(plan.role(Role::actor)->gradient_accumulation == 128 / (2 * 8));
  REQUIRE(plan.engines.size() == 2);
  CHECK(plan.engines[0].ranks == std::vector<int>{0, 1, 2, 3});
  CHECK(plan.engines[1].ranks == std::vector<int>{4, 5, 6, 7});
  for (const auto& verdict : plan.verdicts) {
    INFO(verdict.who);
    CHECK(verdict.fits);
    CHECK(verdict.capacity_bytes == 80 * kGiB);
  }
}

TEST_CASE("ppo70b without optimizer offload does not fit on 80 GiB devices") {
  LintReport report = lint_recipe(kRecipes + "ppo70b.toml",
                                  {{"roles.actor.offload=false"}, {"roles.critic.offload=false"}});
  REQUIRE(report.plan);
  CHECK(has_rule(report.diagnostics, "plan.memory"));
  const RolePlan* actor = report.plan->role(Role::actor);
  REQUIRE(actor);
  // Llama-2-70b: 68,976,648,192 parameters, ZeRO-3 over dp = 8, bf16.
  const int64_t n = 68'976'648'192;
  CHECK(actor->parameter_count == n);
  // ZeRO-3 gathers one decoder layer at a time (855,654,400 parameters):
  // its weights and gradient, the fp32 copies of two being reduced and
  // their outputs (4 / 8 each).
  const int64_t unit = 855'654'400;
  CHECK(actor->memory.parameters == 2 * n / 8 + 2 * unit);            // 17.65 GiB
  CHECK(actor->memory.gradients == 4 * n / 8 + (2 + 8 + 1) * unit);  // the fp32 shard and the unit's: 40.89 GiB
  CHECK(actor->memory.optimizer == 12 * n / 8);  // fp32 master + Adam m, v: 96.36 GiB
  CHECK(actor->memory.optimizer_host == 0);
  CHECK(actor->memory.total() > 80 * kGiB);
  for (const char* who : {"actor", "critic"}) {
    const FitVerdict* verdict = verdict_of(*report.plan, who);
    REQUIRE(verdict);
    CHECK_FALSE(verdict->fits);
    CHECK(verdict->margin_bytes() < -50 * kGiB);  // more than 50 GiB over
  }
  CHECK(verdict_of(*report.plan, "reward")->fits);
  CHECK(verdict_of(*report.plan, "ref")->fits);

  SUBCASE("as shipped, the optimizer states live in CPU memory instead") {
    LintReport shipped = lint_recipe(kRecipes + "ppo70b.toml", {});
    REQUIRE(shipped.plan);
    const RolePlan* offloaded = shipped.plan->role(Role::actor);
    CHECK(offloaded->memory.optimizer == 0);
    CHECK(offloaded->memory.optimizer_host == 12 * n / 8);
    CHECK(offloaded->memory.total() < 80 * kGiB);
  }
}

TEST_CASE("the guide's literal layout (engines on GPUs of their own) needs 40 GPUs, not 32") {
  LintReport report = lint_recipe(kRecipes + "ppo70b.toml", {{"colocate.groups=[]"}});
  CHECK(has_rule(report.diagnostics, "roles.fit"));
  bool names_figures = false;
  for (const auto& d : report.diagnostics.items())
    names_figures = names_figures || (d.rule == "roles.fit" && d.message.find("need 40 processes") != std::string::npos);
  CHECK(names_figures);
}

TEST_CASE("ppo70b-colocated: every model and 4 engines share 2 nodes × 8 and fit with sleep") {
  LintReport report = lint_recipe(kRecipes + "ppo70b-colocated.toml", {});
  INFO(report.diagnostics.format());
  REQUIRE(report.ok());
  REQUIRE(report.plan);
  const Plan& plan = *report.plan;
  CHECK(plan.cluster.world_size() == 16);
  for (const auto& role : plan.roles) CHECK(role.ranks.size() == 16);
  CHECK(plan.engines.size() == 4);
  for (const auto& slot : plan.slots) CHECK(slot.owners.size() == 5);  // four models and an engine
  for (const auto& verdict : plan.verdicts) CHECK(verdict.fits);
}

}  // namespace
}  // namespace meshrun
