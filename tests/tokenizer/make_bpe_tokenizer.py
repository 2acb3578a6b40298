#!/usr/bin/python3
"""Writes a small byte-level BPE tokenizer in the exact tokenizer.json layout
of Llama 3 or Qwen2 (their split regex, pre-tokenizer, added tokens,
post-processor, decoder) with a matching tokenizer_config.json and chat
template. The merges are trained here on a generated multilingual corpus,
so no download is needed. Usage: make_bpe_tokenizer.py llama3|qwen2 OUT_DIR
"""
import collections
import json
import os
import random
import sys

import regex

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")

WORDS = ("the of and to in is was for that with as on by at from it this be are were have has not but "
         "token tokenizer tokens model training language large distributed gradient optimizer learning rate "
         "hello world don't we'll they're I'm you've she'd it's THE HELLO Hello World "
         "café naïve émigré straße über Größe ça façon "
         "Привет мир данные обучение модель "
         "日本語 テキスト 東京 学習 中文 数据 模型 训练 "
         "안녕하세요 세계 مرحبا بالعالم שלום עולם नमस्ते दुनिया "
         "🙂 🚀 👍🏽 ❤️ 🇫🇷").split()


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


def corpus(seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(3000):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randint(0, len(words)), str(rng.randint(0, 10 ** rng.randint(1, 7))))
        if rng.random() < 0.2:
            words.insert(rng.randint(0, len(words)), rng.choice(["(x)", "{}", "->", "==", "...", "!?", "#", "$5"]))
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ",", "", "\n"]))
    return "\n".join(lines)


def train(text, pattern, merges_wanted):
    byte_map = bytes_to_unicode()
    words = collections.Counter(
        tuple(byte_map[b] for b in piece.encode("utf-8")) for piece in regex.findall(pattern, text))
    vocab = [byte_map[b] for b in range(256)]
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        vocab.append(best[0] + best[1])
        merged = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return vocab, merges


def added(id_, content, special=True):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def byte_level(add_prefix_space, trim_offsets, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def read_template(name):
    with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as f:
        return f.read()


def llama3(vocab, merges):
    byte_map = bytes_to_unicode()
    # Whole words present in the vocabulary without a merge path to them:
    # only ignore_merges makes them one token, as in Llama 3.
    for word in ["Ġtokenization", "Ġunreachable", "Ġ" + "".join(byte_map[b] for b in "Größe".encode())]:
        if word not in vocab:
            vocab.append(word)
    base = len(vocab)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|reserved_special_token_2|>", "<|reserved_special_token_3|>", "<|start_header_id|>",
             "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    names += ["<|reserved_special_token_%d|>" % i for i in range(5, 251)]
    tokens = [added(base + i, name) for i, name in enumerate(names)]
    bos = base
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": tokens,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level(False, True, False)]},
        "post_processor": {"type": "Sequence", "processors": [
            byte_level(True, False, True),
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": byte_level(True, True, True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {token: i for i, token in enumerate(vocab)},
                  "merges": ["%s %s" % pair for pair in merges]},
    }
    config = {
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tokens},
        "bos_token": "<|begin_of_text|>",
        "chat_template": read_template("llama3_instruct.jinja"),
        "clean_up_tokenization_spaces": True,
        "eos_token": "<|eot_id|>",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return tokenizer, config


def qwen2(vocab, merges):
    base = len(vocab)
    tokens = [added(base, "<|endoftext|>"), added(base + 1, "<|im_start|>"), added(base + 2, "<|im_end|>")]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": tokens,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level(False, False, False)]},
        "post_processor": byte_level(False, False, False),
        "decoder": byte_level(False, False, False),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {token: i for i, token in enumerate(vocab)},
                  "merges": [list(pair) for pair in merges]},
    }
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tokens},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": read_template("qwen2_instruct.jinja"),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    return tokenizer, config


def main():
    kind, out_dir = sys.argv[1], sys.argv[2]
    pattern = LLAMA3_PATTERN if kind == "llama3" else QWEN2_PATTERN
    vocab, merges = train(corpus(1234), pattern, 400)
    tokenizer, config = (llama3 if kind == "llama3" else qwen2)(vocab, merges)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=2)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    main()
