#!/usr/bin/python3
"""The PyTorch twin of decode_bench: the same models, the same timing protocol and the
same JSON lines (see bench/README.md, "Decoding"). Run it with /usr/bin/python3
(Debian's python3-torch 1.13).

The model is written straightforwardly, GPT-2 style, in float32 under eval() and
no_grad():

    x = tok_emb[tokens] + pos_emb[positions]
    pre-norm blocks: x = x + attn(ln1(x)); x = x + mlp(ln2(x))
    attn: q (H d_k), k and v (G d_k) projections with bias, scores q . k / sqrt(d_k),
          causal, softmax, P V, out_proj; query head j reads kv head j / (H / G)
    mlp: fc1 (4 d_model), exact GELU, fc2; then ln_f and an untied head

torch 1.13 has no F.scaled_dot_product_attention, so attention is matmul + softmax.
The KV cache is per layer, preallocated: K and V (1, G, max_len, d_k), written in
place at the new positions. For a decode step (one new token) the g = H / G query
heads of a group are a (1, G, g, d_k) view of q, so one batched matmul per group
reads the group's cached K and V, (1, G, c, d_k), without copying them per query
head; the prefill and the full forward stack the group's heads along time, as
torch_train_step.py does, with the causal mask.

Timing, per (kv config, L), per rep, batch 1: the n (--steps) tokens at contexts
L - n + 1 .. L. Cached: the cache is emptied and prefilled with L - n tokens (not
timed), then n single-token forwards, each on its own clock. Full: n forwards over
the whole context, (1, c) for c = L - n + 1 .. L. A rep's tok/s is n over the sum of
its n times (and, as cached_cpu_tok_s and full_cpu_tok_s, over their process CPU
time); the median over --reps reps after --warmup, the two paths alternating.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--kv", default="mha,gqa,mqa", help="mha (G = h), gqa (G = h/4), mqa (G = 1), or a number")
    p.add_argument("--contexts", default="64,128,256,512,1024")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    for flag in ("d_model", "heads", "layers", "max_len", "vocab", "steps", "reps", "threads"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(a, flag)}")
    if a.d_model % a.heads != 0:
        p.error(f"--d-model {a.d_model} is not a multiple of --heads {a.heads}")
    a.kv_configs = []
    for name in [s for s in a.kv.split(",") if s]:
        if name == "mha":
            g = a.heads
        elif name == "gqa":
            if a.heads % 4 != 0:
                p.error(f"--kv gqa needs --heads divisible by 4, got {a.heads}")
            g = a.heads // 4
        elif name == "mqa":
            g = 1
        elif name.isdigit() and int(name) > 0:
            g, name = int(name), f"kv{name}"
        else:
            p.error(f"--kv: unknown config '{name}'")
        if a.heads % g != 0:
            p.error(f"--heads {a.heads} is not a multiple of kv heads {g}")
        a.kv_configs.append((name, g))
    a.lengths = []
    for s in [s for s in a.contexts.split(",") if s]:
        if not s.isdigit() or not a.steps < int(s) <= a.max_len:
            p.error(f"--contexts: {s} must be above --steps {a.steps} and at most --max-len {a.max_len}")
        a.lengths.append(int(s))
    return a


ARGS = parse_args()
# As torch_train_step.py: the BLAS library's own pool reads these at `import torch`.
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Attention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, max_len):
        super().__init__()
        self.H, self.G, self.d = n_heads, n_kv_heads, d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d)
        self.out_proj = nn.Linear(d_model, d_model)
        mask = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def grouped(self, q, k, v, offset):
        """q (1, T, H, d), k and v (1, G, S, d) with S = offset + T -> (1, T, H d)."""
        B, T = q.shape[0], q.shape[1]
        H, G, d = self.H, self.G, self.d
        g, S = H // G, k.shape[2]
        q = q.view(B, T, G, g, d).permute(0, 2, 3, 1, 4).reshape(B, G, g * T, d)  # (B, G, g T, d)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, G, g T, S)
        if T > 1:
            mask = self.causal_mask[offset:offset + T, :S]  # (T, S)
            scores = scores.view(B, G, g, T, S).masked_fill(mask, float("-inf")).view(B, G, g * T, S)
        attn = torch.softmax(scores, dim=-1)
        return (attn @ v).view(B, G, g, T, d).permute(0, 3, 1, 2, 4).reshape(B, T, H * d)

    def forward(self, x, cache=None, pos=0):  # x (1, T, C); cache (K, V), each (1, G, max_len, d)
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.d)
        k = self.k_proj(x).view(B, T, self.G, self.d).transpose(1, 2)  # (B, G, T, d)
        v = self.v_proj(x).view(B, T, self.G, self.d).transpose(1, 2)
        if cache is not None:
            cache[0][:, :, pos:pos + T] = k
            cache[1][:, :, pos:pos + T] = v
            k, v = cache[0][:, :, :pos + T], cache[1][:, :, :pos + T]  # (B, G, pos + T, d), views
        return self.out_proj(self.grouped(q, k, v, pos))


class Block(nn.Module):
    def __init__(self, a, g):
        super().__init__()
        self.ln1 = nn.LayerNorm(a.d_model)
        self.attn = Attention(a.d_model, a.heads, g, a.max_len)
        self.ln2 = nn.LayerNorm(a.d_model)
        self.fc1 = nn.Linear(a.d_model, 4 * a.d_model)
        self.fc2 = nn.Linear(4 * a.d_model, a.d_model)

    def forward(self, x, cache=None, pos=0):
        x = x + self.attn(self.ln1(x), cache, pos)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, a, g):
        super().__init__()
        self.tok_emb = nn.Embedding(a.vocab, a.d_model)
        self.pos_emb = nn.Embedding(a.max_len, a.d_model)
        self.blocks = nn.ModuleList(Block(a, g) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.d_model)
        self.head = nn.Linear(a.d_model, a.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, tokens, caches=None, pos=0):  # tokens (1, T) -> logits (1, T, V)
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb.weight[pos:pos + T]
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], pos)
        return self.head(self.ln_f(x))


def bench_one(a, model, caches, ids, L):
    n = a.steps
    prefill = L - n
    cached, full, cached_cpu, full_cpu = [], [], [], []
    cached_logits, full_logits = [None] * n, [None] * n
    for rep in range(a.warmup + a.reps):
        for c in caches:  # emptied: the positions written again before they are read
            c[0].zero_()
            c[1].zero_()
        model(ids[:, :prefill], caches, 0)
        t_cached = c_cached = 0.0
        for k in range(n):
            c0 = time.process_time()
            t0 = time.perf_counter()
            logits = model(ids[:, prefill + k:prefill + k + 1], caches, prefill + k)
            t_cached += time.perf_counter() - t0
            c_cached += time.process_time() - c0
            cached_logits[k] = logits[0, -1]
        t_full = c_full = 0.0
        for k in range(n):
            c0 = time.process_time()
            t0 = time.perf_counter()
            logits = model(ids[:, :prefill + k + 1])
            t_full += time.perf_counter() - t0
            c_full += time.process_time() - c0
            full_logits[k] = logits[0, -1]
        if rep >= a.warmup:
            cached.append(n / t_cached)
            full.append(n / t_full)
            cached_cpu.append(n / c_cached)
            full_cpu.append(n / c_full)
    diff = max(float((x - y).abs().max()) for x, y in zip(cached_logits, full_logits))
    med = statistics.median
    return med(cached), med(full), med(cached_cpu), med(full_cpu), diff


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, a.vocab, (1, a.max_len), generator=gen)
    d = a.d_model // a.heads
    with torch.no_grad():
        for name, g in a.kv_configs:
            torch.manual_seed(a.seed + 1)
            model = LM(a, g).eval()
            params = sum(p.numel() for p in model.parameters())
            caches = [(torch.zeros(1, g, a.max_len, d), torch.zeros(1, g, a.max_len, d)) for _ in range(a.layers)]
            bytes_per_token = a.layers * g * 2 * d * 4
            for L in a.lengths:
                c, f, c_cpu, f_cpu, diff = bench_one(a, model, caches, ids, L)
                print(f"torch: {name} (G {g}) L {L}: cached {c:.1f} tok/s, full {f:.1f} tok/s",
                      file=sys.stderr, flush=True)
                print(json.dumps({
                    "impl": "torch", "kv": name, "d_model": a.d_model, "n_heads": a.heads, "n_kv_heads": g,
                    "n_layers": a.layers, "max_len": a.max_len, "vocab": a.vocab, "threads": a.threads,
                    "parameters": params, "context": L, "steps": a.steps, "reps": a.reps, "warmup": a.warmup,
                    "mean_context": L - 0.5 * (a.steps - 1), "cached_tok_s": round(c, 2), "full_tok_s": round(f, 2),
                    "cached_over_full": round(c / f, 3),
                    "cached_cpu_tok_s": round(c_cpu, 2), "full_cpu_tok_s": round(f_cpu, 2), "kv_bytes_per_token": bytes_per_token,
                    "kv_bytes": bytes_per_token * L, "max_abs_logit_diff": diff,
                    "torch_version": torch.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
