# shellcheck shell=bash disable=SC2016  # single-quoted scripts for bash -c
# Common helpers for meshrun's real-launcher integration tests.
#
# Source it from a test script (bash, `set -euo pipefail`), then call mr_init:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
#   mr_init my_test            # temp dir, EXIT trap, reaper, clean launcher env
#   run_case "srun, 2 tasks" case_slurm
#   mr_finish                  # exit status: 0 pass, 1 a case failed, 77 all skipped
#
# Guarantees: every wait is bounded (with_timeout), and everything a test
# starts is stopped when it ends, whether it passes, fails or is interrupted:
#   * cleanup hooks (mr_on_exit) run in reverse order from an EXIT trap of the
#     shell (or subshell) that registered them; slurm.sh and netns.sh register
#     theirs, so `slurm_start` inside a run_case is stopped when that case ends;
#   * the shell that called mr_init then kills every process of the run that
#     is still there (mr_tagged_pids: those carrying MR_TAG, exported so that
#     every child inherits it, and those holding files in MR_TMP, such as
#     slurmstepd, which clears its environment), deletes the namespaces it
#     noted and removes MR_TMP (set MR_KEEP_TMP=1 to keep it for debugging);
#   * a reaper process in its own session does the same if the test shell dies
#     without running its trap (meson's timeout sends SIGTERM to the test's
#     process group and SIGKILL half a second later).
#
# Variables set by mr_init (exported): MR_TMP (private temp dir, mode 755),
# MR_TAG (unique tag of this run), MR_LIB (this folder), MR_OWNER (pid of the
# shell that called mr_init). MR_TIMEOUT (default 60) bounds the launcher
# wrappers (slurm_srun, mpi_run, netns_exec) unless a call overrides it.

[[ -n ${MR_COMMON_LOADED:-} ]] && return 0
MR_COMMON_LOADED=1

MR_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export MR_LIB
export MR_TIMEOUT=${MR_TIMEOUT:-60}
# The Python of the torch meshrun is built against (meson passes it; its
# torch reads safetensors files back), else Debian's.
MR_PYTHON=${MESHRUN_TORCH_PYTHON:-/usr/bin/python3}
[[ -x $MR_PYTHON ]] || MR_PYTHON=python3

MR_CLEANUPS=()          # "BASHPID<TAB>command", run in reverse by mr__run_cleanups
MR_CASES_PASSED=0
MR_CASES_FAILED=0
MR_CASES_SKIPPED=0
MR_FAILED_NAMES=()

# isolate DIR: sets MR_ISOLATED to the --set overrides that keep a run of a
# shipped recipe inside DIR: its logs, metrics, output model and checkpoints
# (so it never resumes, or writes over, the recipe's own runs/ folder) and a
# port of its own.
isolate() {
  MR_ISOLATED=(--set "logging.dir=$1" --set "checkpoint.output=$1/model" --set "checkpoint.path=$1/checkpoints"
               --set "launch.master_port=$(free_port)")
}

# run_recipe NAME RECIPE [--set ...]: runs RECIPE isolated in MR_TMP/NAME
# (metrics every step), expecting success.
run_recipe() {
  local name=$1 recipe=$2
  shift 2
  isolate "$MR_TMP/$name"
  assert_exit 0 "$MESHRUN" "$recipe" "${MR_ISOLATED[@]}" --set logging.steps=1 "$@"
}

# kill_and_resume NAME RECIPE: a run of 200 steps (64 epochs, capped)
# killed (kill -9 of its process group) after its step-16 checkpoint, then
# run again unchanged: the same curve and final weights as the same run
# left alone (MR_TMP/NAME-straight and MR_TMP/NAME-killed).
kill_and_resume() {
  local name=$1 recipe=$2
  local settings=(--set checkpoint.save_steps=8 --set train.epochs=64 --set train.max_steps=200)
  run_recipe "$name-straight" "$recipe" "${settings[@]}"
  local run=$MR_TMP/$name-killed
  setsid "$MESHRUN" "$recipe" --set "logging.dir=$run" --set logging.steps=1 --set "checkpoint.output=$run/model" \
    --set "checkpoint.path=$run/checkpoints" "${settings[@]}" --set "launch.master_port=$(free_port 1)" \
    >"$run.log" 2>&1 &
  local pid=$!
  wait_until 60 "the step 16 checkpoint" test -d "$run/checkpoints/global_step_16" ||
    fail "no checkpoint at step 16: $(tail -3 "$run.log")"
  kill -9 -- "-$pid"
  wait "$pid" || true
  [[ ! -d $run/checkpoints/global_step_200 ]] || fail "the run ended before it was killed"
  log "killed after $(wc -l <"$run/metrics.jsonl") logged steps"
  run_recipe "$name-killed" "$recipe" "${settings[@]}"
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed run's log"
  "$MR_PYTHON" - "$MR_TMP/$name-straight" "$run" <<'PY' || fail "the resumed run differs from the straight one"
import json, sys
a, b = ([json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:])
assert [r["step"] for r in b] == [r["step"] for r in a] == list(range(1, 201)), [r["step"] for r in b]
for x, y in zip(a, b):
    assert x["loss"] == y["loss"], (x["step"], x["loss"], y["loss"])
PY
  cmp -s "$MR_TMP/$name-straight/model/model.safetensors" "$run/model/model.safetensors" ||
    fail "final weights differ"
}

# log MESSAGE...: one line on stderr, prefixed with the seconds since mr_init.
log() { printf '[%3ds] %s\n' "$((SECONDS - ${MR_T0:-0}))" "$*" >&2; }

# fail MESSAGE...: log the message and exit 1 (ends the current case).
fail() { log "FAIL: $*"; exit 1; }

# skip MESSAGE...: log why and exit 77 (meson's "skipped"; ends the case).
skip() { log "SKIP: $*"; exit 77; }

# require_root: skip unless running as root (SLURM daemons, munged as user
# munge, network namespaces all need it).
require_root() { [[ $(id -u) -eq 0 ]] || skip "needs root"; }

# require_cmd CMD...: skip unless every command is on PATH (install them with
# scripts/setup.sh).
require_cmd() {
  local cmd
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null 2>&1 || skip "'$cmd' not found (run scripts/setup.sh)"
  done
}

# mr_scrub_launcher_env: unset every variable a launcher sets (torchrun,
# SLURM, Open MPI/PMIx, MPICH/PMI, MVAPICH, meshrun's own), so that a test run
# inside a SLURM job or an mpirun does not see its parent's launch. mr_init
# calls it; tests then set exactly what they mean to.
mr_scrub_launcher_env() {
  local name
  unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK ROLE_RANK \
        ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID MESHRUN_LAUNCHER MESHRUN_RAY_JOB_ID \
        PMI_RANK PMI_SIZE PMI_FD PMI_PORT
  while IFS= read -r name; do
    case $name in
      SLURM_*|SRUN_*|SBATCH_*|SALLOC_*|OMPI_*|PMIX_*|MV2_*|MPI_LOCAL*|HYDRA_*|I_MPI_*|HOROVOD_*|RAY_*) unset "$name" ;;
    esac
  done < <(compgen -e)
}

# mr_init [NAME]: start a test run: scrub the launcher environment, create the
# private temp dir MR_TMP (/tmp/meshrun-it-NAME.XXXXXX, mode 755 so that
# munged, which runs as user munge, can reach its files), export MR_TAG, start
# the reaper, and install the EXIT/INT/TERM traps.
# mr_meshrun_argument SCRIPT [ARG...]: sets and exports MESHRUN from the
# test script's first argument (the meshrun binary), or exits 2 (usage) or 1
# (not an executable). Call it with "$0" "$@".
mr_meshrun_argument() {
  local script=$1
  shift
  [[ $# -ge 1 ]] || { echo "usage: $script MESHRUN" >&2; exit 2; }
  MESHRUN=$(realpath "$1")
  [[ -x $MESHRUN ]] || { echo "$script: $1 is not an executable" >&2; exit 1; }
  export MESHRUN
}

mr_init() {
  local name=${1:-test}
  MR_T0=$SECONDS
  mr_scrub_launcher_env
  local base=${TMPDIR:-/tmp}
  ((${#base} <= 40)) || base=/tmp   # munged's socket path must stay short (108 bytes)
  MR_TMP=$(mktemp -d "$base/meshrun-it-$name.XXXXXX")
  chmod 755 "$MR_TMP"
  MR_TAG="meshrun-it-$$-$RANDOM$RANDOM"
  MR_OWNER=$BASHPID
  export MR_TMP MR_TAG MR_OWNER
  # Hub names resolve only in a cache a case builds itself, never the
  # machine's ~/.cache/huggingface.
  export HF_HUB_CACHE=$MR_TMP/hub-cache
  unset HF_HOME
  : > "$MR_TMP/.netns"
  mr__start_reaper
  mr__install_traps
  log "temp dir $MR_TMP"
}

# mr_on_exit COMMAND: run COMMAND (a string, eval'ed) when the current shell
# or subshell exits, after hooks registered later (LIFO). A hook that fails
# is logged and the others still run.
mr_on_exit() {
  MR_CLEANUPS+=("$BASHPID"$'\t'"$1")
  mr__install_traps
}

mr__install_traps() {
  trap 'mr__run_cleanups' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}

mr__run_cleanups() {
  local rc=$? i entry
  set +e
  trap '' INT TERM HUP     # let cleanup finish
  for ((i = ${#MR_CLEANUPS[@]} - 1; i >= 0; i--)); do
    entry=${MR_CLEANUPS[i]}
    [[ ${entry%%$'\t'*} == "$BASHPID" ]] || continue   # registered by another (sub)shell
    unset 'MR_CLEANUPS[i]'
    eval "${entry#*$'\t'}" || log "cleanup '${entry#*$'\t'}' failed"
  done
  if [[ $BASHPID == "${MR_OWNER:-}" ]]; then
    mr__final_cleanup
  fi
  exit "$rc"
}

# Kills what is left with our tag, deletes noted namespaces, removes MR_TMP,
# stops the reaper. Only in the shell that called mr_init.
mr__final_cleanup() {
  local left ns
  if [[ -n ${MR_CASE_PID:-} ]] && kill -0 "$MR_CASE_PID" 2>/dev/null; then
    log "stopping the running case (its cleanup hooks run)"
    mr__end_child "$MR_CASE_PID" 30
  fi
  left=$(mr_tagged_pids)
  if [[ -n $left ]]; then
    local pid described=""
    for pid in $left; do  # the listing's own grep and find are gone by now
      [[ -r /proc/$pid/cmdline ]] && described+=" $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-80))"
    done
    [[ -z $described ]] || log "killing leftover processes of this run:$described"
    # shellcheck disable=SC2086
    mr_kill_pids $left
  fi
  if [[ -s $MR_TMP/.netns ]]; then
    while read -r ns; do
      [[ -n $ns ]] && ip netns delete "$ns" 2>/dev/null
    done < "$MR_TMP/.netns"
  fi
  [[ -z ${MR_REAPER_PID:-} ]] || mr__end_child "$MR_REAPER_PID"
  if [[ ${MR_KEEP_TMP:-0} == 1 ]]; then
    log "kept $MR_TMP (MR_KEEP_TMP=1)"
  else
    rm -rf -- "$MR_TMP"
  fi
}

# mr_tagged_pids: pids of the processes of this run: those whose environment
# carries its MR_TAG (everything it started and their descendants, daemons
# included), and those holding a file or their working directory in MR_TMP
# (e.g. slurmstepd, which clears its environment but keeps slurmd's log
# open). This shell, its ancestors and the reaper are left out.
mr_tagged_pids() {
  local stat exclude=" $$ $BASHPID ${MR_OWNER:-} ${MR_REAPER_PID:-} "
  local p=$BASHPID
  while [[ -n $p && $p != 1 && $p != 0 ]]; do       # ancestors of this (sub)shell
    exclude+="$p "
    stat=$(<"/proc/$p/stat") 2>/dev/null || break
    stat=${stat##*) }                                # after "pid (comm) ": state ppid ...
    p=${stat#* }
    p=${p%% *}
  done
  mr__pids_of_run "$MR_TAG" "$MR_TMP" "$exclude"
}

# mr__pids_of_run TAG DIR EXCLUDE: pids with MR_TAG=TAG in their environment
# or a file descriptor or working directory under DIR, minus the
# space-separated pids of EXCLUDE. Also used by the reaper.
mr__pids_of_run() {
  local tag=$1 dir=$2 exclude=" $3 " path pid
  {
    grep -lszxF "MR_TAG=$tag" /proc/[0-9]*/environ
    find /proc/[0-9]*/fd /proc/[0-9]*/cwd -maxdepth 1 -lname "$dir/*" 2>/dev/null
    find /proc/[0-9]*/cwd -maxdepth 0 -lname "$dir" 2>/dev/null
  } | while read -r path; do
    pid=${path#/proc/}
    pid=${pid%%/*}
    [[ $exclude == *" $pid "* || $pid == "$BASHPID" ]] && continue
    echo "$pid"
  done | sort -un
}

# mr_kill_pids PID...: SIGTERM, wait up to 5 s, then SIGKILL what is left.
mr_kill_pids() {
  local pid deadline=$((SECONDS + 5)) alive
  kill -TERM "$@" 2>/dev/null
  while ((SECONDS < deadline)); do
    alive=()
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    ((${#alive[@]} == 0)) && return 0
    sleep 0.1
  done
  kill -KILL "${alive[@]}" 2>/dev/null
  return 0
}

# mr__end_child PID [SECONDS]: end a background child of this shell: SIGTERM,
# sent again every 0.5 s (one that arrives between fork and exec is lost),
# SIGKILL after SECONDS (default 3); then reap it.
mr__end_child() {
  local pid=$1 limit=$((${2:-3} * 10)) i
  for ((i = 0; i < limit; i++)); do
    ((i % 5 == 0)) && { kill -TERM "$pid" 2>/dev/null || break; }
    sleep 0.1
    kill -0 "$pid" 2>/dev/null || break
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

# The reaper: a process in its own session, without the tag, that waits for
# the mr_init shell to die and then does mr__final_cleanup's work bluntly.
# Normal exits stop it at the end of their own cleanup.
mr__start_reaper() {
  env -u MR_TAG MR_REAP_TAG="$MR_TAG" MR_REAP_TMP="$MR_TMP" MR_REAP_OWNER="$MR_OWNER" \
    MR_REAP_KEEP="${MR_KEEP_TMP:-0}" \
    setsid bash -c "$(declare -f mr__pids_of_run)"'
      trap "kill \$(jobs -p) 2>/dev/null; wait; exit 0" TERM
      while kill -0 "$MR_REAP_OWNER" 2>/dev/null; do sleep 0.5 & nap=$!; wait $nap; done
      pids=$(mr__pids_of_run "$MR_REAP_TAG" "$MR_REAP_TMP" "$BASHPID")
      if [[ -n $pids ]]; then
        kill -TERM $pids 2>/dev/null; sleep 3; kill -KILL $pids 2>/dev/null
      fi
      if [[ -f $MR_REAP_TMP/.netns ]]; then
        while read -r ns; do [[ -n $ns ]] && ip netns delete "$ns"; done < "$MR_REAP_TMP/.netns"
      fi
      [[ $MR_REAP_KEEP == 1 ]] || rm -rf -- "$MR_REAP_TMP"
    ' </dev/null >/dev/null 2>&1 &
  MR_REAPER_PID=$!
}

# with_timeout SECONDS COMMAND [ARGS...]: run COMMAND (an executable, or a
# shell function of the sourcing script) in its own session and process
# group; if it has not ended after SECONDS, SIGTERM the whole group, then
# SIGKILL it 3 s later, and return 124 with a message on stderr. Otherwise
# return COMMAND's exit status. stdin/stdout/stderr are passed through, so
# `out=$(with_timeout 10 cmd)` works. When COMMAND ends, what it left
# running in its group gets SIGTERM. (Processes that start their own session,
# i.e. daemons, leave the group; the run's final sweep ends them.)
with_timeout() {
  local secs=$1 pid watchdog rc=0 flag
  shift
  if declare -F "$1" >/dev/null; then
    # A function: run it in a fresh bash that has this shell's functions.
    setsid -w bash -c "$(declare -f); set -euo pipefail; \"\$@\"" with_timeout "$@" <&0 &
  else
    setsid -w "$@" <&0 &
  fi
  pid=$!
  flag=${MR_TMP:-/tmp}/.timed-out.$pid
  # The watchdog is a separate bash (not a subshell), so that it carries
  # MR_TAG and the final sweep ends it if this shell dies first.
  MR_WD_SECS=$secs MR_WD_PID=$pid MR_WD_FLAG=$flag bash -c '
    trap "kill \$(jobs -p) 2>/dev/null; wait; exit 0" TERM
    # Poll as well as wait for SIGTERM: a SIGTERM that arrives before this
    # bash has started (between fork and exec) is lost.
    while ((SECONDS < MR_WD_SECS)); do
      kill -0 "$MR_WD_PID" 2>/dev/null || exit 0
      sleep 0.2 & wait $!
    done
    kill -0 -- "-$MR_WD_PID" 2>/dev/null || kill -0 "$MR_WD_PID" 2>/dev/null || exit 0
    : >"$MR_WD_FLAG"
    kill -TERM -- "-$MR_WD_PID" 2>/dev/null || kill -TERM "$MR_WD_PID" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
      kill -0 -- "-$MR_WD_PID" 2>/dev/null || exit 0
      sleep 0.2 & wait $!
    done
    kill -KILL -- "-$MR_WD_PID" 2>/dev/null || kill -KILL "$MR_WD_PID" 2>/dev/null
    exit 0
  ' </dev/null &
  watchdog=$!
  wait "$pid" || rc=$?
  kill -TERM "$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null || true
  kill -TERM -- "-$pid" 2>/dev/null || true   # what the command left in its group
  if [[ -e $flag ]]; then
    rm -f "$flag"
    echo "with_timeout: '$*' did not end within ${secs}s; killed its process group" >&2
    return 124
  fi
  return "$rc"
}

# wait_all PID...: wait for each background job (each should be bounded, e.g.
# started through with_timeout or a launcher wrapper); return the first
# non-zero status, or 0.
wait_all() {
  local pid rc=0 status
  for pid in "$@"; do
    status=0
    wait "$pid" || status=$?
    ((rc == 0)) && rc=$status
  done
  return "$rc"
}

# wait_until SECONDS DESCRIPTION COMMAND [ARGS...]: retry COMMAND every 0.2 s
# until it succeeds; fail (return 1, with a message) after SECONDS.
wait_until() {
  local secs=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${secs}s waiting for: $what"
      return 1
    fi
    sleep 0.2
  done
}

# free_port [COUNT]: print COUNT (default 1) distinct TCP ports that are free
# on this host right now (the kernel picks them: bind to port 0), one a line.
# Falls back to random ports absent from /proc/net/tcp{,6} without python3.
free_port() {
  local count=${1:-1}
  if "$MR_PYTHON" -c 'pass' 2>/dev/null; then
    "$MR_PYTHON" - "$count" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("", 0))
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
EOF
  else
    local used port n=0
    used=$(awk 'NR > 1 {split($2, a, ":"); print strtonum("0x" a[2])}' /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
    while ((n < count)); do
      port=$((20000 + RANDOM % 30000))
      grep -qx "$port" <<<"$used" && continue
      used+=$'\n'"$port"
      echo "$port"
      n=$((n + 1))
    done
  fi
}

# assert_eq ACTUAL EXPECTED [WHAT]: fail unless the strings are equal.
assert_eq() {
  [[ $1 == "$2" ]] || fail "${3:-value}: expected '$2', got '$1'"
}

# assert_contains HAYSTACK NEEDLE [WHAT]: fail unless HAYSTACK contains NEEDLE.
assert_contains() {
  [[ $1 == *"$2"* ]] || fail "${3:-output} does not contain '$2'; it is: $1"
}

# assert_not_contains HAYSTACK NEEDLE [WHAT]
assert_not_contains() {
  [[ $1 != *"$2"* ]] || fail "${3:-output} contains '$2'; it is: $1"
}

# assert_exit EXPECTED COMMAND [ARGS...]: run COMMAND (bounded by MR_TIMEOUT),
# fail unless it exits with EXPECTED. Its stdout and stderr are left in
# MR_OUT and MR_ERR for further checks.
assert_exit() {
  local expected=$1 rc=0
  shift
  MR_OUT=$MR_TMP/.assert_exit.out
  MR_ERR=$MR_TMP/.assert_exit.err
  with_timeout "$MR_TIMEOUT" "$@" >"$MR_OUT" 2>"$MR_ERR" || rc=$?
  MR_OUT=$(<"$MR_OUT")
  MR_ERR=$(<"$MR_ERR")
  ((rc == expected)) || fail "'$*' exited $rc, expected $expected; stdout: $MR_OUT; stderr: $MR_ERR"
}

# json_get FILE KEY: print the value of top-level KEY of the JSON object in
# FILE (strings bare, booleans true/false, lists comma-joined). Fails when
# FILE is not one JSON object or has no KEY.
json_get() {
  "$MR_PYTHON" - "$1" "$2" <<'EOF' || fail "no key '$2' in JSON file $1: $(head -c 2000 "$1" 2>/dev/null)"
import json, sys
with open(sys.argv[1]) as f:
    value = json.load(f)[sys.argv[2]]
if isinstance(value, bool):
    value = "true" if value else "false"
elif isinstance(value, list):
    value = ",".join(str(v) for v in value)
print(value)
EOF
}

# assert_json FILE KEY EXPECTED: fail unless json_get FILE KEY is EXPECTED.
assert_json() {
  local value
  value=$(json_get "$1" "$2") || exit 1
  [[ $value == "$3" ]] || fail "$(basename "$1"): $2 is '$value', expected '$3'"
}

# rank_files DIR COUNT: fail unless DIR holds rank-0.out .. rank-(COUNT-1).out
# written by lib/rank_exec.sh, each with exit status 0.
rank_files() {
  local dir=$1 count=$2 r rc
  for ((r = 0; r < count; r++)); do
    [[ -f $dir/rank-$r.rc ]] || fail "rank $r wrote nothing to $dir ($(cd "$dir" 2>/dev/null && echo *))"
    rc=$(<"$dir/rank-$r.rc")
    [[ $rc == 0 ]] || fail "rank $r exited $rc; stderr: $(<"$dir/rank-$r.err")"
  done
  [[ ! -e $dir/rank-$count.rc ]] || fail "$dir has more than $count ranks"
}

# run_case NAME FUNCTION [ARGS...]: run one test case in a subshell with
# errexit on, so that a failing assertion ends only that case and the
# case's own cleanup hooks (e.g. slurm_stop) run when it ends. Exit status 0
# passes, 77 skips (skip), anything else fails.
run_case() {
  local name=$1 rc=0 start=$SECONDS
  shift
  # MR_ONLY=REGEX runs only the cases whose function matches (by hand,
  # while working on one; the suite runs them all).
  if [[ -n ${MR_ONLY:-} && ! $1 =~ $MR_ONLY ]]; then
    return 0
  fi
  log "=== $name"
  # In the background, so that a signal to this shell is handled at once
  # (mr__final_cleanup then stops the case, which runs its own hooks).
  (set -e; "$@") &
  MR_CASE_PID=$!
  wait "$MR_CASE_PID" || rc=$?
  MR_CASE_PID=""
  case $rc in
    0) MR_CASES_PASSED=$((MR_CASES_PASSED + 1)); log "PASS $name ($((SECONDS - start))s)" ;;
    77) MR_CASES_SKIPPED=$((MR_CASES_SKIPPED + 1)); log "SKIP $name" ;;
    *) MR_CASES_FAILED=$((MR_CASES_FAILED + 1)); MR_FAILED_NAMES+=("$name")
       log "FAIL $name (exit $rc, $((SECONDS - start))s)" ;;
  esac
  return 0
}

# mr_finish: print the summary and exit: 1 when a case failed, 77 when every
# case was skipped (or 1 with MESHRUN_IT_REQUIRE=1, for machines that must
# run them), else 0. The EXIT trap then cleans up.
mr_finish() {
  log "passed $MR_CASES_PASSED, failed $MR_CASES_FAILED, skipped $MR_CASES_SKIPPED (total $((SECONDS - MR_T0))s)"
  if ((MR_CASES_FAILED > 0)); then
    log "failed: ${MR_FAILED_NAMES[*]}"
    exit 1
  fi
  if ((MR_CASES_SKIPPED > 0)) && [[ ${MESHRUN_IT_REQUIRE:-0} == 1 ]]; then
    log "MESHRUN_IT_REQUIRE=1 and some cases were skipped"
    exit 1
  fi
  ((MR_CASES_PASSED > 0)) || exit 77
  exit 0
}
