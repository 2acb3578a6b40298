#!/usr/bin/env bash
# check_launchers_test.sh MESHRUN: `meshrun check RECIPE` (rendezvous, every
# group of the plan, collectives checked on each) for real processes started
# every way meshrun supports: its own local launcher with 2 and 4 workers,
# srun in a private SLURM cluster, mpirun, a torchrun-style environment set
# here, and two network namespaces as two nodes. Plus faults: a port in use
# and a rank that never arrives. Exit status 0, 1 (a case failed) or 77 (all
# skipped); MESHRUN_IT_REQUIRE=1 turns skips into failures.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=lib/slurm.sh
source "$here/lib/slurm.sh"
# shellcheck source=lib/mpi.sh
source "$here/lib/mpi.sh"
# shellcheck source=lib/netns.sh
source "$here/lib/netns.sh"

mr_meshrun_argument "$0" "$@"

mr_init check_launchers

# write_recipe FILE TYPE NODES PROCS [MESH_LINES...]: a CPU SFT recipe for
# the given launcher and shape, with a 10 s timeout so faults end quickly.
write_recipe() {
  local file=$1 type=$2 nodes=$3 procs=$4
  shift 4
  mkdir -p "$(dirname "$file")"
  # `meshrun check` reads no data, but lint checks the file's lines.
  echo '{"input": "q", "output": "a"}' >"$(dirname "$file")/data.jsonl"
  {
    printf 'algorithm = "sft"\n[launch]\ntype = "%s"\nnodes = %s\nprocs_per_node = %s\n' "$type" "$nodes" "$procs"
    printf 'device = "cpu"\nbackend = "gloo"\ntimeout_minutes = 0.17\n'
    printf '[batch]\nmicro_train = 1\ntrain = %s\n' $((nodes * procs))
    printf '[mesh]\n'
    printf '%s\n' "$@"
    printf '[roles.actor]\nmodel = "builtin:tiny"\n[data]\npath = "data.jsonl"\n'
  } >"$file"
}

# The report rank 0 prints names every group with its ranks.
assert_report() {
  local report=$1
  shift
  local group
  for group in "$@"; do assert_contains "$report" "$group" "check report"; done
}

case_local_two() {
  local recipe=$MR_TMP/local2/recipe.toml
  write_recipe "$recipe" local 1 2
  assert_exit 0 "$MESHRUN" check "$recipe"
  assert_report "$MR_OUT" world actor/dp
}

case_local_four_mesh() {
  local recipe=$MR_TMP/local4/recipe.toml
  write_recipe "$recipe" local 1 4 "tp = 2"
  assert_exit 0 "$MESHRUN" check "$recipe"
  assert_report "$MR_OUT" world actor/dp actor/sp actor/tp
}

case_slurm() {
  slurm_start
  local recipe=$MR_TMP/slurm/recipe.toml out=$MR_TMP/slurm-out
  write_recipe "$recipe" slurm 1 2
  slurm_srun -n 2 --overcommit bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" \
    || { cat "$out"/rank-*.err >&2 || true; fail "srun exited $?"; }
  rank_files "$out" 2
  assert_report "$(cat "$out/rank-0.out")" world actor/dp
}

case_mpi() {
  mpi_require
  local recipe=$MR_TMP/mpi/recipe.toml out=$MR_TMP/mpi-out port
  write_recipe "$recipe" mpi 1 2
  port=$(free_port)
  MR_MPI_ARGS=(-x MASTER_ADDR=127.0.0.1 -x "MASTER_PORT=$port")
  mpi_run 2 bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" \
    || { cat "$out"/rank-*.err >&2 || true; fail "mpirun exited $?"; }
  rank_files "$out" 2
  assert_report "$(cat "$out/rank-0.out")" world actor/dp
}

# mpirun without MASTER_ADDR or MASTER_PORT: rank 0 picks 127.0.0.1 (both
# ranks share its node) and a free port, and MPI_Bcast gives them to rank 1.
# Each rank finalizes MPI right after the broadcast and runs on; mpirun must
# take that as a normal end, without a word about MPI_Finalize.
case_mpi_bootstrap() {
  mpi_require
  local recipe=$MR_TMP/mpi-bootstrap/recipe.toml out=$MR_TMP/mpi-bootstrap-out
  write_recipe "$recipe" mpi 1 2
  MR_MPI_ARGS=()
  mpi_run 2 bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" >"$MR_TMP/mpi-bootstrap.log" 2>&1 \
    || { cat "$MR_TMP/mpi-bootstrap.log" "$out"/rank-*.err >&2 || true; fail "mpirun exited $?"; }
  rank_files "$out" 2
  assert_report "$(cat "$out/rank-0.out")" world actor/dp
  assert_contains "$(cat "$out/rank-0.err")" "MPI bootstrap: master 127.0.0.1:" "rank 0's stderr"
  assert_not_contains "$(cat "$MR_TMP/mpi-bootstrap.log")" "inalize" "mpirun's output"
}

# torchrun_env RANK LOCAL_RANK WORLD LOCAL_WORLD GROUP_RANK MASTER_ADDR PORT
torchrun_env() {
  echo "RANK=$1 LOCAL_RANK=$2 WORLD_SIZE=$3 LOCAL_WORLD_SIZE=$4 GROUP_RANK=$5 MASTER_ADDR=$6 MASTER_PORT=$7"
}

case_torchrun() {
  local recipe=$MR_TMP/torchrun/recipe.toml out=$MR_TMP/torchrun-out port r pids=()
  write_recipe "$recipe" torchrun 2 2 "tp = 2"
  port=$(free_port)
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    with_timeout 60 env $(torchrun_env "$r" $((r % 2)) 4 2 $((r / 2)) 127.0.0.1 "$port") \
      bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" &
    pids+=($!)
  done
  wait_all "${pids[@]}" || { cat "$out"/rank-*.err >&2 || true; fail "a torchrun-style worker failed"; }
  rank_files "$out" 4
  assert_report "$(cat "$out/rank-0.out")" world actor/dp actor/tp
}

# What horovodrun's Gloo controller sets: HOROVOD_RANK LOCAL_RANK SIZE
# LOCAL_SIZE CROSS_RANK CROSS_SIZE (its rendezvous server is never used).
horovod_env() {
  echo "HOROVOD_RANK=$1 HOROVOD_LOCAL_RANK=$2 HOROVOD_SIZE=$3 HOROVOD_LOCAL_SIZE=$4 HOROVOD_CROSS_RANK=$5" \
    "HOROVOD_CROSS_SIZE=$6 HOROVOD_CONTROLLER=gloo HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1" \
    "HOROVOD_GLOO_RENDEZVOUS_PORT=9 HOROVOD_HOSTNAME=host$5"
}

case_horovod_gloo() {
  local recipe=$MR_TMP/horovod/recipe.toml out=$MR_TMP/horovod-out port r pids=()
  write_recipe "$recipe" horovod 2 2 "tp = 2"
  port=$(free_port)
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    with_timeout 60 env $(horovod_env "$r" $((r % 2)) 4 2 $((r / 2)) 2) MASTER_ADDR=127.0.0.1 "MASTER_PORT=$port" \
      bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" &
    pids+=($!)
  done
  wait_all "${pids[@]}" || { cat "$out"/rank-*.err >&2 || true; fail "a horovodrun-style worker failed"; }
  rank_files "$out" 4
  assert_report "$(cat "$out/rank-0.out")" world actor/dp actor/tp
}

# horovodrun's MPI controller is mpirun underneath: MPI's variables, the
# MPI bootstrap for rank 0's address.
case_horovod_mpi() {
  mpi_require
  local recipe=$MR_TMP/horovod-mpi/recipe.toml out=$MR_TMP/horovod-mpi-out
  write_recipe "$recipe" horovod 1 2
  MR_MPI_ARGS=(-x HOROVOD_CONTROLLER=mpi)
  mpi_run 2 bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" \
    || { cat "$out"/rank-*.err >&2 || true; fail "mpirun exited $?"; }
  rank_files "$out" 2
  assert_report "$(cat "$out/rank-0.out")" world actor/dp
}

case_netns() {
  netns_setup
  local recipe=$MR_TMP/netns/recipe.toml out=$MR_TMP/netns-out port=29500 pa pb
  write_recipe "$recipe" torchrun 2 1
  # shellcheck disable=SC2046
  netns_exec A env $(torchrun_env 0 0 2 1 0 "$MR_NETNS_ADDR_A" "$port") \
    bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" &
  pa=$!
  # shellcheck disable=SC2046
  netns_exec B env $(torchrun_env 1 0 2 1 1 "$MR_NETNS_ADDR_A" "$port") \
    bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" &
  pb=$!
  wait_all "$pa" "$pb" || { cat "$out"/rank-*.err >&2 || true; fail "the two nodes did not meet across the veth link"; }
  rank_files "$out" 2
  assert_report "$(cat "$out/rank-0.out")" world actor/dp
}

case_port_in_use() {
  local recipe=$MR_TMP/port/recipe.toml port listener
  # Two ranks: a world of one takes any free port and never binds MASTER_PORT.
  write_recipe "$recipe" torchrun 1 2
  port=$(free_port)
  /usr/bin/python3 -c "import socket,time;s=socket.socket();s.bind(('127.0.0.1',$port));s.listen();time.sleep(30)" &
  listener=$!
  mr_on_exit "kill $listener 2>/dev/null || true"
  wait_until 5 "a listener on port $port" grep -q ":$(printf %04X "$port") " /proc/net/tcp
  local started=$SECONDS
  # shellcheck disable=SC2046
  assert_exit 1 env $(torchrun_env 0 0 2 2 0 127.0.0.1 "$port") "$MESHRUN" check "$recipe"
  (( SECONDS - started < 5 )) || fail "a port in use took $((SECONDS - started)) s to report"
  assert_contains "$MR_ERR" "$port" "stderr"
}

case_rank_never_arrives() {
  local recipe=$MR_TMP/missing/recipe.toml port started
  write_recipe "$recipe" torchrun 1 2
  port=$(free_port)
  started=$SECONDS
  # Rank 1 is never started: rank 0 must give up within the 10 s timeout.
  # shellcheck disable=SC2046
  assert_exit 1 env $(torchrun_env 0 0 2 2 0 127.0.0.1 "$port") "$MESHRUN" check "$recipe"
  (( SECONDS - started < 30 )) || fail "rank 0 waited $((SECONDS - started)) s"
  assert_contains "$MR_ERR" "rank 1" "stderr"
}

# Two torchrun-style ranks started with different recipes (another seed
# on rank 1): both stop at the rendezvous, with one message naming rank 1
# and the key, instead of a crash in the first collective or a run on two
# settings.
case_ranks_disagree() {
  local recipe=$MR_TMP/disagree/recipe.toml out=$MR_TMP/disagree-out port r pids=() status=0
  write_recipe "$recipe" torchrun 1 2
  port=$(free_port)
  for r in 0 1; do
    # shellcheck disable=SC2046
    with_timeout 60 env $(torchrun_env "$r" "$r" 2 2 0 127.0.0.1 "$port") \
      bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" check "$recipe" --set "seed=$((7 + r))" &
    pids+=($!)
  done
  for r in 0 1; do
    status=0
    wait "${pids[$r]}" || status=$?
    ((status == 1)) || fail "rank $r exited $status, not 1"
    assert_contains "$(cat "$out/rank-$r.err")" \
      "rank 1 of 2 resolved another than rank 0's (rank 1: seed 8 against rank 0's 7)" "rank $r's stderr"
  done
}

run_case "local launcher, 2 workers" case_local_two
run_case "local launcher, 4 workers, dp 2 × tp 2" case_local_four_mesh
run_case "srun -n 2 (SLURM)" case_slurm
run_case "mpirun -np 2 (Open MPI)" case_mpi
run_case "mpirun -np 2 without MASTER_ADDR: MPI bootstrap" case_mpi_bootstrap
run_case "torchrun-style environment, 2 nodes × 2, tp 2" case_torchrun
run_case "horovodrun-style (Gloo) environment, 2 hosts × 2, tp 2" case_horovod_gloo
run_case "horovodrun's MPI controller (mpirun -np 2)" case_horovod_mpi
run_case "two network namespaces as two nodes" case_netns
run_case "master port in use: immediate error" case_port_in_use
run_case "ranks started with different recipes: both stop, naming the key" case_ranks_disagree
run_case "a rank that never arrives is named" case_rank_never_arrives
mr_finish
