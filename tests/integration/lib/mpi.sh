# shellcheck shell=bash
# Open MPI's mpirun on this host, for integration tests. Needs openmpi-bin
# (scripts/setup.sh); source common.sh first and call mr_init.
#
#   mpi_run 2 meshrun env --format json
#   mpi_run 2 bash "$MR_LIB/rank_exec.sh" "$dir" meshrun check recipe.toml
#
# What mpirun gives each process (Open MPI 4.1.4, Debian 12; observed with
# `mpi_run 2 env | grep OMPI_COMM_WORLD`), per process:
#   OMPI_COMM_WORLD_RANK=0 / 1        OMPI_COMM_WORLD_LOCAL_RANK=0 / 1
#   OMPI_COMM_WORLD_SIZE=2            OMPI_COMM_WORLD_LOCAL_SIZE=2
#   OMPI_COMM_WORLD_NODE_RANK=0 / 1   PMIX_RANK=0 / 1
# meshrun env then reports launcher mpi (openmpi) and, without MASTER_ADDR,
# needs_mpi_bootstrap = true.

[[ -n ${MR_MPI_LOADED:-} ]] && return 0
MR_MPI_LOADED=1
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# mpi_require: skip (exit 77) unless mpirun is installed.
mpi_require() { require_cmd mpirun; }

# mpi_run N COMMAND [ARGS...]: start N processes of COMMAND on this host with
# mpirun, bounded by MR_TIMEOUT seconds (the process group is killed after
# that; returns 124), else mpirun's exit status. Options: run as root allowed,
# N slots on localhost (--host localhost:N, --oversubscribe, no binding, so
# any N runs on any core count), and Open MPI's own traffic (the out-of-band
# channel and the TCP BTL) kept on loopback, so no network interface is probed
# or used. Extra mpirun options can be given, before N's command, in the
# array MR_MPI_ARGS (e.g. MR_MPI_ARGS=(-x FOO)). The processes inherit this
# shell's environment. A SLURM allocation around the test is not used
# (mr_init scrubbed the SLURM variables, and the ras/plm are forced local).
mpi_run() {
  local n=$1
  shift
  [[ $n =~ ^[1-9][0-9]*$ ]] || fail "mpi_run: N must be a positive integer, not '$n'"
  # shellcheck disable=SC2054  # "self,tcp" is one MCA value
  local args=(
    --allow-run-as-root --oversubscribe --bind-to none
    -np "$n" --host "localhost:$n"
    --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
    --mca plm isolated --mca ras ^slurm
  )
  if [[ -n ${MR_MPI_ARGS+x} ]]; then
    args+=("${MR_MPI_ARGS[@]}")
  fi
  OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_hwloc_base_binding_policy=none \
    with_timeout "$MR_TIMEOUT" mpirun "${args[@]}" "$@"
}
