// Tests of include/meshrun/plan/settings.hpp: the device, precision and
// learning-rate schedule tables, and the plan resolving the recipe's names
// into them once.
#include <doctest/doctest.h>

#include "meshrun/plan/plan.hpp"
#include "meshrun/plan/settings.hpp"

namespace meshrun {
namespace {

template <class Id, std::size_t N>
void check_table(const SettingRow<Id> (&rows)[N], std::size_t values) {
  REQUIRE(N == values);
  for (std::size_t i = 0; i < N; ++i) {
    CAPTURE(rows[i].name);
    CHECK(static_cast<std::size_t>(rows[i].id) < values);
    CHECK(setting_name(rows[i].id) == rows[i].name);
    for (std::size_t j = 0; j < i; ++j) {
      CHECK(rows[j].id != rows[i].id);
      CHECK(rows[j].name != rows[i].name);
    }
  }
}

TEST_CASE("every setting has one row, and each name round-trips") {
  check_table(kDeviceKinds, 2);
  check_table(kPrecisions, 3);
  check_table(kLrScheduleKinds, 3);
  for (const auto& row : kDeviceKinds) CHECK(device_kind_named(row.name) == row.id);
  for (const auto& row : kPrecisions) CHECK(precision_named(row.name) == row.id);
  for (const auto& row : kLrScheduleKinds) CHECK(lr_schedule_kind_named(row.name) == row.id);
  CHECK_FALSE(device_kind_named("gpu"));
  CHECK_FALSE(precision_named("fp8"));
  CHECK_FALSE(lr_schedule_kind_named("step"));
  CHECK(element_bytes(Precision::fp32) == 4);
  CHECK(element_bytes(Precision::bf16) == 2);
  CHECK(element_bytes(Precision::fp16) == 2);
  for (const ResumePolicy policy : {ResumePolicy::automatic, ResumePolicy::never, ResumePolicy::require})
    CHECK(resume_policy_named(resume_policy_name(policy)) == policy);
  CHECK_FALSE(resume_policy_named("always"));
}

TEST_CASE("the plan resolves dtype, schedule, device, resume and the step's data shape once") {
  Diagnostics diagnostics;
  const auto recipe = load_recipe_text(R"(
algorithm = "sft"
seed = 7
[launch]
device = "cpu"
procs_per_node = 2
[batch]
train = 8
micro_train = 2
[roles.actor]
model = "builtin:tiny"
dtype = "fp16"
lr_scheduler = "linear"
[train]
epochs = 3
[checkpoint]
load = "never"
[data]
path = "d.jsonl"
input_key = "q"
)",
                                       "settings.toml", {}, diagnostics);
  REQUIRE_MESSAGE(recipe, diagnostics.format());
  const Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
  const RolePlan* actor = plan.role(Role::actor);
  REQUIRE(actor);
  CHECK(actor->dtype == Precision::fp16);
  CHECK(actor->optimizer.lr_scheduler == LrScheduleKind::linear);
  CHECK(plan.cluster.device == DeviceKind::cpu);
  CHECK(plan.run.resume == ResumePolicy::never);
  CHECK(plan.algorithm == Algorithm::sft);
  CHECK(plan.step.train_batch == 8);
  CHECK(plan.step.micro_batch == 2);
  CHECK(plan.step.data_epochs == 3);
  CHECK(plan.run.seed == 7);
  CHECK(plan.data.input_key == "q");
  CHECK(plan.data.path == recipe->data.path);
}

}  // namespace
}  // namespace meshrun
