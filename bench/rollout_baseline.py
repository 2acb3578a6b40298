# The Python side of bench/rollout: the same Llama-style model as meshrun's
# (RMSNorm, RoPE, grouped-query attention, SwiGLU, untied lm_head) with a
# KV cache kept the way Hugging Face's eager Llama keeps it (torch.cat of
# past keys and values every step), and a sampling loop with temperature
# and top-p (torch.multinomial), written as a PyTorch user would. Run with
# the project's .venv python (the torch meshrun builds against) at the driver's thread
# count. Prints one line:
#   baseline tokens_per_s=... seconds=... params=...
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.input_layernorm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x, cos, sin, mask, past):
        b, s, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-1, -2) / self.head_dim ** 0.5 + mask
        attn = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)), present


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Layer(a.hidden, a.heads, a.kv_heads, a.intermediate) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
        head_dim = a.hidden // a.heads
        self.inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def forward(self, ids, positions, mask, past):
        angles = positions[:, None, :, None].float() * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(ids)
        presents = []
        for i, layer in enumerate(self.layers):
            x, present = layer(x, cos, sin, mask, None if past is None else past[i])
            presents.append(present)
        return self.lm_head(self.norm(x)), presents


def sample(logits, temperature, top_p):
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
        sorted_probs = sorted_probs * keep
        choice = torch.multinomial(sorted_probs, 1)
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1).squeeze(-1)


@torch.no_grad()
def generate(model, prompts, new_tokens, temperature, top_p):
    b, p = prompts.shape
    positions = torch.arange(p).unsqueeze(0).expand(b, p)
    causal = torch.full((p, p), float("-inf")).triu(1)[None, None]
    logits, past = model(prompts, positions, causal, None)
    tokens = []
    for step in range(new_tokens):
        token = sample(logits[:, -1], temperature, top_p)
        tokens.append(token)
        position = torch.full((b, 1), p + step)
        logits, past = model(token[:, None], position, torch.zeros(1, 1, 1, p + step + 1), past)
    return torch.stack(tokens, 1)


def main():
    parser = argparse.ArgumentParser()
    for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate", "batch", "prompt", "new_tokens",
                 "threads", "repeats"):
        parser.add_argument("--" + name, type=int, required=True)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top_p", type=float, default=0.9)
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Model(a).eval()
    for p in model.parameters():
        nn.init.normal_(p, std=0.02)
    prompts = torch.randint(0, a.vocab, (a.batch, a.prompt))
    generate(model, prompts, 4, a.temperature, a.top_p)  # warm-up
    times = []
    for _ in range(a.repeats):
        start = time.perf_counter()
        generate(model, prompts, a.new_tokens, a.temperature, a.top_p)
        times.append(time.perf_counter() - start)
    seconds = sorted(times)[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    print(f"baseline tokens_per_s={a.batch * a.new_tokens / seconds:.3f} seconds={seconds:.4f} params={params}")


if __name__ == "__main__":
    main()
