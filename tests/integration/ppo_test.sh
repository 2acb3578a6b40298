#!/usr/bin/env bash
# ppo_test.sh MESHRUN: PPO end to end with real processes. The quickstart
# (2 local workers, colocated roles, group_norm, Lua reward) raises its mean
# reward; 4 workers with every role on ranks of its own (actor dp 2, ref,
# rollout engine; then actor, critic with gae, ref, engine) complete and the
# first improves its reward; every role at sp 2 (and a resume into it)
# equals sp 1; the same binary with two reward scripts sees
# two different rewards; on_rollout drops samples and on_step adds metrics;
# a hook error, a sandbox violation and a runaway hook each end the job on
# every rank with the right message and a non-zero exit.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
RECIPES=$(realpath "$here/../../recipes")
export MR_TIMEOUT=240

mr_init ppo

# run_ppo NAME RECIPE [--set ...]: runs into MR_TMP/NAME, expecting success.
run_ppo() {
  local name=$1 recipe=$2
  shift 2
  local run=$MR_TMP/$name
  isolate "$run"
  assert_exit 0 "$MESHRUN" "$recipe" "${MR_ISOLATED[@]}" --set logging.steps=1 "$@"
  log "$(grep -o 'reward_mean [-0-9.]* → [-0-9.]*' <<<"$MR_ERR$MR_OUT" | tail -1)"
}

# check_metrics DIR MIN_RISE: every PPO metric on every line, consecutive
# steps, and the mean reward of the last 3 steps beats the first 3 by
# MIN_RISE (absolute; not checked when MIN_RISE is "-").
check_metrics() {
  PYTHONPATH="$MR_LIB" "$MR_PYTHON" - "$1" "$2" <<'PY' || fail "run in $1 does not check out"
import json, math, os, sys
from logprob_parity import check_logprob_parity
run, min_rise = sys.argv[1], sys.argv[2]
records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
assert len(records) >= 6, f"only {len(records)} steps"
keys = ("reward_mean", "reward_std", "kl", "policy_loss", "clip_frac", "entropy", "response_len",
        "rollout_tokens_per_s", "train_tokens_per_s", "time/rollout", "time/train",
        "logprob_diff_max", "logprob_diff_mean")
for i, record in enumerate(records):
    for key in keys:
        value = record.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value), f"line {i + 1}: {key} = {value!r}"
    assert record["step"] == i + 1, f"line {i + 1} has step {record['step']}"
    # The engines' slots and the response-length distribution (#36).
    busy = record["rollout/slot_utilization"]
    assert 0 < busy <= 1, f"line {i + 1}: rollout/slot_utilization = {busy}"
    assert record["rollout/prefix_shared_tokens"] >= 0, f"line {i + 1}: prefix_shared_tokens"
    assert record["rollout/kv_peak_blocks"] > 0, f"line {i + 1}: kv_peak_blocks"
    assert record["rollout/preemptions"] >= 0, f"line {i + 1}: preemptions"
    p50, p90, longest = record["response_len/p50"], record["response_len/p90"], record["response_len/max"]
    assert 0 < p50 <= p90 <= longest, f"line {i + 1}: response lengths {p50}, {p90}, {longest}"
    assert p50 <= longest and record["response_len"] <= longest, f"line {i + 1}: mean length above the max"
check_logprob_parity(records)  # lib/logprob_parity.py
rewards = [r["reward_mean"] for r in records]
first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
print(f"reward {first:.4f} -> {last:.4f} over {len(rewards)} steps")
if min_rise != "-":
    assert last > first + float(min_rise), f"reward did not rise by {min_rise}: {first:.4f} -> {last:.4f}"
assert os.path.isfile(os.path.join(run, "model", "config.json")), "no actor model written"
PY
}

# write_separate_recipe DIR ADVANTAGE WITH_CRITIC: a prompt file, the
# quickstart's reward script and a 4-process recipe with every role on
# ranks of its own, in DIR.
write_separate_recipe() {
  local dir=$1 advantage=$2 critic=$3
  mkdir -p "$dir"
  cp "$RECIPES/data/quickstart_prompts.jsonl" "$dir/prompts.jsonl"
  cp "$RECIPES/hooks/quickstart_reward.lua" "$dir/reward.lua"
  local actor_procs=2 critic_table=""
  if [[ $critic == yes ]]; then
    actor_procs=1
    critic_table=$'[roles.critic]\nmodel = "builtin:tiny"\ndtype = "fp32"\nprocs_per_node = 1\nlearning_rate = 3e-3\n'
  fi
  cat >"$dir/ppo.toml" <<TOML
name = "ppo-separate"
algorithm = "ppo"
seed = 11
[launch]
type = "local"
procs_per_node = 4
device = "cpu"
backend = "gloo"
timeout_minutes = 3
[batch]
micro_train = 8
train = 32
micro_rollout = 16
rollout = 16
n_samples_per_prompt = 4
[roles.actor]
model = "builtin:tiny"
dtype = "fp32"
procs_per_node = $actor_procs
learning_rate = 3e-3
$critic_table
[roles.ref]
model = "builtin:tiny"
dtype = "fp32"
procs_per_node = 1
[rollout]
engines = 1
max_prompt_len = 32
max_new_tokens = 16
[ppo]
advantage = "$advantage"
init_kl_coef = 0.01
num_episodes = 4
[data]
path = "prompts.jsonl"
input_key = "prompt"
[hooks]
script = "reward.lua"
TOML
}

# write_hook NAME < BODY: a hook script MR_TMP/hooks/NAME.lua; prints its path.
write_hook() {
  mkdir -p "$MR_TMP/hooks"
  cat >"$MR_TMP/hooks/$1.lua"
  echo "$MR_TMP/hooks/$1.lua"
}

case_quickstart() {
  run_ppo quickstart "$RECIPES/quickstart.toml"
  check_metrics "$MR_TMP/quickstart" 0.2
}

case_separate_group_norm() {
  write_separate_recipe "$MR_TMP/separate" group_norm no
  run_ppo separate "$MR_TMP/separate/ppo.toml"
  check_metrics "$MR_TMP/separate" 0.02
}

case_separate_gae() {
  write_separate_recipe "$MR_TMP/gae" gae yes
  run_ppo gae "$MR_TMP/gae/ppo.toml" --set ppo.num_episodes=2
  check_metrics "$MR_TMP/gae" -
  "$MR_PYTHON" - "$MR_TMP/gae/metrics.jsonl" <<'PY' || fail "no value loss in the gae run"
import json, math, sys
losses = [json.loads(line)["value_loss"] for line in open(sys.argv[1])]
assert all(math.isfinite(v) and v >= 0 for v in losses), losses
PY
}

# same_curves DIR_A DIR_B: equal per-step reward, kl and policy loss.
same_curves() {
  "$MR_PYTHON" - "$1" "$2" <<'PY' || fail "runs $1 and $2 differ"
import json, sys
runs = [[json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:]]
assert len(runs[0]) == len(runs[1]) > 0, [len(r) for r in runs]
for step, (a, b) in enumerate(zip(*runs), 1):
    for key in ("reward_mean", "kl", "policy_loss", "entropy"):
        assert abs(a[key] - b[key]) <= 1e-6 * max(1.0, abs(a[key])), f"step {step} {key}: {a[key]} vs {b[key]}"
PY
}

case_sleep_and_determinism() {
  run_ppo awake "$RECIPES/quickstart.toml" --set colocate.sleep=false --set train.max_steps=4
  run_ppo asleep "$RECIPES/quickstart.toml" --set colocate.sleep=true --set train.max_steps=4
  same_curves "$MR_TMP/awake" "$MR_TMP/asleep"
}

case_tensor_parallel() {
  run_ppo tp "$RECIPES/quickstart.toml" --set launch.procs_per_node=4 --set mesh.tp=2 \
    --set rollout.tensor_parallel=2 --set train.max_steps=8
  check_metrics "$MR_TMP/tp" -
  # The layout changes no number: the first step (same weights, same
  # samples) equals the 2-worker quickstart's.
  if [[ -f $MR_TMP/asleep/metrics.jsonl ]]; then
    mkdir -p "$MR_TMP/tp-first" "$MR_TMP/dp-first"
    head -n 1 "$MR_TMP/tp/metrics.jsonl" >"$MR_TMP/tp-first/metrics.jsonl"
    head -n 1 "$MR_TMP/asleep/metrics.jsonl" >"$MR_TMP/dp-first/metrics.jsonl"
    same_curves "$MR_TMP/dp-first" "$MR_TMP/tp-first"
  fi
}

# Parity with engines of tp 2 beside an actor of tp 1 (dp 2): the engines'
# log-probs of their own tokens equal the actor's (check_metrics bounds
# logprob_diff_mean and logprob_diff_max).
case_engines_tp2_parity() {
  run_ppo engines_tp2 "$RECIPES/quickstart.toml" --set rollout.engines=1 --set rollout.tensor_parallel=2 \
    --set train.max_steps=6
  check_metrics "$MR_TMP/engines_tp2" -
}

case_kill_and_resume() {
  run_ppo straight "$RECIPES/quickstart.toml" --set train.max_steps=16 --set checkpoint.save_steps=4 \
    --set checkpoint.save_hf=true
  [[ -f $MR_TMP/straight/checkpoints/global_step_16/hf/actor/config.json ]] || fail "save_hf wrote no actor"
  [[ -f $MR_TMP/straight/checkpoints/global_step_16/hf/actor/generation_config.json ]] ||
    fail "save_hf's actor folder has no generation_config.json"
  local run=$MR_TMP/killed
  setsid "$MESHRUN" "$RECIPES/quickstart.toml" --set "logging.dir=$run" --set logging.steps=1 \
    --set "checkpoint.output=$run/model" --set "checkpoint.path=$run/checkpoints" --set train.max_steps=16 \
    --set checkpoint.save_steps=4 --set checkpoint.save_hf=true --set "launch.master_port=$(free_port)" \
    >"$MR_TMP/killed.log" 2>&1 &
  local pid=$!
  wait_until 60 "the step 8 checkpoint" test -d "$run/checkpoints/global_step_8" || fail "no checkpoint at step 8"
  kill -9 -- "-$pid"
  wait "$pid" || true
  log "killed after $(wc -l <"$run/metrics.jsonl") logged steps"
  run_ppo killed "$RECIPES/quickstart.toml" --set train.max_steps=16 --set checkpoint.save_steps=4 \
    --set checkpoint.save_hf=true
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed run's log"
  same_curves "$MR_TMP/straight" "$run"
  cmp -s "$MR_TMP/straight/model/model.safetensors" "$run/model/model.safetensors" || fail "final actor weights differ"
}

# The straight run's step-8 checkpoint (actor dp 2, ZeRO 0) resumed with the
# actor at ZeRO-2 and asynchronous saving: it reshards, step 9's rollout is
# the straight run's (the weights and random state came back exactly), it
# finishes every step and its async checkpoints verify.
case_reshard_and_async() {
  [[ -f $MR_TMP/straight/metrics.jsonl ]] || run_ppo straight "$RECIPES/quickstart.toml" --set train.max_steps=16 \
    --set checkpoint.save_steps=4 --set checkpoint.save_hf=true
  local run=$MR_TMP/resharded
  mkdir -p "$run/checkpoints"
  cp -r "$MR_TMP/straight/checkpoints/global_step_8" "$run/checkpoints/"
  head -n 8 "$MR_TMP/straight/metrics.jsonl" >"$run/metrics.jsonl"
  run_ppo resharded "$RECIPES/quickstart.toml" --set train.max_steps=16 --set checkpoint.save_steps=4 \
    --set roles.actor.zero_stage=2 --set checkpoint.async=true
  assert_contains "$MR_ERR" "resharding" "the resumed run's log"
  assert_contains "$MR_ERR" "written in the background" "the resumed run's log"
  "$MR_PYTHON" - "$MR_TMP/straight" "$run" <<'PY' || fail "the resharded run does not continue the straight one"
import json, sys
a, b = ([json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:])
assert [r["step"] for r in b] == list(range(1, 17)), [r["step"] for r in b]
for key in ("reward_mean", "response_len"):
    assert a[8][key] == b[8][key], (key, a[8][key], b[8][key])
PY
  assert_exit 0 "$MESHRUN" ckpt inspect "$run/checkpoints"
  assert_contains "$MR_OUT" "global_step_16  ok" "ckpt inspect"
}

# close_curves DIR_A DIR_B STEPS: the first STEPS steps of two runs whose
# layouts differ (float sums in another order) agree within 1e-5 relative:
# rewards, KL, losses, entropy and, where logged, value loss.
close_curves() {
  "$MR_PYTHON" - "$1" "$2" "$3" <<'PY' || fail "runs $1 and $2 differ"
import json, sys
steps = int(sys.argv[3])
runs = [[json.loads(line) for line in open(run + "/metrics.jsonl")][:steps] for run in sys.argv[1:3]]
assert len(runs[0]) == len(runs[1]) == steps, [len(r) for r in runs]
for step, (a, b) in enumerate(zip(*runs), 1):
    for key in ("reward_mean", "kl", "policy_loss", "entropy", "response_len", "value_loss", "model_reward_mean"):
        if key not in a and key not in b:
            continue
        assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, abs(a[key])), f"step {step} {key}: {a[key]} vs {b[key]}"
print(f"{steps} steps agree")
PY
}

# The actor and ref at sp 2 (dp 1: every sequence split over both
# workers) against the dp 2 quickstart: the same samples, rewards, losses
# and entropies, and checkpoints that say the layout.
case_actor_sp2() {
  run_ppo sp2 "$RECIPES/quickstart.toml" --set mesh.sp=2 --set train.max_steps=6 --set checkpoint.save_steps=6
  check_metrics "$MR_TMP/sp2" -
  grep -q 'actor dp 1 sp 2 tp 1' "$MR_TMP/sp2/checkpoints/global_step_6/manifest.json" ||
    fail "the checkpoint's layout does not name sp 2"
  # The same step count: it sets the learning-rate schedule.
  run_ppo sp1 "$RECIPES/quickstart.toml" --set train.max_steps=6
  close_curves "$MR_TMP/sp1" "$MR_TMP/sp2" 6
}

# Every kind of role split over sp: a gae critic (values, value loss), a
# reward model (its score at the last token, on whichever sp rank holds
# it), actor and ref, dp 2 × sp 2 on 4 workers, against dp 4.
case_critic_and_reward_model_sp2() {
  local roles=(--set launch.procs_per_node=4 --set rollout.engines=4 --set ppo.advantage=gae --set roles.critic.model=builtin:tiny
               --set roles.critic.dtype=fp32 --set roles.reward.model=builtin:tiny --set roles.reward.dtype=fp32
               --set train.max_steps=3)
  run_ppo roles_dp4 "$RECIPES/quickstart.toml" "${roles[@]}"
  run_ppo roles_sp2 "$RECIPES/quickstart.toml" "${roles[@]}" --set mesh.sp=2
  "$MR_PYTHON" - "$MR_TMP/roles_sp2/metrics.jsonl" <<'PY' || fail "the sp 2 run lacks the critic's or reward model's metrics"
import json, math, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert len(records) == 3, len(records)
for r in records:
    assert math.isfinite(r["value_loss"]) and r["value_loss"] > 0, r
    assert r["model_reward_mean"] != 0, r
PY
  close_curves "$MR_TMP/roles_dp4" "$MR_TMP/roles_sp2" 3
}

# The straight run's step-8 checkpoint (sp 1) resumed with actor and ref at
# sp 2: it reshards, step 9 samples what the straight run sampled and the
# two go on together.
case_resume_into_sp2() {
  [[ -f $MR_TMP/straight/metrics.jsonl ]] || run_ppo straight "$RECIPES/quickstart.toml" --set train.max_steps=16 \
    --set checkpoint.save_steps=4 --set checkpoint.save_hf=true
  local run=$MR_TMP/into_sp2
  mkdir -p "$run/checkpoints"
  cp -r "$MR_TMP/straight/checkpoints/global_step_8" "$run/checkpoints/"
  head -n 8 "$MR_TMP/straight/metrics.jsonl" >"$run/metrics.jsonl"
  run_ppo into_sp2 "$RECIPES/quickstart.toml" --set train.max_steps=16 --set checkpoint.save_steps=4 \
    --set mesh.sp=2
  assert_contains "$MR_ERR" "resharding" "the resumed run's log"
  "$MR_PYTHON" - "$MR_TMP/straight" "$run" <<'PY' || fail "the sp 2 resume does not continue the straight run"
import json, sys
a, b = ([json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:])
assert [r["step"] for r in b] == list(range(1, 17)), [r["step"] for r in b]
for key in ("reward_mean", "response_len"):
    assert a[8][key] == b[8][key], (key, a[8][key], b[8][key])
for step in (8, 9, 10):
    for key in ("reward_mean", "kl", "policy_loss", "entropy"):
        assert abs(a[step][key] - b[step][key]) <= 1e-5 * max(1.0, abs(a[step][key])), (step + 1, key, a[step][key], b[step][key])
PY
}

case_grpo_tiny() {
  run_ppo grpo "$RECIPES/grpo-tiny.toml"
  check_metrics "$MR_TMP/grpo" 0.3
  "$MR_PYTHON" - "$MR_TMP/grpo/metrics.jsonl" <<'PY' || fail "grpo-tiny's KL loss is missing"
import json, math, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert all(math.isfinite(r["kl_loss"]) for r in records), records[0]
PY
}

# GRPO on a mixture of experts (builtin:tiny-moe) with engines of tp 2
# (each expert split over the engine): parity between the engines and the
# trainer within the bound, moe/aux_loss and moe/expert_load_max on every
# step, and the same run with the actor at ep 2; a dense Gemma 2
# (soft-capped logits in the engine and the fused head alike) likewise.
case_grpo_moe_and_gemma2() {
  local model
  for model in tiny-moe tiny-gemma2; do
    run_ppo "grpo_$model" "$RECIPES/grpo-tiny.toml" --set "roles.actor.model=\"builtin:$model\"" \
      --set rollout.tensor_parallel=2 --set rollout.engines=1 --set train.max_steps=6
    check_metrics "$MR_TMP/grpo_$model" -
  done
  # The actor at ep 2 (its experts split over its 2 dp ranks, gathered
  # whole for the engines) with routing replay (the engines' expert choices
  # exchanged with the samples and forced in the actor's forwards): the
  # same run, since on CPU fp32 no route flips (moe/routing_flips 0).
  run_ppo grpo_moe_ep2 "$RECIPES/grpo-tiny.toml" --set 'roles.actor.model="builtin:tiny-moe"' \
    --set rollout.tensor_parallel=2 --set rollout.engines=1 --set train.max_steps=6 --set mesh.ep=2 \
    --set ppo.routing_replay=true
  "$MR_PYTHON" - "$MR_TMP/grpo_tiny-moe/metrics.jsonl" "$MR_TMP/grpo_moe_ep2/metrics.jsonl" <<'PY' || fail "the MoE run lacks its router metrics, or ep 2 differs"
import json, sys
records, split = ([json.loads(line) for line in open(path)] for path in sys.argv[1:])
for record in records:
    assert record["moe/aux_loss"] > 0 and record["moe/expert_load_max"] >= 1.0, record
assert len(split) == len(records) == 6, (len(split), len(records))
for a, b in zip(records, split):
    for key in ("reward_mean", "kl_loss", "moe/aux_loss", "logprob_diff_max"):
        assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, abs(a[key])), (key, a[key], b[key])
    assert b["moe/routing_flips"] == 0 and "moe/routing_flips" not in a, (a, b)
    assert 0.9 < b["moe/replayed_routes"] < 1, b  # every fed token's routes replayed
PY
  # Routing replay on a dense actor is refused.
  assert_exit 1 "$MESHRUN" lint "$RECIPES/grpo-tiny.toml" --set ppo.routing_replay=true
  assert_contains "$MR_OUT$MR_ERR" "[ppo.routing-replay]" "lint's output"
}

# Rollout correction: tis and icepop train; the engines and the trainer
# agree on CPU fp32, so the ratios stay at 1 and nothing is clipped or
# masked; every step logs the rollout_is figures.
case_rollout_correction() {
  local mode
  for mode in tis icepop seq-mask; do
    run_ppo "correction-$mode" "$RECIPES/grpo-tiny.toml" --set "ppo.rollout_correction=\"$mode\"" \
      --set train.max_steps=4
    "$MR_PYTHON" - "$MR_TMP/correction-$mode/metrics.jsonl" <<'PY' || fail "rollout correction $mode's metrics"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert len(records) == 4, len(records)
for r in records:
    assert abs(r["rollout_is/ratio_mean"] - 1) < 1e-3, r["rollout_is/ratio_mean"]
    assert 1 <= r["rollout_is/ratio_max"] < 1.01, r["rollout_is/ratio_max"]
    assert r["rollout_is/clipped_frac"] == 0 and r["rollout_is/masked_frac"] == 0, r
PY
  done
}

# Asynchronous rollouts (rollout.max_staleness): grpo-tiny with the actor
# and ref on 2 processes and its engine on a third, so generation overlaps
# the update.
ASYNC=(--set launch.procs_per_node=3 --set colocate.all=false --set 'colocate.groups=[["actor","ref"]]'
       --set roles.actor.procs_per_node=2 --set roles.ref.procs_per_node=2 --set rollout.engines=1
       --set 'roles.actor.lr_scheduler="constant"')

# check_async DIR BOUND: every step's staleness within BOUND (0 at step 1,
# whose samples come from the initial weights), nothing dropped, the wait
# and overlap figures in range.
check_async() {
  "$MR_PYTHON" - "$1/metrics.jsonl" "$2" <<'PY' || fail "async run in $1 does not check out"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
bound = int(sys.argv[2])
assert len(records) >= 4, len(records)
for r in records:
    assert r["async/staleness_max"] <= bound, r
    assert r["async/staleness_max"] == (0 if r["step"] == 1 else 1), r
    assert r["async/dropped_stale"] == 0, r
    assert 0 <= r["async/overlap_frac"] <= 1, r
    assert r["time/trainer_wait_s"] >= 0 and r["time/engine_wait_s"] >= 0, r
assert all(r["time/generate_ahead_s"] > 0 for r in records), "a step generated nothing ahead"
print("staleness", [r["async/staleness_max"] for r in records])
PY
}

case_async_rollouts() {
  # max_staleness 0 is today's loop: the same numbers as without the key.
  run_ppo sync-default "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" --set train.max_steps=4
  run_ppo sync-zero "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" --set train.max_steps=4 --set rollout.max_staleness=0
  same_curves "$MR_TMP/sync-default" "$MR_TMP/sync-zero"
  # One step ahead: staleness 1, and a 3-step run resumed to 6 is the 6-step run.
  run_ppo async "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" --set rollout.max_staleness=2 --set train.max_steps=6
  check_async "$MR_TMP/async" 2
  run_ppo async-resumed "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" --set rollout.max_staleness=2 \
    --set train.max_steps=3 --set checkpoint.save_steps=3
  run_ppo async-resumed "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" --set rollout.max_staleness=2 \
    --set train.max_steps=6 --set checkpoint.save_steps=3
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed async run's log"
  same_curves "$MR_TMP/async" "$MR_TMP/async-resumed"
  check_async "$MR_TMP/async-resumed" 2
  # LoRA's merged weights reach the engine, and dynamic sampling's further
  # rounds (generated in the step by the current weights) mix versions.
  run_ppo async-lora-ds "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" --set rollout.max_staleness=1 \
    --set roles.actor.lora_rank=4 --set ppo.dynamic_sampling=true --set train.max_steps=4
  "$MR_PYTHON" - "$MR_TMP/async-lora-ds/metrics.jsonl" <<'PY' || fail "async with LoRA and dynamic sampling"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert len(records) == 4 and all(r["async/staleness_max"] <= 1 for r in records), records
assert all(r["dynamic_sampling/rounds"] >= 1 for r in records), records
PY
  # Colocated engines cannot generate while the trainer updates: lint says so.
  assert_exit 1 "$MESHRUN" lint "$RECIPES/grpo-tiny.toml" --set rollout.max_staleness=1
  assert_contains "$MR_OUT$MR_ERR" "[rollout.async-engines]" "lint's output"
  assert_exit 1 "$MESHRUN" lint "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" --set rollout.partial=true
  assert_contains "$MR_OUT$MR_ERR" "[rollout.partial-async]" "lint's output"
}

# Partial rollouts: the update ends while the engine generates (its 64
# samples of up to 64 tokens, 2 live at a time, take several times as long
# as an update, whatever else loads the machine); the interrupted sequences
# resume on the new weights (async/partial_frac), staleness (the oldest
# token's) stays within 1; which tokens each version sampled depends on
# timing, but what a checkpoint holds is trained exactly: step 4 resumed
# from the step-3 checkpoint is the uninterrupted run's step 4.
case_partial_rollouts() {
  local partial=("${ASYNC[@]}" --set rollout.max_staleness=1 --set rollout.partial=true
                 --set rollout.max_new_tokens=64 --set rollout.max_batch=2 --set checkpoint.save_steps=3)
  run_ppo partial "$RECIPES/grpo-tiny.toml" "${partial[@]}" --set train.max_steps=6 --set checkpoint.keep_last=4
  check_async "$MR_TMP/partial" 1
  "$MR_PYTHON" - "$MR_TMP/partial/metrics.jsonl" <<'PY' || fail "partial rollouts interrupted no sequence"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
fractions = [r["async/partial_frac"] for r in records]
assert all(0 <= f <= 1 for f in fractions) and fractions[0] == 0, fractions
assert max(fractions) > 0, fractions
print("partial_frac", fractions)
PY
  # run_ppo's checkpoint.path for partial-resumed is $resumed/checkpoints.
  local resumed=$MR_TMP/partial-resumed
  mkdir -p "$resumed/checkpoints"
  cp -r "$MR_TMP/partial/checkpoints/global_step_3" "$resumed/checkpoints/"
  run_ppo partial-resumed "$RECIPES/grpo-tiny.toml" "${partial[@]}" --set train.max_steps=4
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed partial run's log"
  "$MR_PYTHON" - "$MR_TMP/partial/metrics.jsonl" "$resumed/metrics.jsonl" <<'PY' || fail "step 4 resumed differs"
import json, sys
straight = {json.loads(line)["step"]: json.loads(line) for line in open(sys.argv[1])}
resumed = [json.loads(line) for line in open(sys.argv[2])]
assert [r["step"] for r in resumed] == [4], [r["step"] for r in resumed]
for key in ("reward_mean", "kl", "policy_loss", "entropy", "async/partial_frac", "async/staleness_mean"):
    a, b = straight[4][key], resumed[0][key]
    assert abs(a - b) <= 1e-6 * max(1.0, abs(a)), f"{key}: {a} vs {b}"
PY
}

# The engine's process killed mid-run under async: the job stops naming the
# rank, and the resumed run ends as an uninterrupted one.
case_async_engine_crash() {
  local steps=(--set train.max_steps=24 --set checkpoint.save_steps=4 --set rollout.max_staleness=1)
  run_ppo async-straight "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" "${steps[@]}"
  local run=$MR_TMP/async-crash
  setsid "$MESHRUN" "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" "${steps[@]}" --set "logging.dir=$run" \
    --set logging.steps=1 --set "checkpoint.output=$run/model" --set "checkpoint.path=$run/checkpoints" \
    --set "launch.master_port=$(free_port)" >"$MR_TMP/async-crash.log" 2>&1 &
  local pid=$!
  wait_until 60 "the step 8 checkpoint" test -d "$run/checkpoints/global_step_8" || fail "no checkpoint at step 8"
  local worker killed=no
  for worker in $(pgrep -P "$pid"); do
    if tr '\0' '\n' <"/proc/$worker/environ" 2>/dev/null | grep -qx 'RANK=2'; then
      kill -9 "$worker"
      killed=yes
    fi
  done
  [[ $killed == yes ]] || { kill -9 -- "-$pid"; fail "found no rank 2 worker under the launcher"; }
  local status=0
  wait "$pid" || status=$?
  ((status != 0)) || fail "the job went on without its engine"
  assert_contains "$(cat "$MR_TMP/async-crash.log")" "rank 2" "the crashed job's log"
  log "engine killed after $(wc -l <"$run/metrics.jsonl") logged steps"
  run_ppo async-crash "$RECIPES/grpo-tiny.toml" "${ASYNC[@]}" "${steps[@]}"
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed run's log"
  same_curves "$MR_TMP/async-straight" "$run"
  check_async "$run" 1
}

# A model whose generation_config.json names another eos_token_id (as
# Qwen2.5 base models name <|im_end|>): rollouts stop at it too, and the log
# says which ids end a response.
case_generation_config_stop_ids() {
  local model=$MR_TMP/stop-model
  mkdir -p "$model"
  cp "$RECIPES/data/tiny-base/"* "$model/"
  printf '{"eos_token_id": [257, 10]}\n' >"$model/generation_config.json"
  run_ppo stop_ids "$RECIPES/grpo-tiny.toml" --set "roles.actor.model=\"$model\"" \
    --set "roles.ref.model=\"$model\"" --set 'data.tokenizer="builtin:bytes"' --set ppo.num_episodes=1
  assert_contains "$MR_ERR$MR_OUT" "rollout: responses end at token ids 257, 10" "the run's log"
  printf '{"eos_token_id": "newline"}\n' >"$model/generation_config.json"
  isolate "$MR_TMP/stop_ids_bad"
  assert_exit 1 "$MESHRUN" "$RECIPES/grpo-tiny.toml" "${MR_ISOLATED[@]}" --set "roles.actor.model=\"$model\"" \
    --set "roles.ref.model=\"$model\"" --set 'data.tokenizer="builtin:bytes"' --set ppo.num_episodes=1
  assert_contains "$MR_ERR" "generation_config.json: eos_token_id \"newline\" is not a token id" "the failed run"
}

# The labels of grpo-tiny's prompts reach the reward hook with their own
# prompts through shuffling, dp 2, 4 samples per prompt and a resume, on
# rank 0 and (parallel hooks) on every rank's share.
case_labels_resume() {
  local script
  script=$(write_hook label_check <<'LUA'
function reward(batch)
  local out = {}
  for i = 1, batch.size do
    local asked = batch:prompt_text(i):match("say (%a)%a:$")
    local label = batch:label(i)
    if asked == nil or label ~= asked then
      error(string.format("sample %d: label %s for a prompt asking for %s", i, tostring(label), tostring(asked)))
    end
    out[i] = (batch:response_text(i):byte(1) or 0) / 255
  end
  return out
end
LUA
)
  local parallel
  for parallel in false true; do
    run_ppo "labels-$parallel" "$RECIPES/grpo-tiny.toml" --set "hooks.script=$script" \
      --set batch.n_samples_per_prompt=4 --set batch.train=32 --set batch.micro_rollout=16 \
      --set train.max_steps=2 --set checkpoint.save_steps=2 --set "hooks.parallel=$parallel"
    run_ppo "labels-$parallel" "$RECIPES/grpo-tiny.toml" --set "hooks.script=$script" \
      --set batch.n_samples_per_prompt=4 --set batch.train=32 --set batch.micro_rollout=16 \
      --set train.max_steps=4 --set checkpoint.save_steps=2 --set "hooks.parallel=$parallel"
    assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed run's log"
    assert_eq "$(wc -l <"$MR_TMP/labels-$parallel/metrics.jsonl")" 4 "logged steps"
  done
  # Where each sample's reward is computed changes no number.
  same_curves "$MR_TMP/labels-false" "$MR_TMP/labels-true"
}

# DAPO's dynamic sampling with a reward that is uniform for half the
# prompts: those groups are dropped, more rounds fill the step, and a step
# that runs out of rounds trains on what it has.
case_dynamic_sampling() {
  local script
  script=$(write_hook half_uniform <<'LUA'
function reward(batch)
  local out = {}
  for i = 1, batch.size do
    local label = batch:label(i)
    if label == "a" or label == "e" then out[i] = 1 else out[i] = (batch:response_text(i):byte(1) or 0) / 255 end
  end
  return out
end
LUA
)
  run_ppo dynamic "$RECIPES/grpo-tiny.toml" --set "hooks.script=$script" --set ppo.dynamic_sampling=true \
    --set train.max_steps=3
  run_ppo one_round "$RECIPES/grpo-tiny.toml" --set "hooks.script=$script" --set ppo.dynamic_sampling=true \
    --set ppo.max_sample_rounds=1 --set train.max_steps=2
  assert_contains "$MR_ERR" "dynamic sampling found" "the one-round run's log"
  "$MR_PYTHON" - "$MR_TMP/dynamic/metrics.jsonl" "$MR_TMP/one_round/metrics.jsonl" <<'PY' || fail "dynamic sampling"
import json, sys
dynamic, one = ([json.loads(line) for line in open(path)] for path in sys.argv[1:])
for r in dynamic + one:
    assert r["kept_samples"] == 8 * r["dynamic_sampling/kept_groups"], r
    assert 1 <= r["dynamic_sampling/rounds"] <= 3 and r["dynamic_sampling/dropped_groups"] >= 1, r
assert any(r["dynamic_sampling/rounds"] >= 2 for r in dynamic), [r["dynamic_sampling/rounds"] for r in dynamic]
def mean_kept(records):
    return sum(r["dynamic_sampling/kept_groups"] for r in records) / len(records)
assert mean_kept(dynamic) > mean_kept(one), (mean_kept(dynamic), mean_kept(one))
assert all(r["dynamic_sampling/rounds"] == 1 and r["dynamic_sampling/kept_groups"] < 8 for r in one), one
PY
}

# Dynamic sampling draws prompts faster than one batch per step: when the
# prompts run out before the planned steps, the run shell logs it, keeps
# the last step's row and checkpoints it, and a resume ends at once.
case_dynamic_sampling_runs_out() {
  local script
  script=$(write_hook all_uniform <<'LUA'
function reward(batch)
  local out = {}
  for i = 1, batch.size do out[i] = 1 end
  return out
end
LUA
)
  mkdir -p "$MR_TMP/sixteen"
  head -n 16 "$RECIPES/data/grpo_tiny_prompts.jsonl" >"$MR_TMP/sixteen/prompts.jsonl"
  local flags=(--set "hooks.script=$script" --set ppo.dynamic_sampling=true --set ppo.num_episodes=1
               --set "data.path=$MR_TMP/sixteen/prompts.jsonl")
  run_ppo runs_out "$RECIPES/grpo-tiny.toml" "${flags[@]}"
  assert_contains "$MR_ERR$MR_OUT" "the data ran out after step 1 of 2" "the log"
  assert_contains "$MR_ERR$MR_OUT" "ppo finished: 1 steps of 2 (the data ran out)" "the closing line"
  [[ -f "$MR_TMP/runs_out/checkpoints/global_step_1/manifest.json" ]] || fail "no checkpoint of the last step done"
  assert_eq "$(wc -l <"$MR_TMP/runs_out/metrics.jsonl")" 1 "metrics rows"
  run_ppo runs_out "$RECIPES/grpo-tiny.toml" "${flags[@]}"
  assert_contains "$MR_ERR$MR_OUT" "resuming from" "the resumed run's log"
  assert_contains "$MR_ERR$MR_OUT" "ppo finished: 1 steps of 2 (the data ran out)" "the resumed run's closing line"
  assert_eq "$(wc -l <"$MR_TMP/runs_out/metrics.jsonl")" 1 "metrics rows after the resume"
}

# A run-time failure a recipe key causes prints like lint, at that key.
case_config_error_like_lint() {
  mkdir -p "$MR_TMP/few"
  head -n 4 "$RECIPES/data/grpo_tiny_prompts.jsonl" >"$MR_TMP/few/prompts.jsonl"
  isolate "$MR_TMP/few"
  assert_exit 1 "$MESHRUN" "$RECIPES/grpo-tiny.toml" "${MR_ISOLATED[@]}" --set "data.path=$MR_TMP/few/prompts.jsonl"
  local line
  line=$(grep -n '^rollout = 8' "$RECIPES/grpo-tiny.toml" | cut -d: -f1)
  assert_contains "$MR_ERR$MR_OUT" "grpo-tiny.toml:$line:1: error: the prompt file" "the run's error"
  assert_contains "$MR_ERR$MR_OUT" "fewer than one rollout batch (batch.rollout = 8) [batch.rollout-prompts]" "the run's error"
}

case_two_scripts() {
  local quarter three_quarters
  quarter=$(write_hook quarter <<'LUA'
function reward(batch)
  local out = {}
  for i = 1, batch.size do out[i] = 0.25 end
  return out
end
LUA
)
  three_quarters=$(write_hook three_quarters <<'LUA'
return { reward = function(batch)
  local out = {}
  for i = 1, batch.size do out[i] = 0.75 end
  return out
end }
LUA
)
  run_ppo quarter "$RECIPES/quickstart.toml" --set "hooks.script=$quarter" --set train.max_steps=1
  run_ppo three "$RECIPES/quickstart.toml" --set "hooks.script=$three_quarters" --set train.max_steps=1
  assert_eq "$(json_get "$MR_TMP/quarter/metrics.jsonl" reward_mean)" 0.25 "reward with the first script"
  assert_eq "$(json_get "$MR_TMP/three/metrics.jsonl" reward_mean)" 0.75 "reward with the second script"
}

case_reward_model_and_hook() {
  local script
  script=$(write_hook cancel <<'LUA'
-- Cancels the reward model's score: the total must come out 0.
function reward(batch)
  local out = {}
  for i = 1, batch.size do out[i] = -batch.model_reward[i] end
  return out
end
LUA
)
  run_ppo model_reward "$RECIPES/quickstart.toml" --set "hooks.script=$script" --set 'roles.reward.model="builtin:tiny"' \
    --set roles.reward.dtype=fp32 --set train.max_steps=2
  "$MR_PYTHON" - "$MR_TMP/model_reward/metrics.jsonl" <<'PY' || fail "reward model and hook do not add up"
import json, sys
for r in (json.loads(line) for line in open(sys.argv[1])):
    assert abs(r["model_reward_mean"]) > 1e-4, r
    assert abs(r["hook_reward_mean"] + r["model_reward_mean"]) < 1e-6 and abs(r["reward_mean"]) < 1e-6, r
PY
}

# A reference and a reward model that are not trained, at zero_stage 3:
# each process holds half of their weights (dp 2) and gathers a unit at a
# time, with colocate.sleep moving the shards; every number is the plain
# run's (the gathered weights are the same bits).
case_frozen_roles_zero3() {
  local roles=(--set 'roles.reward.model="builtin:tiny"' --set roles.reward.dtype=fp32 --set train.max_steps=3)
  run_ppo frozen_plain "$RECIPES/quickstart.toml" "${roles[@]}"
  run_ppo frozen_zero3 "$RECIPES/quickstart.toml" "${roles[@]}" --set roles.ref.zero_stage=3 --set roles.reward.zero_stage=3
  assert_contains "$MR_ERR" "ref: ZeRO-3 holds 218752 of its 437504 weight bytes a process" "the ZeRO-3 run's log"
  assert_contains "$MR_ERR" "reward: ZeRO-3 holds" "the ZeRO-3 run's log"
  same_curves "$MR_TMP/frozen_plain" "$MR_TMP/frozen_zero3"
  "$MR_PYTHON" - "$MR_TMP/frozen_plain/metrics.jsonl" "$MR_TMP/frozen_zero3/metrics.jsonl" <<'PY' || fail "the reward model's scores differ"
import json, sys
a, b = ([json.loads(line) for line in open(path)] for path in sys.argv[1:])
assert [r["model_reward_mean"] for r in a] == [r["model_reward_mean"] for r in b], (a, b)
PY
}

case_rollout_and_step_hooks() {
  local script
  script=$(write_hook shaping <<'LUA'
local M = {}
function M.on_rollout(batch)
  for i = 2, batch.size, 2 do batch:drop(i) end
end
function M.reward(batch)
  local out = {}
  for i = 1, batch.size do out[i] = batch.response_len[i] / 100 end
  return out
end
function M.on_step(step, metrics)
  return { seen_step = step, kept_share = metrics.kept_samples / 64 }
end
return M
LUA
)
  run_ppo hooks "$RECIPES/quickstart.toml" --set "hooks.script=$script" --set train.max_steps=2
  "$MR_PYTHON" - "$MR_TMP/hooks/metrics.jsonl" <<'PY' || fail "hook effects missing from the metrics"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert [r["seen_step"] for r in records] == [1, 2], records
assert all(r["kept_samples"] == 32 and r["kept_share"] == 0.5 for r in records), records
PY
}

# expect_hook_failure NAME SCRIPT TEXT...: the job fails, rank 1 reports it
# too, and the output holds each TEXT.
expect_hook_failure() {
  local name=$1 script=$2
  shift 2
  isolate "$MR_TMP/$name"
  assert_exit 1 "$MESHRUN" "$RECIPES/quickstart.toml" "${MR_ISOLATED[@]}" --set "hooks.script=$script" \
    --set train.max_steps=2 --set hooks.instruction_limit=1000000
  local text
  for text in "$@"; do assert_contains "$MR_ERR$MR_OUT" "$text" "output of $name"; done
  assert_contains "$MR_ERR$MR_OUT" "[rank 1]" "rank 1's report of $name"
}

case_hook_error() {
  local script
  script=$(write_hook broken <<'LUA'
function reward(batch)
  local lengths = nil
  return lengths.total
end
LUA
)
  expect_hook_failure broken "$script" "broken.lua:3" "hook reward failed on rank 0, stopping every rank"
}

case_sandbox_violation() {
  local script
  script=$(write_hook escape <<'LUA'
function reward(batch)
  os.execute("touch /tmp/meshrun-sandbox-escaped")
  return {}
end
LUA
)
  expect_hook_failure escape "$script" "escape.lua:2" "os.execute" "sandbox"
}

case_runaway_hook() {
  local script
  script=$(write_hook runaway <<'LUA'
function reward(batch)
  local n = 0
  while true do n = n + 1 end
end
LUA
)
  expect_hook_failure runaway "$script" "instruction limit of 1000000 exceeded" "runaway.lua"
}

run_case "quickstart: 2 workers, colocated roles, the mean reward rises" case_quickstart
run_case "4 workers, roles apart (actor dp 2, ref, engine): completes and improves" case_separate_group_norm
run_case "4 workers, actor, critic (gae), ref, engine apart: completes with value losses" case_separate_gae
run_case "[colocate] sleep changes no number; runs repeat exactly" case_sleep_and_determinism
run_case "ref and reward model at ZeRO-3: sharded weights, the plain run's numbers" case_frozen_roles_zero3
run_case "4 workers: actor and ref tp 2 x dp 2, 2 engines of tp 2" case_tensor_parallel
run_case "engines of tp 2 beside an actor of dp 2: rollout/trainer parity" case_engines_tp2_parity
run_case "kill -9 mid-run and resume: the same curve and actor" case_kill_and_resume
run_case "a checkpoint resumed with the actor at ZeRO-2 and async saving (resharding)" case_reshard_and_async
run_case "actor and ref at sp 2 equal dp 2" case_actor_sp2
run_case "critic, reward model, actor and ref at dp 2 x sp 2 equal dp 4" case_critic_and_reward_model_sp2
run_case "a checkpoint at sp 1 resumed at sp 2 continues the run" case_resume_into_sp2
run_case "grpo-tiny: GRPO with a label-checked reward learns" case_grpo_tiny
run_case "GRPO on a mixture of experts (also at ep 2 with routing replay) and on Gemma 2, engines of tp 2: parity and router metrics" case_grpo_moe_and_gemma2
run_case "rollout correction (tis, icepop, seq-mask) trains and logs rollout_is/*" case_rollout_correction
run_case "asynchronous rollouts: staleness 1 within the bound, exact resume, max_staleness 0 is today's loop" case_async_rollouts
run_case "partial rollouts: sequences resume on the new weights, a checkpoint's round trained exactly" case_partial_rollouts
run_case "asynchronous rollouts: the engine killed mid-run stops the job; the resume ends as a straight run" case_async_engine_crash
run_case "generation_config.json's eos_token_id ends rollouts too; a bad one is a located error" case_generation_config_stop_ids
run_case "labels follow their prompts through shuffle, dp 2, n 4, resume and parallel hooks" case_labels_resume
run_case "dynamic sampling drops uniform groups and samples more" case_dynamic_sampling
run_case "dynamic sampling that runs out of prompts: logged, checkpointed, resumed" case_dynamic_sampling_runs_out
run_case "a recipe-caused run-time failure prints like lint" case_config_error_like_lint
run_case "one binary, two reward scripts, two rewards" case_two_scripts
run_case "a reward model's scores reach the reward hook and add up" case_reward_model_and_hook
run_case "on_rollout drops samples, on_step adds metrics" case_rollout_and_step_hooks
run_case "a hook error stops every rank with the script's line" case_hook_error
run_case "a sandbox violation stops the job" case_sandbox_violation
run_case "a runaway hook is stopped by the instruction limit" case_runaway_hook
mr_finish
