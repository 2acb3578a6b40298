# The Python side of bench/startup: one process of a torch.distributed job,
# started by startup_bench with the variables torchrun would set (RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...), doing what
# startup_worker does on the meshrun side: join the job, run one all_reduce
# of a small tensor, report how long each step took since the driver forked
# it. Run with the project's .venv python (the torch meshrun builds against),
# started by the driver itself rather than by torchrun, so both sides start
# the same way.
import os
import sys
import time


def since_start():
    # The driver's start time, on the same clock (CLOCK_MONOTONIC is shared by
    # every process of the machine).
    start_ns = int(os.environ["MESHRUN_BENCH_T0_NS"])
    return (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - start_ns) / 1e9


import torch  # noqa: E402  (the import is part of what is measured)
import torch.distributed as dist  # noqa: E402

loaded = since_start()
dist.init_process_group("gloo")  # env:// rendezvous: rank 0 serves a TCPStore
joined = since_start()
tensor = torch.ones(4)
dist.all_reduce(tensor)
reduced = since_start()

world = dist.get_world_size()
if not torch.equal(tensor, torch.full((4,), float(world))):
    print(f"all_reduce gave {tensor.tolist()}, expected {world} everywhere", file=sys.stderr)
    sys.exit(1)
print(f"startup loaded={loaded:.6f} joined={joined:.6f} reduced={reduced:.6f}", flush=True)
dist.destroy_process_group()
