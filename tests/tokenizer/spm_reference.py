#!/usr/bin/python3
"""Python sentencepiece's view of a tokenizer.model, the reference for
meshrun's SentencePiece tokenizer. Usage: spm_reference.py MODEL OUT_JSON
OUT_JSON: {"bos", "eos", "pad", "unk", "vocab_size", "cases": [{"text", "ids", "decoded"}]}"""
import json
import sys

import sentencepiece

TEXTS = ["", "Hello world", "hello  world  ", " leading space", "The quick brown fox jumps over the lazy dog.",
         "distributed training of large language models", "café naïve", "Привет мир", "日本語のテキスト",
         "unseen characters: Ω ∑ 🙂 🚀 ẞ", "digits 1234567890", "tabs\tand\nnewlines\n", "mixed 日本 and english 🙂!"]


def main():
    processor = sentencepiece.SentencePieceProcessor(model_file=sys.argv[1])
    cases = []
    for text in TEXTS:
        ids = processor.encode(text)
        cases.append({"text": text, "ids": ids, "decoded": processor.decode(ids)})
    result = {"bos": processor.bos_id(), "eos": processor.eos_id(), "pad": processor.pad_id(),
              "unk": processor.unk_id(), "vocab_size": processor.get_piece_size(), "cases": cases}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
