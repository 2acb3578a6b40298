#!/usr/bin/env bash
# env_launchers_test.sh MESHRUN: `meshrun env --format json` under real
# launchers: srun in a private SLURM cluster, mpirun, a torchrun-style
# environment, two network namespaces as two nodes, and contradictory
# variables. Each case passes, fails or is skipped (missing root or tools) on
# its own; the exit status is 0, 1 (a case failed) or 77 (all skipped).
# Set MESHRUN_IT_REQUIRE=1 to turn skips into failures, MR_KEEP_TMP=1 to
# keep the temp dir (logs, per-rank outputs).
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

mr_init env_launchers

# (a) srun -n 2 --overcommit in the private SLURM cluster.
case_slurm() {
  slurm_start
  local out=$MR_TMP/slurm-env r job port
  slurm_srun -n 2 --overcommit bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" env --format json \
    || fail "srun exited $?"
  rank_files "$out" 2
  job=$(json_get "$out/rank-0.out" job_id)
  [[ $job =~ ^[0-9]+$ ]] || fail "job_id '$job' is not a SLURM job id"
  port=$((10000 + job % 20000))
  for r in 0 1; do
    assert_json "$out/rank-$r.out" launcher slurm
    assert_json "$out/rank-$r.out" rank "$r"
    assert_json "$out/rank-$r.out" local_rank "$r"
    assert_json "$out/rank-$r.out" world_size 2
    assert_json "$out/rank-$r.out" local_world_size 2
    assert_json "$out/rank-$r.out" node_rank 0
    assert_json "$out/rank-$r.out" nodes 1
    assert_json "$out/rank-$r.out" master_addr "$MR_SLURM_HOST"
    assert_json "$out/rank-$r.out" hosts "$MR_SLURM_HOST"
    assert_json "$out/rank-$r.out" job_id "$job"
    assert_json "$out/rank-$r.out" master_port "$port"
  done
}

# (b) mpirun -np 2.
case_mpi() {
  mpi_require
  local out=$MR_TMP/mpi-env r
  mpi_run 2 bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" env --format json \
    || fail "mpirun exited $?"
  rank_files "$out" 2
  for r in 0 1; do
    assert_json "$out/rank-$r.out" launcher mpi
    assert_json "$out/rank-$r.out" mpi_implementation openmpi
    assert_json "$out/rank-$r.out" rank "$r"
    assert_json "$out/rank-$r.out" local_rank "$r"
    assert_json "$out/rank-$r.out" world_size 2
    assert_json "$out/rank-$r.out" local_world_size 2
    assert_json "$out/rank-$r.out" node_rank 0
    assert_json "$out/rank-$r.out" nodes 1
    assert_json "$out/rank-$r.out" needs_mpi_bootstrap true
  done
}

# torchrun_env RANK LOCAL_RANK WORLD LOCAL_WORLD GROUP_RANK MASTER_ADDR PORT:
# the variables torchrun gives a worker, as `env` arguments.
torchrun_env() {
  echo "RANK=$1 LOCAL_RANK=$2 WORLD_SIZE=$3 LOCAL_WORLD_SIZE=$4 GROUP_RANK=$5 MASTER_ADDR=$6 MASTER_PORT=$7"
}

# (c) a torchrun-style environment: 2 nodes of 2 workers, all four workers.
case_torchrun() {
  local out=$MR_TMP/torchrun-env r port
  port=$(free_port)
  mkdir -p "$out"
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    assert_exit 0 env $(torchrun_env "$r" $((r % 2)) 4 2 $((r / 2)) 127.0.0.1 "$port") \
      "$MESHRUN" env --format json
    printf '%s\n' "$MR_OUT" >"$out/rank-$r.out"
    assert_json "$out/rank-$r.out" launcher torchrun
    assert_json "$out/rank-$r.out" rank "$r"
    assert_json "$out/rank-$r.out" local_rank $((r % 2))
    assert_json "$out/rank-$r.out" world_size 4
    assert_json "$out/rank-$r.out" local_world_size 2
    assert_json "$out/rank-$r.out" node_rank $((r / 2))
    assert_json "$out/rank-$r.out" nodes 2
    assert_json "$out/rank-$r.out" master_addr 127.0.0.1
    assert_json "$out/rank-$r.out" master_port "$port"
  done
}

# (d) two namespaces as two nodes of one worker each; node 0 (namespace A)
# is the master, so B names the other namespace's address. Both run at once,
# as the workers of a real job would.
case_netns() {
  netns_setup
  local out=$MR_TMP/netns-env port=29500 pa pb
  # shellcheck disable=SC2046
  netns_exec A env $(torchrun_env 0 0 2 1 0 "$MR_NETNS_ADDR_A" "$port") \
    bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" env --format json &
  pa=$!
  # shellcheck disable=SC2046
  netns_exec B env $(torchrun_env 1 0 2 1 1 "$MR_NETNS_ADDR_A" "$port") \
    bash "$MR_LIB/rank_exec.sh" "$out" "$MESHRUN" env --format json &
  pb=$!
  wait_all "$pa" "$pb" || fail "meshrun env in the namespaces failed"
  rank_files "$out" 2
  for r in 0 1; do
    assert_json "$out/rank-$r.out" launcher torchrun
    assert_json "$out/rank-$r.out" rank "$r"
    assert_json "$out/rank-$r.out" node_rank "$r"
    assert_json "$out/rank-$r.out" nodes 2
    assert_json "$out/rank-$r.out" world_size 2
    assert_json "$out/rank-$r.out" master_addr "$MR_NETNS_ADDR_A"
  done
  # The master's address is one that B reaches and the host does not have.
  netns_probe B A || fail "B cannot reach A's address"
  ! ip -o addr show | grep -qF "$MR_NETNS_ADDR_A/" || fail "$MR_NETNS_ADDR_A leaked into the host namespace"
}

# (d') horovodrun's Gloo controller on one host: its variables, loopback
# for the rendezvous, and a partial set refused naming what is missing.
case_horovod() {
  local out=$MR_TMP/horovod-env
  mkdir -p "$out"
  assert_exit 0 env HOROVOD_RANK=1 HOROVOD_SIZE=2 HOROVOD_LOCAL_RANK=1 HOROVOD_LOCAL_SIZE=2 HOROVOD_CROSS_RANK=0 \
    HOROVOD_CROSS_SIZE=1 HOROVOD_CONTROLLER=gloo HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1 \
    HOROVOD_GLOO_RENDEZVOUS_PORT=9 "$MESHRUN" env --format json
  printf '%s\n' "$MR_OUT" >"$out/rank-1.out"
  assert_json "$out/rank-1.out" launcher horovod
  assert_json "$out/rank-1.out" rank 1
  assert_json "$out/rank-1.out" world_size 2
  assert_json "$out/rank-1.out" master_addr 127.0.0.1
  assert_exit 1 env HOROVOD_RANK=1 HOROVOD_SIZE=2 "$MESHRUN" env --format json
  assert_contains "$MR_ERR" "HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK" "stderr"
}

# (e) contradictory or incomplete variables: exit 1, naming them.
case_contradiction() {
  # shellcheck disable=SC2046
  assert_exit 1 env $(torchrun_env 5 0 4 1 0 127.0.0.1 29500) "$MESHRUN" env --format json
  assert_contains "$MR_ERR" RANK "stderr"
  assert_contains "$MR_ERR" 5 "stderr"
  assert_contains "$MR_ERR" WORLD_SIZE "stderr"
  assert_contains "$MR_ERR" 4 "stderr"
  assert_eq "$MR_OUT" "" "stdout"
  # Only RANK and WORLD_SIZE: not a torchrun environment either.
  assert_exit 1 env RANK=5 WORLD_SIZE=4 "$MESHRUN" env --format json
  assert_contains "$MR_ERR" RANK "stderr"
  assert_contains "$MR_ERR" WORLD_SIZE "stderr"
}

run_case "srun -n 2 --overcommit (SLURM)" case_slurm
run_case "mpirun -np 2 (Open MPI)" case_mpi
run_case "torchrun-style environment" case_torchrun
run_case "horovodrun-style (Gloo) environment" case_horovod
run_case "two network namespaces as two nodes" case_netns
run_case "RANK=5 WORLD_SIZE=4 is refused" case_contradiction
mr_finish
