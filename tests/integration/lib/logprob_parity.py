"""Rollout/trainer log-prob parity over a run's metrics.jsonl records, the
one bound every PPO integration case holds its run to.

The engines' log-probs of their own tokens equal the actor's under the same
weights (CPU fp32), up to the rounding of different kernel shapes (cached
decode against one full forward). That rounding grows with the logits: once
a policy is sharp (grpo-tiny's late steps) a rare token's log-prob can
differ by ~1e-4 while the mean stays ~1e-7. A real mismatch (positions,
temperature, mask, stale weights) moves every token's log-prob, by 1e-2 and
more; hence a tight bound on the mean and a loose one on the single worst
token."""

WORST_BOUND = 1e-3
MEAN_BOUND = 1e-5


def check_logprob_parity(records):
    """Asserts the bounds over the records' logprob_diff_max / _mean and
    prints both figures."""
    assert records, "no metrics records"
    worst = max(r["logprob_diff_max"] for r in records)
    mean = sum(r["logprob_diff_mean"] for r in records) / len(records)
    print(f"logprob_diff_max {worst:.2e}, mean {mean:.2e} over {len(records)} steps")
    assert worst <= WORST_BOUND, f"engine and actor log-probs differ by {worst} (bound {WORST_BOUND})"
    assert mean <= MEAN_BOUND, f"engine and actor log-probs differ by {mean} on average (bound {MEAN_BOUND})"
