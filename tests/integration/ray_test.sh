#!/usr/bin/env bash
# ray_test.sh MESHRUN: `meshrun submit --ray` against a real Ray cluster (the
# ray[default] wheel scripts/setup.sh --test installs in .venv): a head with
# 2 CPUs started in a network namespace of this test's own (only its
# loopback, so Ray's ports and addresses never touch the host's network),
# stopped at the end. sft-tiny and grpo-tiny run as Ray jobs with the same
# curves as under the local launcher; a worker killed mid-run fails the job
# naming its rank, and with max_restarts = 1 the job resumes and ends like an
# uninterrupted run, unless the failure is one a restart would repeat (a
# hook error); a 2-node job spans two Ray nodes in two namespaces; `ray job
# stop` stops every worker; a recipe needing
# more bundles than the cluster has is refused before anything starts.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=lib/netns.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/netns.sh"
mr_meshrun_argument "$0" "$@"
export MR_TIMEOUT=240
mr_init ray
RECIPES=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../recipes" && pwd)
RAY_BIN=$(dirname "$MR_PYTHON")
export RAY_BIN
export ADDRESS=http://127.0.0.1:8265

# in_ray_namespace COMMAND...: COMMAND inside the cluster's namespace, with
# Ray's command on PATH, and every file Ray writes for a client (its
# temporary folder, ~/.ray) inside MR_TMP.
in_ray_namespace() {
  ip netns exec "$MR_RAY_NS" env PATH="$RAY_BIN:$PATH" HOME="$MR_TMP/home" RAY_TMPDIR="$MR_TMP/rt" \
    RAY_USAGE_STATS_ENABLED=0 "$@"
}

# Not `ray stop`: it ends every Ray cluster on the machine, namespaces or
# not; the processes in this cluster's namespace are this test's alone.
ray_cluster_stop() {
  local pids
  pids=$(ip netns pids "$MR_RAY_NS" 2>/dev/null | tr '\n' ' ')
  # shellcheck disable=SC2086
  [[ -n ${pids// /} ]] && mr_kill_pids $pids
  ip netns del "$MR_RAY_NS" 2>/dev/null || true
}

# The head: 2 CPUs, no GPU, its dashboard (the job server) on the
# namespace's loopback.
ray_cluster_start() {
  require_root
  require_cmd ip
  [[ -x $RAY_BIN/ray ]] || skip "no $RAY_BIN/ray: scripts/setup.sh --test installs ray[default]"
  MR_RAY_NS=mr-$$-ray
  export MR_RAY_NS
  printf '%s\n' "$MR_RAY_NS" >>"$MR_TMP/.netns"
  ip netns add "$MR_RAY_NS" || fail "ip netns add $MR_RAY_NS failed"
  mr_on_exit ray_cluster_stop
  ip -n "$MR_RAY_NS" link set lo up || fail "lo up in $MR_RAY_NS"
  mkdir -p "$MR_TMP/home" "$MR_TMP/rt"
  # Not with_timeout: that ends what a command leaves in its process group,
  # and Ray's daemons stay in `ray start`'s (the run's final sweep ends them).
  timeout 120 ip netns exec "$MR_RAY_NS" env PATH="$RAY_BIN:$PATH" HOME="$MR_TMP/home" RAY_TMPDIR="$MR_TMP/rt" \
    RAY_USAGE_STATS_ENABLED=0 ray start --head --node-ip-address=127.0.0.1 --port=6379 \
    --dashboard-host=127.0.0.1 --dashboard-port=8265 --num-cpus=2 --num-gpus=0 --include-dashboard=true \
    --disable-usage-stats --temp-dir="$MR_TMP/rt/ray" >"$MR_TMP/ray-start.log" 2>&1 ||
    fail "ray start failed: $(tail -20 "$MR_TMP/ray-start.log")"
  wait_until 60 "Ray's job server" in_ray_namespace ray list nodes --address "$ADDRESS" ||
    fail "the job server at $ADDRESS does not answer"
  log "ray cluster up in $MR_RAY_NS"
}

# Each job gets folders of its own (never the recipe's runs/).
job_sets() {
  local run=$1
  echo --set "logging.dir=$run" --set logging.steps=1 --set "checkpoint.output=$run/model" \
    --set "checkpoint.path=$run/checkpoints"
}

# submit_ray NAME RECIPE [--set ...]: `meshrun submit --ray --now` in the
# namespace, waiting for the job's end; MR_RC, and the output in
# MR_TMP/NAME.log.
submit_ray() {
  local name=$1 recipe=$2
  shift 2
  MR_RC=0
  # shellcheck disable=SC2046  # job_sets prints words
  (cd "$MR_TMP" && with_timeout 300 bash -c "$(declare -f in_ray_namespace); in_ray_namespace \"\$@\"" _ \
    "$MESHRUN" submit "$recipe" --ray --now --address "$ADDRESS" --script "$MR_TMP/$name.ray.sh" \
    $(job_sets "$MR_TMP/$name") "$@") >"$MR_TMP/$name.log" 2>&1 || MR_RC=$?
}

# same_curve A B KEY: the metrics of two runs agree step by step on KEY
# (logged), or the case fails.
same_curve() {
  "$MR_PYTHON" - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY' || fail "the $3 curves differ ($1, $2)"
import json, sys
a, b = ([json.loads(line) for line in open(path)] for path in sys.argv[1:3])
key = sys.argv[3]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert x["step"] == y["step"], (x["step"], y["step"])
    assert abs(x[key] - y[key]) <= 1e-6 * max(1.0, abs(x[key])), (x["step"], x[key], y[key])
print(f"{len(a)} steps, {key} {a[0][key]:.4f} -> {a[-1][key]:.4f}")
PY
  log "$(basename "$2"): the same $3 curve as $(basename "$1")"
}

# ray_worker_pid RANK: the meshrun worker of RANK that a Ray job started.
ray_worker_pid() {
  local rank=$1 pid environ
  for pid in $(pgrep -f "meshrun" || true); do
    environ=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || continue
    grep -qx "MESHRUN_LAUNCHER=ray" <<<"$environ" || continue
    grep -qx "MR_TAG=$MR_TAG" <<<"$environ" || continue
    grep -qx "RANK=$rank" <<<"$environ" || continue
    echo "$pid"
    return 0
  done
  return 1
}

ray_workers_left() {
  local pid
  for pid in $(pgrep -f "meshrun" || true); do
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "MESHRUN_LAUNCHER=ray" || continue
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "MR_TAG=$MR_TAG" || continue
    echo "$pid"
  done
}

case_sft_and_grpo_curves() {
  ray_cluster_start
  run_recipe sft-local "$RECIPES/sft-tiny.toml"
  # A relative path given to submit resolves in the submitter's folder
  # (MR_TMP), not in the Ray worker's.
  submit_ray sft-ray "$RECIPES/sft-tiny.toml" --set logging.dir=sft-ray-relative
  ((MR_RC == 0)) || fail "the sft job failed ($MR_RC): $(tail -30 "$MR_TMP/sft-ray.log")"
  [[ -s $MR_TMP/sft-ray-relative/metrics.jsonl ]] || fail "logging.dir=sft-ray-relative is not under $MR_TMP"
  mv "$MR_TMP/sft-ray-relative/metrics.jsonl" "$MR_TMP/sft-ray/"
  assert_contains "$(<"$MR_TMP/sft-ray.log")" "[rank 0] " "the job's log"
  assert_contains "$(<"$MR_TMP/sft-ray.log")" "it fits" "the submit's fit check"
  [[ -x $MR_TMP/sft-ray.ray.sh ]] || fail "no submit script written"
  same_curve "$MR_TMP/sft-local" "$MR_TMP/sft-ray" loss

  run_recipe grpo-local "$RECIPES/grpo-tiny.toml"
  submit_ray grpo-ray "$RECIPES/grpo-tiny.toml"
  ((MR_RC == 0)) || fail "the grpo job failed ($MR_RC): $(tail -30 "$MR_TMP/grpo-ray.log")"
  same_curve "$MR_TMP/grpo-local" "$MR_TMP/grpo-ray" reward_mean
  same_curve "$MR_TMP/grpo-local" "$MR_TMP/grpo-ray" entropy
  # The workers knew they ran under Ray.
  assert_contains "$(<"$MR_TMP/grpo-ray.log")" "ray" "the job's log"
}

# A kill -9 of Ray's worker of rank 1 once 24 steps are logged (the step-16
# checkpoint is complete by then: logging.steps = 1, save_steps = 8).
kill_rank_1_mid_run() {
  local name=$1
  wait_until 180 "24 logged steps" \
    bash -c "[[ -f $MR_TMP/$name/metrics.jsonl && \$(wc -l <$MR_TMP/$name/metrics.jsonl) -ge 24 ]]" ||
    fail "the job did not get to step 24: $(tail -20 "$MR_TMP/$name.log")"
  local pid
  pid=$(ray_worker_pid 1) || fail "no Ray worker of rank 1"
  kill -9 "$pid"
  log "killed rank 1 ($pid) after $(wc -l <"$MR_TMP/$name/metrics.jsonl") logged steps"
}

case_killed_worker() {
  ray_cluster_start
  submit_ray killed "$RECIPES/sft-tiny.toml" --set checkpoint.save_steps=8 --set train.epochs=500 \
    --set train.max_steps=100000 &
  local submit=$!
  kill_rank_1_mid_run killed
  wait "$submit" || true
  grep -q "Job '.*' failed" "$MR_TMP/killed.log" || fail "the job did not fail: $(tail -20 "$MR_TMP/killed.log")"
  assert_contains "$(<"$MR_TMP/killed.log")" "[ray] rank 1 was killed by signal 9 (SIGKILL)" "the job's log"
  assert_contains "$(<"$MR_TMP/killed.log")" "exit code 137" "the job's status"
  wait_until 20 "every worker to end" bash -c "[[ -z \"\$($(declare -f ray_workers_left); ray_workers_left)\" ]]" ||
    fail "workers are left: $(ray_workers_left)"

  # With a restart it resumes from the newest checkpoint and ends like a run
  # left alone.
  local settings=(--set checkpoint.save_steps=8 --set train.epochs=64 --set train.max_steps=400)
  run_recipe restart-local "$RECIPES/sft-tiny.toml" "${settings[@]}"
  submit_ray restarted "$RECIPES/sft-tiny.toml" "${settings[@]}" --set launch.max_restarts=1 \
    --set launch.restart_delay=0.5 &
  submit=$!
  kill_rank_1_mid_run restarted
  wait "$submit" || true
  grep -q "Job '.*' succeeded" "$MR_TMP/restarted.log" ||
    fail "the job did not succeed: $(tail -30 "$MR_TMP/restarted.log")"
  assert_contains "$(<"$MR_TMP/restarted.log")" "restarting the workers" "the job's log"
  assert_contains "$(<"$MR_TMP/restarted.log")" "resuming from" "the job's log"
  same_curve "$MR_TMP/restart-local" "$MR_TMP/restarted" loss
  cmp -s "$MR_TMP/restart-local/model/model.safetensors" "$MR_TMP/restarted/model/model.safetensors" ||
    fail "final weights differ from the uninterrupted run's"
}

# A hook error is one a restart from the checkpoint would repeat: the
# worker records it, and the job is not restarted.
case_repeating_failure() {
  ray_cluster_start
  cat >"$MR_TMP/boom.lua" <<'LUA'
local calls = 0
function reward(batch)
  calls = calls + 1
  if calls == 2 then error("boom on the second batch") end
  local rewards = {}
  for i = 1, batch.size do rewards[i] = 0 end
  return rewards
end
LUA
  submit_ray boom "$RECIPES/grpo-tiny.toml" --set "hooks.script=$MR_TMP/boom.lua" --set launch.max_restarts=1 \
    --set launch.restart_delay=0
  ((MR_RC != 0)) || fail "the job succeeded: $(tail -20 "$MR_TMP/boom.log")"
  assert_contains "$(<"$MR_TMP/boom.log")" "boom on the second batch" "the job's log"
  assert_contains "$(<"$MR_TMP/boom.log")" "failed in a way a restart from the checkpoint would repeat" "the job's log"
  assert_not_contains "$(<"$MR_TMP/boom.log")" "restarting the workers in" "the job's log"
}

# Two Ray nodes of one CPU each, in two network namespaces joined by a veth
# pair (lib/netns.sh): a 2-node recipe gets a placement group on each, its
# ranks meet at the head's address, and the curve is the local launcher's.
case_two_ray_nodes() {
  netns_setup
  [[ -x $RAY_BIN/ray ]] || skip "no $RAY_BIN/ray: scripts/setup.sh --test installs ray[default]"
  local a b
  a=$(netns_addr A)
  b=$(netns_addr B)
  mkdir -p "$MR_TMP/home" "$MR_TMP/rta" "$MR_TMP/rtb"
  # netns_cleanup ends the Ray processes in both namespaces.
  timeout 120 ip netns exec "$MR_NETNS_A" env PATH="$RAY_BIN:$PATH" HOME="$MR_TMP/home" RAY_TMPDIR="$MR_TMP/rta" \
    RAY_USAGE_STATS_ENABLED=0 ray start --head --node-ip-address="$a" --port=6379 --dashboard-host="$a" \
    --dashboard-port=8265 --num-cpus=1 --num-gpus=0 --include-dashboard=true --disable-usage-stats \
    --temp-dir="$MR_TMP/rta/ray" >"$MR_TMP/ray-a.log" 2>&1 || fail "ray start (head) failed: $(tail -20 "$MR_TMP/ray-a.log")"
  timeout 120 ip netns exec "$MR_NETNS_B" env PATH="$RAY_BIN:$PATH" HOME="$MR_TMP/home" RAY_TMPDIR="$MR_TMP/rtb" \
    RAY_USAGE_STATS_ENABLED=0 ray start --address="$a:6379" --node-ip-address="$b" --num-cpus=1 --num-gpus=0 \
    --disable-usage-stats --temp-dir="$MR_TMP/rtb/ray" >"$MR_TMP/ray-b.log" 2>&1 ||
    fail "ray start (worker node) failed: $(tail -20 "$MR_TMP/ray-b.log")"
  local address=http://$a:8265 in_a=(ip netns exec "$MR_NETNS_A" env PATH="$RAY_BIN:$PATH" HOME="$MR_TMP/home")
  wait_until 60 "two alive Ray nodes" bash -c \
    "$(printf '%q ' "${in_a[@]}") ray list nodes --address $address --format json | grep -o ALIVE | wc -l | grep -qx 2" ||
    fail "the worker node did not join"
  local shape=(--set launch.type=ray --set launch.nodes=2 --set launch.procs_per_node=1)
  run_recipe two-local "$RECIPES/sft-tiny.toml"
  # shellcheck disable=SC2046  # job_sets prints words
  (cd "$MR_TMP" && with_timeout 300 "${in_a[@]}" "$MESHRUN" submit "$RECIPES/sft-tiny.toml" --ray --now \
    --address "$address" --script "$MR_TMP/two.ray.sh" $(job_sets "$MR_TMP/two") "${shape[@]}") \
    >"$MR_TMP/two.log" 2>&1 || fail "the 2-node job failed: $(tail -30 "$MR_TMP/two.log")"
  assert_contains "$(<"$MR_TMP/two.log")" "starting 2 workers on 2 Ray node(s) (master 10.231." "the job's log"
  same_curve "$MR_TMP/two-local" "$MR_TMP/two" loss
}

case_stop_job() {
  ray_cluster_start
  submit_ray stopped "$RECIPES/sft-tiny.toml" --set train.epochs=500 --set train.max_steps=100000 &
  local submit=$!
  wait_until 120 "logged steps" test -s "$MR_TMP/stopped/metrics.jsonl" ||
    fail "the job did not start: $(tail -20 "$MR_TMP/stopped.log")"
  local id
  id=$(grep -o "raysubmit_[A-Za-z0-9]*" "$MR_TMP/stopped.log" | head -1)
  [[ -n $id ]] || fail "no job id in the output: $(head -20 "$MR_TMP/stopped.log")"
  [[ -n $(ray_workers_left) ]] || fail "no workers found while the job runs"
  assert_exit 0 in_ray_namespace ray job stop "$id" --address "$ADDRESS"
  wait_until 20 "every worker to end" bash -c "[[ -z \"\$($(declare -f ray_workers_left); ray_workers_left)\" ]]" ||
    fail "workers are left after ray job stop: $(ray_workers_left)"
  wait "$submit" || true
  assert_exit 0 in_ray_namespace ray job status "$id" --address "$ADDRESS"
  assert_contains "$MR_OUT$MR_ERR" "was stopped" "the job's status"
}

case_shortfall() {
  ray_cluster_start
  assert_exit 0 in_ray_namespace "$MESHRUN" plan "$RECIPES/sft-tiny.toml" --ray --address "$ADDRESS"
  assert_contains "$MR_ERR" "has 1 alive node (CPU 2); the job needs 2 bundles of {CPU: 1}" "plan --ray"
  assert_exit 1 in_ray_namespace "$MESHRUN" plan "$RECIPES/sft-tiny.toml" --ray --address "$ADDRESS" \
    --set launch.procs_per_node=4
  assert_contains "$MR_ERR" "room for 0 of 1 node, short by 2 CPUs" "plan --ray"
  submit_ray short "$RECIPES/sft-tiny.toml" --set launch.procs_per_node=4
  ((MR_RC == 1)) || fail "the submit exited $MR_RC: $(<"$MR_TMP/short.log")"
  assert_contains "$(<"$MR_TMP/short.log")" "short by 2 CPUs; nothing was submitted" "the refusal"
  [[ ! -e $MR_TMP/short.ray.sh ]] || fail "a script was written for a job that cannot fit"
  assert_exit 0 in_ray_namespace ray job list --address "$ADDRESS"
  assert_not_contains "$MR_OUT" "raysubmit_" "the cluster's jobs"
  # An address the cluster is not at names what failed.
  assert_exit 1 in_ray_namespace "$MESHRUN" plan "$RECIPES/sft-tiny.toml" --ray --address http://127.0.0.1:9
  assert_contains "$MR_ERR" "asking the Ray cluster at http://127.0.0.1:9 for its nodes failed" "plan --ray"
}

run_case "sft-tiny and grpo-tiny as Ray jobs: the local launcher's curves" case_sft_and_grpo_curves
run_case "a killed worker fails the job naming its rank; a restart resumes it" case_killed_worker
run_case "two Ray nodes in two network namespaces: a 2-node job" case_two_ray_nodes
run_case "a failure a restart would repeat is not restarted" case_repeating_failure
run_case "ray job stop stops every worker" case_stop_job
run_case "more bundles than the cluster has: refused before anything starts" case_shortfall
mr_finish
