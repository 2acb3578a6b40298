#!/usr/bin/env bash
# fault_test.sh MESHRUN: stuck and dead ranks. Under the real local launcher, a rank
# stopped with SIGSTOP mid-run, and a rank blocked outside the collectives
# (its reward hook sleeping), make the job end non-zero within the
# collective timeout plus the launcher's stop, naming the rank, its role and
# what each side was doing. Without a launcher (a torchrun-style
# environment), a killed rank ends the other within seconds. Nothing of the
# run is left afterwards.
set -euo pipefail
# shellcheck disable=SC2317  # the case functions are called through run_case
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
mr_meshrun_argument "$0" "$@"
mr_init fault
RECIPES=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../recipes" && pwd)
TIMEOUT_MINUTES=0.2  # 12 s: the runs' collectives take well under a second

# worker_pid LAUNCHER_PID RANK: the pid of the launcher's worker of RANK.
worker_pid() {
  local launcher=$1 rank=$2 pid
  for pid in $(pgrep -P "$launcher"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$rank"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# finish_within SECONDS PID LOG: waits for the launcher PID to end, at most
# SECONDS; sets MR_RC to its status.
finish_within() {
  local seconds=$1 pid=$2 run_log=$3
  wait_until "$seconds" "the launcher to end" bash -c "! kill -0 $pid 2>/dev/null" ||
    fail "the launcher still runs ${seconds} s later: $(tail -5 "$run_log")"
  MR_RC=0
  wait "$pid" || MR_RC=$?
}

# nothing_left: no process of this run is left but the test's own shells
# (the listing's own short-lived grep and find carry the run's tag too).
nothing_left() {
  local pid left=()
  for pid in $(mr_tagged_pids || true); do
    sleep 0.2
    [[ -r /proc/$pid/cmdline ]] || continue
    left+=("$pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null))")
  done
  ((${#left[@]} == 0)) || fail "processes of the run are left: ${left[*]}"
}

case_stopped_rank() {
  local run=$MR_TMP/stopped
  mkdir -p "$run"
  setsid "$MESHRUN" "$RECIPES/sft-tiny.toml" --set "logging.dir=$run" --set logging.steps=1 \
    --set "checkpoint.output=$run/model" --set "checkpoint.path=$run/checkpoints" --set train.epochs=500 \
    --set "launch.timeout_minutes=$TIMEOUT_MINUTES" --set "launch.master_port=$(free_port)" >"$run.log" 2>&1 &
  local launcher=$!
  wait_until 60 "three logged steps" bash -c "[[ -f $run/metrics.jsonl && \$(wc -l <$run/metrics.jsonl) -ge 3 ]]" ||
    fail "the run did not start: $(tail -5 "$run.log")"
  local rank1
  rank1=$(worker_pid "$launcher" 1) || fail "no worker of rank 1 under the launcher $launcher"
  local stopped_at=$SECONDS
  kill -STOP "$rank1"
  finish_within 40 "$launcher" "$run.log"
  log "the job ended $((SECONDS - stopped_at)) s after SIGSTOP, status $MR_RC"
  [[ $MR_RC -ne 0 ]] || fail "the job succeeded with a stopped rank"
  ((SECONDS - stopped_at <= 12 + 15)) || fail "the job took $((SECONDS - stopped_at)) s to end"
  assert_contains "$(<"$run.log")" "rank 1 (actor, " "the job's output"
  assert_contains "$(<"$run.log")" "stopped responding (last heartbeat" "the job's output"
  ! kill -0 "$rank1" 2>/dev/null || fail "the stopped rank $rank1 is still there"
  nothing_left
}

case_blocked_rank() {
  local run=$MR_TMP/blocked
  mkdir -p "$run/recipe/data"
  cp "$RECIPES/grpo-tiny.toml" "$run/recipe/"
  cp "$RECIPES/data/grpo_tiny_prompts.jsonl" "$run/recipe/data/"
  # Rank 1's second reward call never returns; rank 0 waits in the next
  # collective for it.
  cat >"$run/recipe/stall.lua" <<'LUA'
local calls = 0
function reward(batch)
  calls = calls + 1
  if os.getenv("RANK") == "1" and calls == 2 then os.execute("sleep 600") end
  local rewards = {}
  for i = 1, batch.size do rewards[i] = 0 end
  return rewards
end
LUA
  setsid "$MESHRUN" "$run/recipe/grpo-tiny.toml" --set "logging.dir=$run" --set "checkpoint.output=$run/model" \
    --set "checkpoint.path=$run/checkpoints" --set "hooks.script=$run/recipe/stall.lua" --set hooks.sandbox=false \
    --set hooks.parallel=true --set hooks.timeout_s=1000 --set "launch.timeout_minutes=$TIMEOUT_MINUTES" \
    --set "launch.master_port=$(free_port)" >"$run.log" 2>&1 &
  local launcher=$!
  wait_until 60 "the first step" bash -c "[[ -f $run/metrics.jsonl && \$(wc -l <$run/metrics.jsonl) -ge 1 ]]" ||
    fail "the run did not start: $(tail -5 "$run.log")"
  local started=$SECONDS
  finish_within 60 "$launcher" "$run.log"
  log "the job ended $((SECONDS - started)) s after its first step, status $MR_RC"
  [[ $MR_RC -ne 0 ]] || fail "the job succeeded with a blocked rank"
  # The timeout; rank 0 keeping the store up for the others (at most another
  # timeout, as rank 1 is alive); the launcher's stop (5 s grace).
  ((SECONDS - started <= 2 * 12 + 15)) || fail "the job took $((SECONDS - started)) s to end"
  local output
  output=$(<"$run.log")
  assert_contains "$output" "timed out after 12 s: every other member still responds" "the job's output"
  assert_contains "$output" "but rank 1 (actor, " "the job's output"
  assert_contains "$output" "is not in this " "the job's output"
  nothing_left
}

# A rank that dies under a torchrun-style environment (no meshrun launcher
# to stop the others): rank 0 notices at its next collective and ends
# within seconds, far inside a 5-minute collective timeout, naming rank 1.
case_dead_rank_without_launcher() {
  local run=$MR_TMP/dead port
  mkdir -p "$run"
  port=$(free_port)
  local pids=() r
  for r in 0 1; do
    env RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      "$MESHRUN" run "$RECIPES/sft-tiny.toml" --set 'launch.type="torchrun"' --set "logging.dir=$run" \
      --set logging.steps=1 --set "checkpoint.output=$run/model" --set "checkpoint.path=$run/checkpoints" \
      --set train.epochs=500 --set launch.timeout_minutes=5 >"$run/rank-$r.log" 2>&1 &
    pids+=($!)
  done
  wait_until 60 "three logged steps" bash -c "[[ -f $run/metrics.jsonl && \$(wc -l <$run/metrics.jsonl) -ge 3 ]]" ||
    fail "the run did not start: $(tail -5 "$run/rank-0.log")"
  local killed_at=$SECONDS
  kill -KILL "${pids[1]}"
  finish_within 20 "${pids[0]}" "$run/rank-0.log"
  log "rank 0 ended $((SECONDS - killed_at)) s after rank 1 was killed, status $MR_RC"
  [[ $MR_RC -ne 0 ]] || fail "rank 0 succeeded without rank 1"
  assert_contains "$(<"$run/rank-0.log")" "rank 1 (actor" "rank 0's output"
  wait "${pids[1]}" 2>/dev/null || true
  nothing_left
}

run_case "a rank stopped with SIGSTOP: the job ends within the timeout, naming it" case_stopped_rank
run_case "a rank blocked in its reward hook: the others time out naming it and what it did last" case_blocked_rank
run_case "a rank killed without a launcher: rank 0 ends within seconds, naming it" case_dead_rank_without_launcher
mr_finish
