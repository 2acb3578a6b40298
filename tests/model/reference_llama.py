#!/usr/bin/python3
"""Independent reference for meshrun's Llama-style model (tests/model/reference_test.cpp).

    reference_llama.py OUTDIR

For each case, builds a tiny random model with the plain PyTorch below
(RMSNorm, rotary embeddings with Hugging Face's rotate_half convention,
grouped-query attention by repeating k/v heads, Qwen3's per-head q/k norms and
own head_dim, SwiGLU MLP, Phi-3's fused qkv_proj and gate_up_proj with its
sliding window on every layer), writes it as a
Hugging Face model directory OUTDIR/CASE (config.json and model.safetensors,
written by the minimal writer below, since the safetensors package is not
installed) and OUTDIR/CASE/expected.safetensors with the inputs and the fp32
logits. Nothing here imports meshrun or transformers.
"""
import json
import math
import os
import struct
import sys

import torch

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64"}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """8-byte little-endian header length, JSON header, raw little-endian bytes."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        raw = tensor_bytes(t)
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()  # deliberately not padded: offsets end up unaligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


# ---- the model -------------------------------------------------------------

def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def original_context(cfg, scaling):
    """original_max_position_embeddings: Phi-3 keeps it at the top level (Phi3Config's default 4096)."""
    if cfg.get("original_max_position_embeddings"):
        return cfg["original_max_position_embeddings"]
    if cfg["model_type"] == "phi3" and scaling.get("rope_type", scaling.get("type")) in ("longrope", "su"):
        return 4096
    return scaling.get("original_max_position_embeddings") or cfg["max_position_embeddings"]


def inverse_frequencies(cfg, largest_position):
    """The inverse frequencies [head_dim / 2] and the scale on cos and sin."""
    dim = head_dim(cfg)
    base = cfg.get("rope_theta", 10000.0)
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "dynamic":
        length = largest_position + 1
        limit = cfg["max_position_embeddings"]
        if length > limit:
            factor = scaling["factor"]
            base = base * ((factor * length / limit) - (factor - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scale = 1.0
    if kind == "linear":
        inv = inv / scaling["factor"]
    elif kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        out = []
        for f in inv.tolist():
            wavelength = 2 * math.pi / f
            if wavelength < old / high:
                out.append(f)
            elif wavelength > old / low:
                out.append(f / factor)
            else:
                smooth = (old / wavelength - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        inv = torch.tensor(out, dtype=torch.float32)
    elif kind == "yarn":
        # YaRN (arXiv 2309.00071), with the factor as given (as vLLM takes it).
        factor = scaling["factor"]
        old = original_context(cfg, scaling)
        fast, slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

        def index_turning(rotations):  # the frequency index that turns `rotations` times over old positions
            return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = index_turning(fast), index_turning(slow)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if high == low:
            high += 0.001
        out = []
        for i, f in enumerate(inv.tolist()):
            weight = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: extrapolate (fast), 1: interpolate
            out.append(weight * f / factor + (1 - weight) * f)
        inv = torch.tensor(out, dtype=torch.float32)

        def mscale(m):
            return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

        if scaling.get("attention_factor") is not None:
            scale = scaling["attention_factor"]
        elif scaling.get("mscale") and scaling.get("mscale_all_dim"):
            scale = mscale(scaling["mscale"]) / mscale(scaling["mscale_all_dim"])
        else:
            scale = mscale(1.0)
    elif kind in ("longrope", "su"):
        old = original_context(cfg, scaling)
        factors = scaling["long_factor"] if largest_position + 1 > old else scaling["short_factor"]
        inv = inv / torch.tensor(factors, dtype=torch.float32)
        factor = cfg["max_position_embeddings"] / old
        if scaling.get("attention_factor") is not None:
            scale = scaling["attention_factor"]
        else:
            scale = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(old))
    return inv, scale


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def attention(x, p, cfg, cos, sin, allowed):
    b, s, _ = x.shape
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = head_dim(cfg)

    def project(name, n, norm=None):
        y = x @ p[name + ".weight"].t()
        if name + ".bias" in p:
            y = y + p[name + ".bias"]
        y = y.view(b, s, n, d)
        if norm and norm + ".weight" in p:  # Qwen3: RMSNorm over each head
            y = rms_norm(y, p[norm + ".weight"], cfg["rms_norm_eps"])
        return y.transpose(1, 2)

    if "qkv_proj.weight" in p:  # Phi-3: one projection, its outputs q, then k, then v
        qkv = x @ p["qkv_proj.weight"].t()
        q_end, k_end = heads * d, heads * d + kv_heads * d
        q = qkv[..., :q_end].reshape(b, s, heads, d).transpose(1, 2)
        k = qkv[..., q_end:k_end].reshape(b, s, kv_heads, d).transpose(1, 2)
        v = qkv[..., k_end:].reshape(b, s, kv_heads, d).transpose(1, 2)
    else:
        q, k = project("q_proj", heads, "q_norm"), project("k_proj", kv_heads, "k_norm")
        v = project("v_proj", kv_heads)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    scores = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
    probs = torch.softmax(scores.float(), dim=-1)
    out = (probs @ v).transpose(1, 2).reshape(b, s, heads * d)
    out = out @ p["o_proj.weight"].t()
    return out + p["o_proj.bias"] if "o_proj.bias" in p else out


def forward(cfg, w, ids, positions, sequence_ids=None, attention_mask=None):
    b, s = ids.shape
    eps = cfg["rms_norm_eps"]
    inv, scale = inverse_frequencies(cfg, int(positions.max()))
    angles = positions.float()[..., None] * inv  # [b, s, d/2]
    angles = torch.cat((angles, angles), dim=-1)[:, None]  # [b, 1, s, d]
    cos, sin = angles.cos() * scale, angles.sin() * scale
    i = torch.arange(s)
    allowed = (i[None, :] <= i[:, None])[None].expand(b, s, s)
    if cfg.get("sliding_window"):  # Mistral / Phi-3: a query sees the last sliding_window keys
        allowed = allowed & (i[:, None] - i[None, :] < cfg["sliding_window"])[None]
    if sequence_ids is not None:
        allowed = allowed & (sequence_ids[:, :, None] == sequence_ids[:, None, :])
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, :]
    allowed = allowed[:, None]
    h = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        prefix = "model.layers.%d." % layer
        attn = {k[len(prefix + "self_attn."):]: v for k, v in w.items() if k.startswith(prefix + "self_attn.")}
        h = h + attention(rms_norm(h, w[prefix + "input_layernorm.weight"], eps), attn, cfg, cos, sin, allowed)
        x = rms_norm(h, w[prefix + "post_attention_layernorm.weight"], eps)
        if prefix + "mlp.gate_up_proj.weight" in w:  # Phi-3: gate, up = chunk(2) of one projection
            gate, up = (x @ w[prefix + "mlp.gate_up_proj.weight"].t()).chunk(2, dim=-1)
        else:
            gate = x @ w[prefix + "mlp.gate_proj.weight"].t()
            up = x @ w[prefix + "mlp.up_proj.weight"].t()
        h = h + (torch.nn.functional.silu(gate) * up) @ w[prefix + "mlp.down_proj.weight"].t()
    h = rms_norm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.t()


def random_weights(cfg, generator):
    hidden, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = head_dim(cfg)
    q_dim, kv_dim = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    qkv_bias = cfg["model_type"] == "qwen2" or cfg.get("attention_bias", False)
    o_bias = cfg.get("attention_bias", False)
    qk_norm = cfg["model_type"] == "qwen3"
    fused = cfg["model_type"] == "phi3"

    def normal(*shape, std=0.2):
        return torch.randn(*shape, generator=generator) * std

    def norm_weight():
        return 1.0 + normal(hidden, std=0.1)

    w = {"model.embed_tokens.weight": normal(vocab, hidden, std=0.5)}
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        w[p + "input_layernorm.weight"] = norm_weight()
        if fused:
            w[p + "self_attn.qkv_proj.weight"] = normal(q_dim + 2 * kv_dim, hidden)
        for name, rows in (("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)) if not fused else ():
            w[p + "self_attn.%s.weight" % name] = normal(rows, hidden)
            if qkv_bias:
                w[p + "self_attn.%s.bias" % name] = normal(rows)
        w[p + "self_attn.o_proj.weight"] = normal(hidden, q_dim)
        if o_bias:
            w[p + "self_attn.o_proj.bias"] = normal(hidden)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = 1.0 + normal(d, std=0.1)
            w[p + "self_attn.k_norm.weight"] = 1.0 + normal(d, std=0.1)
        w[p + "post_attention_layernorm.weight"] = norm_weight()
        if fused:
            w[p + "mlp.gate_up_proj.weight"] = normal(2 * inter, hidden)
        else:
            w[p + "mlp.gate_proj.weight"] = normal(inter, hidden)
            w[p + "mlp.up_proj.weight"] = normal(inter, hidden)
        w[p + "mlp.down_proj.weight"] = normal(hidden, inter)
    w["model.norm.weight"] = norm_weight()
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = normal(vocab, hidden)
    return w


# ---- the cases ---------------------------------------------------------------

def base_config(**changes):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
           "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 40, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "hidden_act": "silu", "torch_dtype": "float32"}
    cfg.update(changes)
    return cfg


def packed_inputs(generator, vocab):
    ids = torch.randint(0, vocab, (2, 10), generator=generator)
    sequence_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2, 2], [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]])
    positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 3, 4, 5, 0, 1, 2, 3]])
    return {"input_ids": ids, "sequence_ids": sequence_ids, "position_ids": positions}


def padded_inputs(generator, vocab):
    ids = torch.randint(0, vocab, (2, 8), generator=generator)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0]])  # left- and right-padded
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


CASES = {
    "gqa_untied": (base_config(), None, torch.float32),
    "tied_mha": (base_config(num_key_value_heads=4, tie_word_embeddings=True), None, torch.float32),
    "qwen2_bias": (base_config(architectures=["Qwen2ForCausalLM"], model_type="qwen2", tie_word_embeddings=True,
                               rope_theta=1000000.0, rms_norm_eps=1e-6), None, torch.float32),
    "qwen3_qk_norm": (base_config(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16,
                                  tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6), None,
                      torch.float32),
    "qwen3_attention_bias": (base_config(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=12,
                                         attention_bias=True), "packed", torch.float32),
    # Phi-3's layout: fused projections in the file, a window shorter than the inputs on every layer, and
    # the keys of its config.json that meshrun builds only at these values.
    "phi3_fused": (base_config(architectures=["Phi3ForCausalLM"], model_type="phi3", sliding_window=5,
                               partial_rotary_factor=1.0, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
                               pad_token_id=None), None, torch.float32),
    "phi3_packed_mha": (base_config(architectures=["Phi3ForCausalLM"], model_type="phi3", num_key_value_heads=4,
                                    sliding_window=3), "packed", torch.float32),
    "llama3_rope": (base_config(rope_theta=500000.0, num_attention_heads=2, num_key_value_heads=1, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}), "long", torch.float32),
    "linear_rope": (base_config(rope_scaling={"type": "linear", "factor": 2.0}), "long", torch.float32),
    "dynamic_rope": (base_config(max_position_embeddings=8, rope_scaling={"type": "dynamic", "factor": 2.0}),
                     None, torch.float32),
    # YaRN as Qwen2.5 / Qwen3 configs give it (factor and the original context), over head_dim 16 and a low
    # rope_theta so that the blended band spans several frequencies; then DeepSeek's keys on the context of
    # max_position_embeddings, untruncated.
    "yarn_rope": (base_config(rope_theta=100.0, num_attention_heads=2, num_key_value_heads=1,
                              max_position_embeddings=256, rope_scaling={
                                  "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
                  "long", torch.float32),
    "yarn_mscale": (base_config(rope_theta=50.0, num_attention_heads=2, num_key_value_heads=1, rope_scaling={
        "type": "yarn", "factor": 3.0, "beta_fast": 8, "beta_slow": 2, "mscale": 1.0, "mscale_all_dim": 0.5,
        "truncate": False}), "long", torch.float32),
    # Phi-3 128k's longrope: per-frequency divisors, the long ones once positions pass the original context
    # (top-level original_max_position_embeddings), and the scale from the context's growth.
    "phi3_longrope_long": (base_config(architectures=["Phi3ForCausalLM"], model_type="phi3",
                                       max_position_embeddings=512, original_max_position_embeddings=32,
                                       rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.5, 2.0],
                                                     "long_factor": [1.0, 2.5, 6.0, 13.0]}), "long", torch.float32),
    "phi3_longrope_short": (base_config(architectures=["Phi3ForCausalLM"], model_type="phi3",
                                        max_position_embeddings=512, original_max_position_embeddings=32,
                                        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.5, 2.0],
                                                      "long_factor": [1.0, 2.5, 6.0, 13.0]}), None, torch.float32),
    "packed": (base_config(), "packed", torch.float32),
    "padded": (base_config(), "padded", torch.float32),
    "bf16_weights": (base_config(torch_dtype="bfloat16"), None, torch.bfloat16),
    "fp16_weights": (base_config(torch_dtype="float16"), None, torch.float16),
}


def main():
    out_dir = sys.argv[1]
    torch.set_num_threads(1)
    for index, (name, (cfg, inputs_kind, stored_dtype)) in enumerate(sorted(CASES.items())):
        generator = torch.Generator().manual_seed(1234 + index)
        weights = random_weights(cfg, generator)
        # The stored dtype rounds the weights; the reference runs on the rounded values in fp32.
        weights = {k: v.to(stored_dtype) for k, v in weights.items()}
        compute = {k: v.float() for k, v in weights.items()}
        if inputs_kind == "packed":
            inputs = packed_inputs(generator, cfg["vocab_size"])
        elif inputs_kind == "padded":
            inputs = padded_inputs(generator, cfg["vocab_size"])
        else:
            ids = torch.randint(0, cfg["vocab_size"], (2, 12), generator=generator)
            inputs = {"input_ids": ids}
            if inputs_kind == "long":  # positions far apart exercise every frequency band of the scaling
                inputs["position_ids"] = torch.tensor([list(range(0, 120, 10)), list(range(100, 112))])
        positions = inputs.get("position_ids", torch.arange(inputs["input_ids"].shape[1]).expand_as(inputs["input_ids"]))
        with torch.no_grad():
            logits = forward(cfg, compute, inputs["input_ids"], positions, inputs.get("sequence_ids"),
                             inputs.get("attention_mask"))
        case_dir = os.path.join(out_dir, name)
        os.makedirs(case_dir, exist_ok=True)
        with open(os.path.join(case_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        write_safetensors(os.path.join(case_dir, "model.safetensors"), weights, {"format": "pt"})
        expected = dict(inputs)
        expected["logits"] = logits.float()
        write_safetensors(os.path.join(case_dir, "expected.safetensors"), expected)
    print("wrote %d cases" % len(CASES))


if __name__ == "__main__":
    main()
