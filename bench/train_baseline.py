# The Python side of bench/train: the same Llama-style model and SFT step as
# meshrun's (RMSNorm, RoPE, grouped-query attention, SwiGLU, untied lm_head,
# causal attention, cross-entropy over all tokens, AdamW, gradient clipping),
# written the way a PyTorch user would, run in the project's .venv on the
# torch meshrun is built against, at the thread count the driver gives.
# With --compile the forward and loss go through torch.compile (inductor;
# backward compiled with them), the way a user after speed would run it;
# compilation happens in the warm-up steps and is not timed. With
# --checkpointing each layer goes through torch.utils.checkpoint (non-reentrant),
# keeping its input only. Prints one line:
#   baseline tokens_per_s=... step_s=... params=... peak_mb=... torch=...
# (peak_mb: on a GPU the peak of allocated device memory over the whole run,
# on the CPU the process's peak resident set), or, where the device runs out
# of memory, `baseline out_of_memory params=...`.
# and, with --matmul, the fp32 matmul rate of this machine at that thread
# count (the ceiling both sides are compared with).
import argparse
import math
import resource
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.input_layernorm = RMSNorm(hidden, eps)
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if x.is_cuda:
            # On a GPU a user calls the fused kernels.
            attention = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
            x = x + self.o_proj(attention.transpose(1, 2).reshape(b, t, -1))
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        attention = torch.matmul(torch.softmax(scores, dim=-1), v)
        x = x + self.o_proj(attention.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Model(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, kv_heads, intermediate, theta=10000.0, eps=1e-6,
                 checkpointing=False):
        super().__init__()
        self.checkpointing = checkpointing
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads, kv_heads, intermediate, eps) for _ in range(layers))
        self.norm = RMSNorm(hidden, eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.head_dim, self.theta = hidden // heads, theta

    def forward(self, ids):
        t, device = ids.shape[1], ids.device
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device)
                                         / self.head_dim))
        freqs = torch.outer(torch.arange(t, dtype=torch.float32, device=device), inv_freq)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        mask = torch.full((t, t), float("-inf"), device=device).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
            else:
                x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def matmul_gflops(device, seconds=2.0):
    n, dtype = (8192, torch.bfloat16) if device == "cuda" else (1024, torch.float32)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    torch.mm(a, b)
    synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        count += 1
        if count % 16 == 0:
            synchronize(device)
    synchronize(device)
    return 2 * n**3 * count / (time.perf_counter() - start) / 1e9


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser()
    for name, default in [("vocab", 4096), ("hidden", 512), ("layers", 6), ("heads", 8), ("kv_heads", 8),
                          ("intermediate", 1408), ("seq", 256), ("batch", 8), ("steps", 6), ("warmup", 2),
                          ("threads", 2)]:
        parser.add_argument("--" + name, type=int, default=default)
    parser.add_argument("--matmul", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.matmul:
        print(f"matmul gflops={matmul_gflops(args.device):.3f}", flush=True)
        return
    # On a GPU: fp32 parameters under bf16 autocast and the fused AdamW, as a
    # user would train there (meshrun: bf16 weights, fp32 masters).
    gpu = args.device == "cuda"
    # Made on the device itself: an 8B model initialised on the host first
    # would spend a minute there.
    shape = (args.vocab, args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate)
    try:
        with torch.device(args.device):
            model = Model(*shape, checkpointing=args.checkpointing)
        run(args, model, gpu, sum(p.numel() for p in model.parameters()))
    except Exception as error:  # torch.OutOfMemoryError, or inductor's wrapping of one
        if not isinstance(error, torch.OutOfMemoryError) and "out of memory" not in str(error).lower():
            raise
        print(f"baseline out_of_memory params={parameter_count(*shape)}", flush=True)


def parameter_count(vocab, hidden, layers, heads, kv_heads, intermediate):
    head_dim = hidden // heads
    layer = 2 * hidden + 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * intermediate
    return 2 * vocab * hidden + layers * layer + hidden


def run(args, model, gpu, params):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0,
                                  fused=True if gpu else None)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=args.device)
    inputs, labels = ids[:, :-1], ids[:, 1:]

    def forward_loss(inputs, labels):
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=gpu):
            logits = model(inputs)
        return F.cross_entropy(logits.float().reshape(-1, args.vocab), labels.reshape(-1))

    step_loss = torch.compile(forward_loss) if args.compile else forward_loss
    timings = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        loss = step_loss(inputs, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(args.device)
        if step >= args.warmup:
            timings.append(time.perf_counter() - start)
    timings.sort()
    step_s = timings[len(timings) // 2]
    if gpu:
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"baseline tokens_per_s={args.batch * args.seq / step_s:.3f} step_s={step_s:.6f} params={params} "
          f"peak_mb={peak_mb:.1f} loss={loss.item():.6f} torch={torch.__version__.split('+')[0]}", flush=True)


if __name__ == "__main__":
    main()
