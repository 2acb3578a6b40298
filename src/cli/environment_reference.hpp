// The environment variables meshrun reads, in one table: `meshrun docs env`
// prints it, and a test (tests/cli/environment_reference_test.cpp) scans the
// sources so that a variable read anywhere is listed here.
#pragma once

#include <string>
#include <string_view>

namespace meshrun::cli {

struct EnvironmentVariable {
  std::string_view name;
  std::string_view reader;   // who reads it: "launch (SLURM)", "tokenizer", ...
  std::string_view meaning;
};

inline constexpr EnvironmentVariable kEnvironmentVariables[] = {
    {"RANK", "launch (torchrun)", "This process's global rank; with WORLD_SIZE, marks a torchrun-style job."},
    {"WORLD_SIZE", "launch (torchrun)", "The number of processes in the job."},
    {"LOCAL_RANK", "launch (torchrun)", "The rank on this node; picks the GPU."},
    {"LOCAL_WORLD_SIZE", "launch (torchrun)", "Processes on this node."},
    {"GROUP_RANK", "launch (torchrun)", "This node's index (torchrun's name)."},
    {"NODE_RANK", "launch (torchrun)", "This node's index (the older name)."},
    {"MASTER_ADDR", "launch", "The rendezvous host (rank 0's); set by meshrun for SLURM and MPI jobs when absent."},
    {"MASTER_PORT", "launch", "The rendezvous port; overrides [launch] master_port."},
    {"TORCHELASTIC_RUN_ID", "launch (torchrun)", "The job id under torchrun's elastic agent."},
    {"SLURM_PROCID", "launch (SLURM)", "Global rank of an srun task; marks a SLURM job."},
    {"SLURM_NTASKS", "launch (SLURM)", "Tasks in the job step."},
    {"SLURM_STEP_NUM_TASKS", "launch (SLURM)",
     "Tasks of an srun step; absent in an sbatch script's batch step, where (or at 1) a one-node recipe of type local "
     "or auto starts its own workers."},
    {"SLURM_LOCALID", "launch (SLURM)", "The task's rank on its node."},
    {"SLURM_NODEID", "launch (SLURM)", "The task's node index."},
    {"SLURM_NNODES", "launch (SLURM)", "Nodes in the job."},
    {"SLURM_TASKS_PER_NODE", "launch (SLURM)", "Tasks per node, e.g. 4(x2),3."},
    {"SLURM_JOB_NODELIST", "launch (SLURM)", "The job's hosts (hostlist syntax); the first is the rendezvous host."},
    {"SLURM_NODELIST", "launch (SLURM)", "The older name of SLURM_JOB_NODELIST."},
    {"SLURM_JOB_ID", "launch (SLURM)", "The job id; also picks a master port when MASTER_PORT is unset."},
    {"OMPI_COMM_WORLD_RANK", "launch (MPI)", "Open MPI's global rank; marks an mpirun job."},
    {"OMPI_COMM_WORLD_SIZE", "launch (MPI)", "Open MPI's world size."},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "launch (MPI)", "Open MPI's rank on the node."},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "launch (MPI)", "Open MPI's processes on the node."},
    {"PMI_RANK", "launch (MPI)", "MPICH / Intel MPI global rank."},
    {"PMI_SIZE", "launch (MPI)", "MPICH / Intel MPI world size."},
    {"MPI_LOCALRANKID", "launch (MPI)", "MPICH / Intel MPI rank on the node."},
    {"MPI_LOCALNRANKS", "launch (MPI)", "MPICH / Intel MPI processes on the node."},
    {"HOROVOD_RANK", "launch (Horovod)", "horovodrun's (Gloo controller) global rank; marks a horovodrun job."},
    {"HOROVOD_SIZE", "launch (Horovod)", "horovodrun's world size."},
    {"HOROVOD_LOCAL_RANK", "launch (Horovod)", "The rank on this host."},
    {"HOROVOD_LOCAL_SIZE", "launch (Horovod)", "Processes on this host (the same on every host)."},
    {"HOROVOD_CROSS_RANK", "launch (Horovod)", "This host's index."},
    {"HOROVOD_CROSS_SIZE", "launch (Horovod)", "Hosts in the job; checked against HOROVOD_SIZE / HOROVOD_LOCAL_SIZE."},
    {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "launch (Horovod)",
     "horovodrun's own rendezvous server (on the host that ran it); marks a Gloo-controller job, and is not rank 0's "
     "address: a job on several hosts needs MASTER_ADDR."},
    {"HOROVOD_GLOO_RENDEZVOUS_PORT", "launch (Horovod)", "Its port; set together with the address."},
    {"HOROVOD_CONTROLLER", "launch (Horovod)",
     "gloo or mpi; mpi beside MPI's rank variables marks a horovodrun job under its MPI controller."},
    {"MESHRUN_LAUNCHER", "launch",
     "Set to local by meshrun's local launcher and to ray by its Ray job for their workers (never by hand)."},
    {"MESHRUN_RAY_JOB_ID", "launch (Ray)", "Set by meshrun's Ray job for its workers: the job's submission id."},
    {"RAY_ADDRESS", "launch (Ray)",
     "The Ray job server (http://host:port) for `meshrun submit --ray` and `plan --ray` when neither --address nor "
     "[launch] address is given."},
    {"MESHRUN_FAILURE_RECORD", "launch", "Set by meshrun's local launcher and Ray job for their workers: where a worker "
                                         "records a failure a restart would repeat, so max_restarts does not restart it."},
    {"MESHRUN_MASTER_INTERFACE", "launch (MPI)", "The network interface whose address rank 0 announces to the others."},
    {"MESHRUN_JOB_ID", "dist", "A job id for the rendezvous when the launcher gives none."},
    {"MESHRUN_JOB_TOKEN", "dist", "The shared secret every process of a job proves it knows (HMAC) at rendezvous."},
    {"MESHRUN_SHARED_FS", "dist", "1: all nodes share one filesystem; 0: they do not (else probed)."},
    {"MESHRUN_THREADS", "train", "CPU threads per process (else OMP_NUM_THREADS, else the cores / local processes)."},
    {"OMP_NUM_THREADS", "train", "CPU threads per process when MESHRUN_THREADS is unset."},
    {"OMP_WAIT_POLICY", "train",
     "How OpenMP threads wait; when neither it nor GOMP_SPINCOUNT is set, meshrun starts the engine with PASSIVE and "
     "GOMP_SPINCOUNT=10000 (spin about 0.1 ms, then sleep)."},
    {"GOMP_SPINCOUNT", "train", "libgomp's spins before a waiting thread sleeps; set either variable to choose yourself."},
    {"MESHRUN_ADAPTIVE_THREADS", "train",
     "0 keeps a CPU job's thread count fixed; else the training loop (and meshrun generate) shrinks it to the cores other processes leave "
     "(and grows it back), reported as cpu/threads."},
    {"MESHRUN_CUDA_KERNELS", "model",
     "0 keeps LibTorch's kernels on CUDA where meshrun has its own (SwiGLU, the rotary embedding, residual add + "
     "RMSNorm); else they run when the binary holds them (meshrun --version)."},
    {"MESHRUN_CONSOLE", "metrics", "relay (set by the local launcher for its workers), plain or terminal: how the "
                                   "console draws progress (else: terminal when stderr is one)."},
    {"MESHRUN_SENTENCEPIECE_MODULE", "tokenizer", "The path of meshrun_sentencepiece.so when it is not beside the binary."},
    {"HF_HUB_CACHE", "model", "The local Hugging Face hub cache where org/name models and datasets resolve."},
    {"HF_HOME", "model", "HF_HOME/hub is the cache when HF_HUB_CACHE is unset."},
    {"XDG_CACHE_HOME", "model", "XDG_CACHE_HOME/huggingface/hub is the cache when neither is set."},
    {"HOME", "model, recipe", "~/.cache/huggingface/hub last; ~/ in recipe paths."},
};

// The table as Markdown (`meshrun docs env`).
std::string environment_markdown();

}  // namespace meshrun::cli
