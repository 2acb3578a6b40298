#!/usr/bin/env python3
"""Regenerates the small datasets shipped under recipes/data/ (deterministic).

sft_tiny.jsonl: "reverse: WORD" -> the word reversed, a task a byte-level
tiny model learns in a few hundred steps. quickstart_prompts.jsonl: short
prompts for the quickstart's PPO run (its reward pays for the letter "a").
"""
import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "recipes" / "data"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def word(rng, lo=3, hi=8):
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(lo, hi)))


def main():
    DATA.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1234)
    with open(DATA / "sft_tiny.jsonl", "w") as out:
        for _ in range(256):
            w = word(rng)
            out.write(json.dumps({"input": f"reverse: {w}\n", "output": w[::-1]}) + "\n")
    rng = random.Random(5678)
    with open(DATA / "quickstart_prompts.jsonl", "w") as out:
        for _ in range(64):
            out.write(json.dumps({"prompt": f"{word(rng)} {word(rng)}:"}) + "\n")


if __name__ == "__main__":
    main()
