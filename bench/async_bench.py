#!/usr/bin/env python3
"""Asynchronous rollouts against synchronous steps (issue #38): grpo-tiny on
2 processes, the actor with its ref on one and the rollout engine on the
other, run synchronously (max_staleness 0), asynchronously (1) and with
partial rollouts (1, partial = true) in interleaved rounds; prints each
run's wall seconds per step (from metrics.jsonl's "time", step 1 left out),
the median ratios against sync, the reward each mode had reached at a fixed
wall time (the shortest run's) and its reward per step (the mean of each
run's last quarter of steps), with the async runs' overlap, wait and
partial figures. Standard library only:

    python3 bench/async_bench.py --meshrun build/meshrun [--rounds 3] [--steps 40]
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


MODES = {"sync": (0, False), "async": (1, False), "partial": (1, True)}


def run(meshrun, folder, mode, steps):
    staleness, partial = MODES[mode]
    sets = LAYOUT + [f"rollout.max_staleness={staleness}", f"rollout.partial={str(partial).lower()}",
                     f"train.max_steps={steps}",
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
        keys = ["async/overlap_frac", "time/trainer_wait_s", "time/engine_wait_s", "time/generate_ahead_s"]
        if partial:
            keys += ["async/partial_frac", "async/staleness_mean"]
        for key in keys:
            figures[key] = statistics.mean(r[key] for r in inner)
    curve = [(r["time"] - rows[0]["time"], r["reward_mean"]) for r in rows]
    return per_step, figures, curve


def reward_at(curve, seconds):
    """The mean reward of the last 5 steps logged by `seconds` of wall time."""
    reached = [reward for at, reward in curve if at <= seconds]
    return statistics.mean(reached[-5:])


def last_quarter(curve):
    return statistics.mean(reward for _, reward in curve[-max(1, len(curve) // 4):])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshrun", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    times = {mode: [] for mode in MODES}
    curves = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="meshrun-async-bench-") as root:
        for round_ in range(1, args.rounds + 1):
            for mode in MODES:
                per_step, figures, curve = run(args.meshrun, os.path.join(root, f"r{round_}-{mode}"), mode,
                                               args.steps)
                times[mode].append(per_step)
                curves[mode].append(curve)
                extra = "".join(f" {k} {v:.3f}" for k, v in figures.items())
                print(f"round {round_} {mode}: {per_step:.4f} s/step{extra}", flush=True)
    ratio = {mode: statistics.median(s / a for s, a in zip(times["sync"], times[mode])) for mode in MODES}
    wall = min(curve[-1][0] for runs in curves.values() for curve in runs)
    at = {mode: statistics.mean(reward_at(curve, wall) for curve in curves[mode]) for mode in MODES}
    per_step = {mode: statistics.mean(last_quarter(curve) for curve in curves[mode]) for mode in MODES}
    median = {mode: statistics.median(times[mode]) for mode in MODES}
    print(f"grpo async: sync {median['sync']:.3f} s/step; async {median['async']:.3f} s/step "
          f"({ratio['async']:.2f}x); partial {median['partial']:.3f} s/step ({ratio['partial']:.2f}x); "
          f"reward at {wall:.1f} s: sync {at['sync']:.4f}, async {at['async']:.4f}, partial {at['partial']:.4f}")
    print(f"reward per step (last quarter of {args.steps} steps, mean of {args.rounds} runs): "
          + ", ".join(f"{mode} {per_step[mode]:.4f}" for mode in MODES))


if __name__ == "__main__":
    sys.exit(main())
