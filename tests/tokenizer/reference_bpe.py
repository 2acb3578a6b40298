#!/usr/bin/python3
"""An independent byte-level BPE encoder for tokenizer.json files (the
textbook GPT-2 algorithm with the `regex` module), the reference meshrun's
tokenizer is compared with. It also generates the test strings.
Usage: reference_bpe.py TOKENIZER_DIR OUT_JSON
OUT_JSON gets a list of {"text", "ids", "ids_special", "decoded"} (decoded: the
text after the normalizer)."""
import json
import random
import sys
import unicodedata

import regex


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


class Reference:
    def __init__(self, tokenizer):
        model = tokenizer["model"]
        self.vocab = model["vocab"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.ignore_merges = model.get("ignore_merges", False)
        self.byte_map = bytes_to_unicode()
        steps = tokenizer["pre_tokenizer"]["pretokenizers"]
        self.pattern = regex.compile(steps[0]["pattern"]["Regex"])
        self.added = sorted(tokenizer["added_tokens"], key=lambda t: -len(t["content"]))
        self.nfc = (tokenizer.get("normalizer") or {}).get("type") == "NFC"
        self.prefix = []
        processors = tokenizer["post_processor"].get("processors", [tokenizer["post_processor"]])
        for processor in processors:
            if processor["type"] == "TemplateProcessing":
                for item in processor["single"]:
                    if "Sequence" in item:
                        break
                    self.prefix += processor["special_tokens"][item["SpecialToken"]["id"]]["ids"]

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), float("inf")), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, _ = min(pairs)
            if rank == float("inf"):
                break
            pair = min(pairs)[1]
            best = (parts[pair], parts[pair + 1])
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return [self.vocab[p] for p in parts]

    def encode_plain(self, text):
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        ids = []
        for piece in self.pattern.findall(text):
            word = "".join(self.byte_map[b] for b in piece.encode("utf-8"))
            if self.ignore_merges and word in self.vocab:
                ids.append(self.vocab[word])
            else:
                ids += self.bpe(word)
        return ids

    def encode(self, text, add_special):
        ids = list(self.prefix) if add_special else []
        start = 0
        i = 0
        while i < len(text):
            for token in self.added:
                if text.startswith(token["content"], i):
                    ids += self.encode_plain(text[start:i])
                    ids.append(token["id"])
                    i += len(token["content"])
                    start = i
                    break
            else:
                i += 1
        return ids + self.encode_plain(text[start:])


FIXED = [
    "", "a", " ", "  ", "\n", "\n\n\n", "\t", " \t\n ", "Hello world", "hello  world", "Hello   world\n",
    "don't you're we'll I'M HE'S they'd ve'", "The model's training", "123", "1234567", "3.14159", "x=10000000",
    "1,000,000 and 12 34 567 8901", "café naïve émigré", "Straße Größe über", "Привет, мир!", "日本語のテキスト",
    "数据 模型 训练", "안녕하세요 세계", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "🙂🚀👍🏽", "I ❤️ 🇫🇷 !",
    "emoji🙂inside", "tabs\tand\ttext", "line one\r\nline two\rthree", "   leading spaces", "trailing spaces   ",
    "mixed \n\n  indentation\n    deeper", "def f(x):\n    return x ** 2  # square\n", "{\"json\": [1, 2, 3]}",
    "<|begin_of_text|>Hello<|eot_id|>", "a<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|im_start|>user\nHi<|im_end|>\n", "<|endoftext|><|endoftext|>", "< |not special| >", "<|reserved_special_token_42|>x",
    "<|begin_of_text", "tokenization unreachable Größe", " tokenization", "the of and to in is",
    "ÀÁÂÃÄÅ\u00a0non-breaking\u2009thin\u3000ideographic", "zero\u200bwidth", "\u0000\u0001\u007f control",
    # Not in NFC: decomposed accents, marks out of canonical order, the
    # Angstrom sign, Hangul jamo, a composition exclusion.
    "cafe\u0301 nai\u0308ve", "a\u0302\u0323 a\u0323\u0302", "\u212b \u00c5 A\u030a", "\u1100\u1161\u11a8 \ud55c",
    "\u0958 \u0344 e\u0301\u0301",
]


def random_strings(seed, count):
    rng = random.Random(seed)
    alphabet = ["a", "b", "Z", " ", "  ", "\n", "\t", "'", "'s", "1", "23", "456", ".", ",", "!", "?", "é", "ß",
                "я", "日", "本", "🙂", "👍🏽", "\u0301", "<|im_end|>", "<|eot_id|>", "-", "_", "the", " the", "ing",
                "\u0323", "\u0302", "\u1100", "\u1161", "\u11a8", "\u212b", "\u00c5", "o\u0308"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def main():
    with open(sys.argv[1] + "/tokenizer.json", encoding="utf-8") as f:
        reference = Reference(json.load(f))
    cases = []
    for text in FIXED + random_strings(7, 300):
        normalized = unicodedata.normalize("NFC", text) if reference.nfc else text
        cases.append({"text": text, "ids": reference.encode(text, False), "ids_special": reference.encode(text, True),
                      "decoded": normalized})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
