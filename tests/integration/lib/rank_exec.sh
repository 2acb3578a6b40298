#!/usr/bin/env bash
# rank_exec.sh DIR COMMAND [ARGS...]: run COMMAND as one process of a
# launched job, with its stdout, stderr and exit status written to
# DIR/rank-R.out, DIR/rank-R.err and DIR/rank-R.rc, where R is the process's
# global rank as its launcher gives it (RANK for torchrun-style, then
# HOROVOD_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK; 0
# when none).
# Exits with COMMAND's status.
#
# Launchers interleave the output of their processes; this keeps each
# process's output whole:
#   srun -n 2 bash "$MR_LIB/rank_exec.sh" "$dir" meshrun env --format json
#   mpi_run 2 bash "$MR_LIB/rank_exec.sh" "$dir" meshrun env --format json
# Then check with rank_files DIR N (common.sh) and read DIR/rank-R.out.
set -uo pipefail
dir=${1:?usage: rank_exec.sh DIR COMMAND [ARGS...]}
shift
rank=${RANK:-${HOROVOD_RANK:-${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}}}}
mkdir -p "$dir"
"$@" >"$dir/rank-$rank.out" 2>"$dir/rank-$rank.err"
rc=$?
echo "$rc" >"$dir/rank-$rank.rc.tmp" && mv "$dir/rank-$rank.rc.tmp" "$dir/rank-$rank.rc"
exit "$rc"
