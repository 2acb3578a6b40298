#!/usr/bin/env python3
"""An independent plain-PyTorch re-computation of meshrun's RL arithmetic
(include/meshrun/rl/math.hpp, src/rl/experience.cpp), written the way the
papers state it (loops over prompts and sequences, the GSPO sequence ratio
with its full gradient), for tests/rl/reference_test.cpp.

Prints one JSON object: the inputs (seeded) and, per advantage estimator,
policy-loss variant and loss aggregation, the expected values. Run with the
Python of the torch meshrun builds against.
"""
import json
import math

import torch

torch.manual_seed(1234)
GROUP = 4
N, R = 8, 5
MAX_NEW = 6
lengths = [5, 3, 4, 1, 5, 2, 4, 3]
keep = [1, 1, 1, 1, 1, 0, 1, 1]  # sample 5 dropped (its group's statistics leave it out)
mask = torch.zeros(N, R)
for i, n in enumerate(lengths):
    mask[i, :n] = 1
for i, k in enumerate(keep):
    if not k:
        mask[i] = 0
rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.25, 2.0, 0.0, 1.0])
values = torch.randn(N, R)
gamma, lambd = 0.9, 0.8


def group_stats(r, w):
    out_mean, out_std = [], []
    for g in range(N // GROUP):
        members = [i for i in range(g * GROUP, (g + 1) * GROUP) if w[i] > 0]
        vals = [float(r[i]) for i in members]
        m = sum(vals) / max(1, len(vals))
        var = sum((v - m) ** 2 for v in vals) / max(1, len(vals))
        out_mean.append(m)
        out_std.append(math.sqrt(var))
    return out_mean, out_std


def baseline(name, r, w):
    means, stds = group_stats(r, w)
    out = []
    for i in range(N):
        g = i // GROUP
        if not w[i]:
            out.append(0.0)
        elif name in ("gae", "reinforce"):
            out.append(float(r[i]))
        elif name == "rloo":
            others = [float(r[j]) for j in range(g * GROUP, (g + 1) * GROUP) if j != i and w[j] > 0]
            out.append(float(r[i]) - (sum(others) / len(others) if others else 0.0))
        elif name == "group_norm":
            out.append((float(r[i]) - means[g]) / (stds[g] + 1e-6))
        else:  # reinforce_baseline, group_mean
            out.append(float(r[i]) - means[g])
    return out


def whiten(x, m):
    count = float(m.sum())
    mean = float((x * m).sum()) / count
    var = float((((x - mean) ** 2) * m).sum()) / count
    return (x - mean) / (math.sqrt(var) + 1e-8) * m


def advantages(name):
    scalar = baseline(name, rewards, keep)
    adv = torch.zeros(N, R)
    for i in range(N):
        n = int(mask[i].sum())
        token_r = [0.0] * n
        if n:
            token_r[-1] = scalar[i]
        if name == "gae":
            run = 0.0
            for t in reversed(range(n)):
                next_v = float(values[i, t + 1]) if t + 1 < n else 0.0
                delta = token_r[t] + gamma * next_v - float(values[i, t])
                run = delta + gamma * lambd * run
                adv[i, t] = run
        else:
            run = 0.0
            for t in reversed(range(n)):
                run = token_r[t] + gamma * run
                adv[i, t] = run
    if name in ("gae", "reinforce", "rloo", "reinforce_baseline"):
        adv = whiten(adv, mask)
    return adv


estimators = ["gae", "reinforce", "rloo", "group_norm", "reinforce_baseline", "group_mean"]
expected_advantages = {name: advantages(name).tolist() for name in estimators}

# Policy losses: per-sequence-constant advantages (GSPO's setting), ratios
# spread around 1 so every clip bound is met somewhere.
old = -torch.rand(N, R) - 0.5
log_probs = old + 0.6 * torch.randn(N, R)
seq_adv = torch.tensor([1.0, -1.0, 0.5, -2.0, 1.5, 0.0, -0.5, 2.0]).unsqueeze(1).expand(N, R).clone()

variants = {
    "ppo": dict(kind="ppo", low=0.2, high=0.2, dual=0.0),
    "clip_higher": dict(kind="ppo", low=0.2, high=0.28, dual=0.0),
    "dual_clip": dict(kind="ppo", low=0.2, high=0.2, dual=3.0),
    "gspo": dict(kind="gspo", low=0.05, high=0.08, dual=0.0),
}
aggregations = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def per_token_loss(lp, v):
    if v["kind"] == "ppo":
        ratio = torch.exp(lp - old)
    else:
        rows = []
        for i in range(N):
            n = int(mask[i].sum())
            s = torch.exp((lp[i, :n] - old[i, :n]).mean()) if n else torch.ones(())
            rows.append(s.expand(R))
        ratio = torch.stack(rows)
    a = seq_adv
    loss = torch.maximum(-ratio * a, -ratio.clamp(1 - v["low"], 1 + v["high"]) * a)
    if v["dual"] > 1:
        loss = torch.where(a < 0, torch.minimum(loss, -v["dual"] * a), loss)
    return loss * mask


def aggregate(loss, how):
    seqs = [i for i in range(N) if mask[i].sum() > 0]
    if how == "token-mean":
        return loss.sum() / mask.sum()
    total = 0.0
    for i in seqs:
        n = mask[i].sum()
        s = loss[i].sum()
        total = total + (s / n if how == "seq-mean-token-mean" else s / MAX_NEW if how.endswith("norm") else s)
    return total / len(seqs)


expected_losses = {}
for vname, v in variants.items():
    expected_losses[vname] = {}
    lp = log_probs.clone().requires_grad_()
    per_token = per_token_loss(lp, v)
    expected_losses[vname]["per_token"] = per_token.detach().tolist()
    for how in aggregations:
        lp = log_probs.clone().requires_grad_()
        value = aggregate(per_token_loss(lp, v), how)
        value.backward()
        expected_losses[vname][how] = {"value": float(value.detach()), "grad": lp.grad.tolist()}

overlong = [min(0.0, ((MAX_NEW - 2) - n) / 2 * 0.5) for n in lengths]

print(json.dumps({
    "group": GROUP, "max_new": MAX_NEW, "gamma": gamma, "lambd": lambd,
    "mask": mask.tolist(), "keep": keep, "rewards": rewards.tolist(), "values": values.tolist(),
    "lengths": lengths, "old": old.tolist(), "log_probs": log_probs.tolist(), "seq_adv": seq_adv.tolist(),
    "advantages": expected_advantages, "losses": expected_losses,
    "variants": variants, "overlong": overlong,
}))
