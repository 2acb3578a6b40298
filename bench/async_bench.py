#!/usr/bin/env python3
"""Asynchronous rollouts against synchronous steps (issue #38): grpo-tiny on
2 processes, the actor with its ref on one and the rollout engine on the
other, run with rollout.max_staleness 0 and 1 in interleaved rounds; prints
each run's wall seconds per step (from metrics.jsonl's "time", step 1 left
out) and the median ratio sync / async, with the async runs' overlap and
wait figures. Standard library only:

    python3 bench/async_bench.py --meshrun build/meshrun [--rounds 3] [--steps 20]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPE = os.path.join(HERE, "..", "recipes", "grpo-tiny.toml")
LAYOUT = ["launch.procs_per_node=2", "colocate.all=false", 'colocate.groups=[["actor","ref"]]',
          "roles.actor.procs_per_node=1", "roles.ref.procs_per_node=1", "rollout.engines=1",
          "rollout.max_new_tokens=64", "batch.micro_train=32", "batch.micro_rollout=64"]


def run(meshrun, folder, staleness, steps):
    sets = LAYOUT + [f"rollout.max_staleness={staleness}", f"train.max_steps={steps}",
                     f'logging.dir="{folder}"', f'checkpoint.path="{folder}/ck"',
                     f'checkpoint.output="{folder}/model"', "checkpoint.save_steps=100000"]
    command = [meshrun, RECIPE]
    for assignment in sets:
        command += ["--set", assignment]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    per_step = (rows[-1]["time"] - rows[0]["time"]) / (len(rows) - 1)
    inner = rows[1:-1] or rows
    figures = {}
    if staleness:
        for key in ("async/overlap_frac", "time/trainer_wait_s", "time/engine_wait_s", "time/generate_ahead_s"):
            figures[key] = statistics.mean(r[key] for r in inner)
    return per_step, figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshrun", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory(prefix="meshrun-async-bench-") as root:
        for round_ in range(1, args.rounds + 1):
            times = {}
            for staleness in (0, 1):
                per_step, figures = run(args.meshrun, os.path.join(root, f"r{round_}-s{staleness}"), staleness,
                                        args.steps)
                times[staleness] = per_step
                extra = "".join(f" {k} {v:.3f}" for k, v in figures.items())
                print(f"round {round_} max_staleness {staleness}: {per_step:.4f} s/step{extra}", flush=True)
            ratios.append(times[0] / times[1])
    print(f"sync / async seconds per step: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
