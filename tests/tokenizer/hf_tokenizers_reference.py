#!/usr/bin/env python3
"""Encodes and decodes test strings with Hugging Face's own `tokenizers`
package (the project's .venv, scripts/setup.sh --test), the reference for
meshrun's tokenizer.json normalizers.
Usage: hf_tokenizers_reference.py OUT_JSON TOKENIZER_DIR...
OUT_JSON gets, per directory, a list of {"text", "ids", "decoded"}."""
import json
import random
import sys

from tokenizers import Tokenizer

FIXED = [
    "", " ", "Hello World", "  Leading and trailing  ", "\u00a0\u3000wide\u2009spaces\u3000", "a\tb\n\nc  d",
    "café CAFÉ cafe\u0301 CAFE\u0301", "naïve Ångström \u212b A\u030a", "Straße STRASSE ẞ", "İstanbul ISTANBUL ı",
    "ΣΑΣ σας ΌΣΟΣ", "Ǆ ǅ ǆ ǈ", "ﬁ ﬂ ﬃ ＡＢＣ ｱｲｳ ① ² ½ ㎏ ™", "Привет МИР Ёё", "한국어 \u1100\u1161\u11a8 \ud55c",
    "日本語 カタカナ ｶﾀｶﾅ", "e\u0301\u0301 a\u0302\u0323 a\u0323\u0302", "\u0958 \u0344 \u093e\u20dd",
    "O'NEIL's Books", "no accents here", "<Mask> and <mask> and <MASK>", "x<|im_end|>Y<Mask>z",
    "ooo foo boo", "emoji 🙂 👍🏽 🇫🇷", "\u0000control\u007f", "MiXeD 123 ÀÉÎÕÜ",
]


def random_strings(seed, count):
    rng = random.Random(seed)
    alphabet = ["a", "B", "Z", " ", "  ", "\n", "\t", "\u00a0", "\u3000", "é", "E\u0301", "Å", "\u212b", "ß", "ẞ",
                "İ", "Σ", "ﬁ", "①", "ｶ", "ﾞ", "Ǆ", "\u1100", "\u1161", "\u11a8", "한", "\u0323", "\u0302", "Ё", "o",
                "O", "1", "²", "'", "<Mask>", "<mask>", "<|im_end|>", "🙂", "日"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(count)]


def main():
    out = {}
    for directory in sys.argv[2:]:
        tokenizer = Tokenizer.from_file(directory + "/tokenizer.json")
        cases = []
        for text in FIXED + random_strings(11, 200):
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids, "decoded": tokenizer.decode(ids, skip_special_tokens=False)})
        out[directory] = cases
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
