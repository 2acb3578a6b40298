#!/usr/bin/env bash
# agent_test.sh MESHRUN: multi-turn RL with a Lua environment ([env], issue
# #37) end to end with real processes. agent-tiny's guessing game learns
# (its mean reward rises by a set margin) with the env metrics on every
# line and rollout/trainer parity over the policy's tokens only; chat
# prompts continue through the chat template's delta and a resume repeats
# the curve; an environment that errors, runs away (wall clock) or returns
# the wrong shape ends the job on every rank with a located message,
# leaving the checkpoints before it intact; lint refuses a script without
# step.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
RECIPES=$(realpath "$here/../../recipes")
export MR_TIMEOUT=240

mr_init agent

# run_agent NAME [--set ...]: agent-tiny into MR_TMP/NAME, expecting success.
run_agent() {
  local name=$1
  shift
  isolate "$MR_TMP/$name"
  assert_exit 0 "$MESHRUN" "$RECIPES/agent-tiny.toml" "${MR_ISOLATED[@]}" --set logging.steps=1 "$@"
  log "$(grep -o 'reward_mean [-0-9.]* → [-0-9.]*' <<<"$MR_ERR$MR_OUT" | tail -1)"
}

# write_env NAME < BODY: an environment script MR_TMP/envs/NAME.lua; prints its path.
write_env() {
  mkdir -p "$MR_TMP/envs"
  cat >"$MR_TMP/envs/$1.lua"
  echo "$MR_TMP/envs/$1.lua"
}

# write_failing_env NAME: an environment whose episodes fail from the third
# step on (every rank resets 32 episodes a step); prints its path.
write_failing_env() {
  write_env "$1" <<'LUA'
local resets = 0
function reset(ctx) resets = resets + 1 return {} end
function step(state, reply, ctx)
  if resets > 64 then error("the tool server is gone") end
  return {reward = 0, done = true}
end
LUA
}

# check_env_metrics DIR MIN_RISE: the env metrics on every line, parity,
# and the mean reward of the last 10 steps beats the first 10 by MIN_RISE.
check_env_metrics() {
  PYTHONPATH="$MR_LIB" "$MR_PYTHON" - "$1" "$2" <<'PY' || fail "run in $1 does not check out"
import json, math, os, sys
from logprob_parity import check_logprob_parity
run, min_rise = sys.argv[1], sys.argv[2]
records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
assert len(records) >= 20, f"only {len(records)} steps"
keys = ("env/turns_mean", "env/turns_max", "env/done_frac", "env/truncated_frac", "env/observation_tokens_mean",
        "env/observation_cut_frac", "env/reward_mean", "env/step_time_s", "env/time_s")
for i, record in enumerate(records):
    for key in keys:
        value = record.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value), f"line {i + 1}: {key} = {value!r}"
    assert 1 <= record["env/turns_mean"] <= record["env/turns_max"] <= 4, f"line {i + 1}: turns"
    assert abs(record["env/done_frac"] + record["env/truncated_frac"] - 1) < 1e-9, f"line {i + 1}: ends"
    assert record["env/observation_tokens_mean"] > 0, f"line {i + 1}: no observation tokens"
    # Every episode of the game ends with a reward from the environment only.
    assert abs(record["env/reward_mean"] - record["reward_mean"]) < 1e-6, f"line {i + 1}: rewards"
check_logprob_parity(records)
rewards = [r["reward_mean"] for r in records]
first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
print(f"reward {first:.4f} -> {last:.4f} over {len(rewards)} steps")
if min_rise != "-":
    assert last > first + float(min_rise), f"reward did not rise by {min_rise}: {first:.4f} -> {last:.4f}"
PY
}

case_agent_tiny_learns() {
  run_agent learns --set ppo.num_episodes=16
  check_env_metrics "$MR_TMP/learns" 0.12
  # The run report charts the episodes.
  assert_exit 0 "$MESHRUN" report "$MR_TMP/learns"
  grep -q "Episode turns" "$MR_TMP/learns/report.html" || fail "the report has no episode chart"
}

# Chat prompts: the observations go through the built-in chat format's
# delta (role "tool"); a run resumed from its checkpoint repeats the curve.
case_chat_prompts_and_resume() {
  local data=$MR_TMP/chat.jsonl
  "$MR_PYTHON" - "$RECIPES/data/agent_tiny_prompts.jsonl" "$data" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        row = json.loads(line)
        messages = [{"role": "user", "content": row["prompt"]}]
        out.write(json.dumps({"messages": messages, "answer": row["answer"]}) + "\n")
PY
  # A constant learning rate: the schedule's length (max_steps) then
  # changes nothing, so the 3-step run resumed to 6 follows the 6-step run.
  local chat=(--set "data.path=\"$data\"" --set 'data.messages_key="messages"' --set rollout.max_prompt_len=32
              --set env.max_turns=3 --set 'roles.actor.lr_scheduler="constant"')
  run_agent chat-whole "${chat[@]}" --set train.max_steps=6
  check_env_metrics_short "$MR_TMP/chat-whole"
  run_agent chat-resumed "${chat[@]}" --set train.max_steps=3 --set checkpoint.save_steps=3
  run_agent chat-resumed "${chat[@]}" --set train.max_steps=6 --set checkpoint.save_steps=3
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed run's log"
  "$MR_PYTHON" - "$MR_TMP/chat-whole" "$MR_TMP/chat-resumed" <<'PY' || fail "the resumed chat run differs"
import json, sys
runs = [[json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:]]
assert len(runs[0]) == len(runs[1]) == 6, [len(r) for r in runs]
for step, (a, b) in enumerate(zip(*runs), 1):
    for key in ("reward_mean", "env/turns_mean", "env/observation_tokens_mean", "entropy"):
        assert abs(a[key] - b[key]) <= 1e-6 * max(1.0, abs(a[key])), f"step {step} {key}: {a[key]} vs {b[key]}"
PY
}

check_env_metrics_short() {
  PYTHONPATH="$MR_LIB" "$MR_PYTHON" - "$1" <<'PY' || fail "run in $1 does not check out"
import json, os, sys
from logprob_parity import check_logprob_parity
records = [json.loads(line) for line in open(os.path.join(sys.argv[1], "metrics.jsonl"))]
assert records and all(r["env/observation_tokens_mean"] > 0 for r in records), records[0]
check_logprob_parity(records)
PY
}

# Episodes under the other settings of the step: LoRA, sp 2, a ref with
# the KL in the loss (k3), and gae with a critic and the KL in the reward;
# each keeps parity on the policy's tokens.
case_layouts_and_estimators() {
  local short=(--set train.max_steps=4)
  run_agent lora "${short[@]}" --set roles.actor.lora_rank=4
  check_env_metrics_short "$MR_TMP/lora"
  run_agent sp2 "${short[@]}" --set mesh.sp=2
  check_env_metrics_short "$MR_TMP/sp2"
  run_agent kl-loss "${short[@]}" --set 'roles.ref.model="builtin:tiny"' --set 'ppo.kl_mode="loss"' \
    --set 'ppo.kl_estimator="k3"' --set ppo.init_kl_coef=0.01 --set 'ppo.loss_agg="seq-mean-token-sum-norm"'
  check_env_metrics_short "$MR_TMP/kl-loss"
  run_agent gae "${short[@]}" --set 'roles.ref.model="builtin:tiny"' --set 'roles.critic.model="builtin:tiny"' \
    --set 'ppo.advantage="gae"' --set 'ppo.kl_mode="reward"' --set 'ppo.loss_agg="token-mean"'
  check_env_metrics_short "$MR_TMP/gae"
  "$MR_PYTHON" - "$MR_TMP/gae/metrics.jsonl" "$MR_TMP/kl-loss/metrics.jsonl" <<'PY' || fail "no value or KL loss"
import json, math, sys
gae = [json.loads(line) for line in open(sys.argv[1])]
kl = [json.loads(line) for line in open(sys.argv[2])]
assert all(math.isfinite(r["value_loss"]) for r in gae), gae[0]
assert all(math.isfinite(r["kl_loss"]) for r in kl), kl[0]
PY
}

# Episodes under asynchronous rollouts: the engine on a process of its own
# runs the next step's episodes while the actor updates; an environment's
# error there still stops every rank.
ASYNC=(--set launch.procs_per_node=3 --set colocate.all=false --set roles.actor.procs_per_node=2
       --set rollout.engines=1 --set rollout.max_staleness=1)

case_async_episodes() {
  # A slow environment (a slow engine side): the staleness stays 1.
  local slow
  slow=$(write_env slow <<'LUA'
local game = dofile("RECIPE_ENV")
local env = {}
function env.reset(ctx) return game.reset(ctx) end
function env.step(state, reply, ctx)
  local spin = 0
  for i = 1, 200000 do spin = spin + i end
  return game.step(state, reply, ctx)
end
return env
LUA
)
  cp "$RECIPES/hooks/agent_tiny_env.lua" "$MR_TMP/envs/game.lua"
  sed -i "s|RECIPE_ENV|$MR_TMP/envs/game.lua|" "$slow"
  run_agent async "${ASYNC[@]}" --set train.max_steps=4 --set "env.script=\"$slow\""
  "$MR_PYTHON" - "$MR_TMP/async/metrics.jsonl" <<'PY' || fail "async episodes"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert [r["async/staleness_max"] for r in records] == [0, 1, 1, 1], records
assert all(r["env/turns_mean"] >= 1 and r["env/observation_tokens_mean"] > 0 for r in records)
PY
  local script
  script=$(write_failing_env async_broken)
  isolate "$MR_TMP/async-broken"
  assert_exit 1 "$MESHRUN" "$RECIPES/agent-tiny.toml" "${MR_ISOLATED[@]}" "${ASYNC[@]}" \
    --set "env.script=\"$script\"" --set train.max_steps=6
  assert_contains "$MR_ERR$MR_OUT" "async_broken.lua:4" "the async run's output"
  assert_contains "$MR_ERR$MR_OUT" "hook env failed on rank 2" "the async run's output"
  # Partial rollouts: episodes resume on the new weights mid-episode; a
  # failing environment's rank still joins the weights' copy, then every
  # rank stops with its error.
  run_agent async-partial "${ASYNC[@]}" --set rollout.partial=true --set train.max_steps=4 \
    --set "env.script=\"$slow\""
  "$MR_PYTHON" - "$MR_TMP/async-partial/metrics.jsonl" <<'PY' || fail "partial episodes"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert len(records) == 4 and all(r["async/staleness_max"] <= 1 for r in records), records
assert all(0 <= r["async/partial_frac"] <= 1 for r in records), records
assert all(r["env/turns_mean"] >= 1 for r in records), records
print("partial_frac", [r["async/partial_frac"] for r in records])
PY
  isolate "$MR_TMP/async-partial-broken"
  assert_exit 1 "$MESHRUN" "$RECIPES/agent-tiny.toml" "${MR_ISOLATED[@]}" "${ASYNC[@]}" --set rollout.partial=true \
    --set "env.script=\"$script\"" --set train.max_steps=6
  assert_contains "$MR_ERR$MR_OUT" "async_broken.lua:4" "the partial run's output"
  assert_contains "$MR_ERR$MR_OUT" "hook env failed on rank 2" "the partial run's output"
}

# expect_env_failure NAME SCRIPT TEXT...: agent-tiny with SCRIPT as its
# environment and a checkpoint after every step fails with exit 1 and
# every TEXT in its output; the checkpoints it wrote verify.
expect_env_failure() {
  local name=$1 script=$2
  shift 2
  isolate "$MR_TMP/$name"
  assert_exit 1 "$MESHRUN" "$RECIPES/agent-tiny.toml" "${MR_ISOLATED[@]}" --set "env.script=\"$script\"" \
    --set train.max_steps=6 --set checkpoint.save_steps=1 --set env.timeout_s=1
  local text
  for text in "$@"; do assert_contains "$MR_ERR$MR_OUT" "$text" "output of $name"; done
  assert_contains "$MR_ERR$MR_OUT" "[rank 1]" "rank 1's report of $name"
  if [[ -d $MR_TMP/$name/checkpoints ]]; then
    assert_exit 0 "$MESHRUN" ckpt inspect "$MR_TMP/$name/checkpoints"
    assert_contains "$MR_OUT" "global_step_2" "the checkpoints before the failure"
  fi
}

case_env_error() {
  local script
  script=$(write_failing_env broken)
  expect_env_failure broken "$script" "broken.lua:4" "the tool server is gone" "episode of sample" \
    "hook env failed on rank"
}

case_runaway_env() {
  local script
  script=$(write_env runaway <<'LUA'
local steps = 0
function reset(ctx) return {} end
function step(state, reply, ctx)
  steps = steps + 1
  if steps > 100 then while true do end end
  return {reward = 0, done = true}
end
LUA
)
  local started=$SECONDS
  expect_env_failure runaway "$script" "runaway.lua" "step"
  ((SECONDS - started < 120)) || fail "the runaway environment took $((SECONDS - started)) s to stop"
}

case_wrong_shape() {
  local script
  script=$(write_env shape <<'LUA'
function reset(ctx) return nil end
function step(state, reply, ctx) return {observation = 7, done = false} end
LUA
)
  expect_env_failure shape "$script" "shape.lua:2" "its observation is a number, expected a string or nil" \
    "episode of sample"
}

case_lint_refuses() {
  local script
  script=$(write_env half <<'LUA'
function reset(ctx) return {} end
LUA
)
  assert_exit 1 "$MESHRUN" lint "$RECIPES/agent-tiny.toml" --set "env.script=\"$script\""
  assert_contains "$MR_OUT$MR_ERR" "[env.script]" "lint's output"
  assert_contains "$MR_OUT$MR_ERR" "no function 'step'" "lint's output"
  assert_exit 0 "$MESHRUN" plan "$RECIPES/agent-tiny.toml"
  assert_contains "$MR_OUT" "Episodes: " "the plan"
}

run_case "agent-tiny: the guessing game learns, env metrics on every line, parity on policy tokens" case_agent_tiny_learns
run_case "chat prompts continue through the template's delta; a resume repeats the curve" case_chat_prompts_and_resume
run_case "episodes with LoRA, sp 2, KL in the loss, gae with a critic" case_layouts_and_estimators
run_case "episodes under asynchronous rollouts; an env error there stops every rank" case_async_episodes
run_case "an environment error stops every rank with its line and sample; checkpoints stay" case_env_error
run_case "a runaway environment is stopped by its timeout" case_runaway_env
run_case "a step result of the wrong shape is a located error" case_wrong_shape
run_case "lint refuses an environment without step" case_lint_refuses
mr_finish
