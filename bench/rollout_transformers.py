# The transformers side of bench/rollout's GRPO workload: the model
# directory meshrun wrote, loaded with AutoModelForCausalLM and sampled with
# `generate` as a user of TRL's GRPOTrainer (or plain transformers) runs it:
# every sample of the step in one batch, do_sample, temperature 1, top-p
# 0.9, no top-k, the same stop ids, the same max_new_tokens. A finished
# sequence waits (padded) until the longest of the batch ends: the static
# batch continuous batching is measured against. Run with the project's
# .venv python (the torch meshrun builds against; `scripts/setup.sh --bench`
# installs the pinned transformers) at the driver's thread count.
# Prints one line:
#   transformers tokens_per_s=... seconds=... tokens=... steps=...
import argparse
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True, help="JSON list of prompt id lists (one per sample)")
    parser.add_argument("--stop-ids", required=True, help="JSON list of stop token ids")
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    with open(args.prompts) as f:
        prompts = json.load(f)
    with open(args.stop_ids) as f:
        stop_ids = json.load(f)
    if len({len(p) for p in prompts}) != 1:
        raise SystemExit("the prompts must have one length (no padding)")
    input_ids = torch.tensor(prompts, dtype=torch.long)
    pad = next(t for t in range(model.config.vocab_size) if t not in set(stop_ids))
    options = dict(do_sample=True, temperature=1.0, top_p=0.9, top_k=0, eos_token_id=stop_ids, pad_token_id=pad,
                   attention_mask=torch.ones_like(input_ids))

    def generated_tokens(out):
        total = 0
        for row in out[:, input_ids.shape[1]:].tolist():
            length = len(row)
            for i, token in enumerate(row):
                if token in stop_ids:
                    length = i + 1
                    break
            total += length
        return total

    with torch.inference_mode():
        model.generate(input_ids, max_new_tokens=4, **options)  # warm-up
        rates, times, tokens, steps = [], [], [], []
        for repeat in range(args.repeats):
            torch.manual_seed(repeat)
            start = time.perf_counter()
            out = model.generate(input_ids, max_new_tokens=args.max_new_tokens, **options)
            seconds = time.perf_counter() - start
            n = generated_tokens(out)
            rates.append(n / seconds)
            times.append(seconds)
            tokens.append(n)
            steps.append(out.shape[1] - input_ids.shape[1])
    print(f"transformers tokens_per_s={statistics.median(rates):.3f} seconds={statistics.median(times):.4f} "
          f"tokens={statistics.median(tokens):.0f} steps={statistics.median(steps):.0f}")


if __name__ == "__main__":
    main()
