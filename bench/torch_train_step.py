#!/usr/bin/python3
"""The PyTorch twin of train_step_bench: the same model, the same training step, the
same measurement and the same one-line JSON output (see bench/README.md).

Run it with /usr/bin/python3 (Debian's python3-torch 1.13). The model follows
the conventions of docs/design.md in plain nn.Module code, so its state_dict carries
headroom's checkpoint names (blocks.0.attn.q_proj.weight, ...):

    x = tok_emb[tokens] + pos_emb[0:T]                   no sqrt(d_model) scaling
    pre-norm blocks: x = x + attn(ln1(x)); x = x + ffn(ln2(x))
    attn: q/k/v/out projections with bias, head-major rows, scores (q . k) / sqrt(d_k),
          causal mask (keys after the query removed), softmax, heads concatenated
    ffn: fc1 (d_ff = 4 d_model), exact GELU, fc2
    ln_f, then an untied head without bias
    loss: mean cross-entropy over all B*T next-token targets

Initialisation is headroom's (GPT-2's): weights N(0, 0.02^2), out_proj and fc2
N(0, (0.02 / sqrt(2 n_layers))^2), biases 0, LayerNorm 1 and 0. The attention is
written out with explicit projections and matmuls rather than nn.MultiheadAttention,
whose fused kernels would make a different comparison.

The keys of docs/design.md #17 that train_step_bench takes have the same flags here,
written in plain torch 1.13 (which has neither nn.RMSNorm nor
scaled_dot_product_attention):

    --kv-heads G    grouped K/V: k_proj, v_proj (G d_k, C); query head j reads kv
                    head j / (H/G). The g = H/G query heads of a group are stacked
                    along time, (B, G, g T, d_k), so one batched matmul per group
                    reads its K and V without copying them per query head.
    --pos rope      no position table; q and k of every layer rotated in the
                    rotate-half pairing (Hugging Face's apply_rotary_pos_emb), the
                    cos/sin tables (T, d_k) made once at construction
    --norm-type rmsnorm   x * rsqrt(mean(x^2) + eps) * weight for ln1, ln2, ln_f
    --ffn swiglu    down_proj(silu(gate_proj(x)) * up_proj(x)), d_ff 8 ceil(C / 3)
    --no-bias       no bias in any Linear

down_proj starts N(0, (0.02 / sqrt(2 n_layers))^2) like fc2, RMSNorm weights at 1.
RMSNorm weights are 1-D, so they fall in the no-decay group like LayerNorm's.

A timed step: zero_grad(set_to_none=True) (headroom drops gradients too), forward +
loss, backward, clip_grad_norm_(1.0), AdamW(lr=1e-3, weight_decay=0.01) step with
headroom's decay exclusion (no decay on biases, LayerNorm and *emb.weight) as two
parameter groups. AdamW runs PyTorch 1.13's default CPU implementation (the
per-tensor loop; foreach is off by default there).
"""

import argparse
import json
import math
import os
import resource
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=0, help="key/value heads G (0: --heads)")
    p.add_argument("--d-ff", type=int, default=0, help="feed-forward width (0: 4 C, or 8 ceil(C/3) with swiglu)")
    p.add_argument("--pos", choices=("learned", "rope", "none"), default="learned")
    p.add_argument("--norm-type", choices=("layernorm", "rmsnorm"), default="layernorm")
    p.add_argument("--ffn", choices=("mlp", "swiglu"), default="mlp")
    p.add_argument("--no-bias", action="store_true", help="Linear layers without bias")
    p.add_argument("--seq-len", type=int, default=32, help="T, tokens per row fed to the model")
    p.add_argument("--batch", type=int, default=16, help="B, rows per step")
    p.add_argument("--vocab", type=int, default=64, help="V, token ids are uniform in [0, V)")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before them")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op and OpenBLAS threads")
    p.add_argument("--seed", type=int, default=0, help="seeds the weights and the batches")
    args = p.parse_args()
    if args.steps <= 0:
        p.error(f"--steps must be positive, got {args.steps}")
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    if args.d_model % args.heads != 0:
        p.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    if args.kv_heads == 0:
        args.kv_heads = args.heads
    if args.kv_heads < 0 or args.heads % args.kv_heads != 0:
        p.error(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    if args.pos == "rope" and (args.d_model // args.heads) % 2 != 0:
        p.error(f"--pos rope needs an even d_k, got {args.d_model // args.heads}")
    if args.d_ff == 0:
        args.d_ff = 4 * args.d_model if args.ffn == "mlp" else 8 * ((args.d_model + 2) // 3)
    return args


ARGS = parse_args()
# torch.set_num_threads sets the OpenMP pool only; the GEMMs go to OpenBLAS
# (BLAS_INFO=generic, libblas.so.3 -> openblas-pthread on Debian), whose own pool
# reads OPENBLAS_NUM_THREADS when the library loads, i.e. at `import torch`.
# Without this, a "1-thread" torch run does its GEMMs on every core.
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rope_tables(max_len, d, base):
    """cos, sin (max_len, d) of Hugging Face's LlamaRotaryEmbedding: angle p theta_i
    in channels i and i + d/2, theta_i = base^(-2i/d)."""
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * theta[None, :]  # (max_len, d/2)
    angles = torch.cat([angles, angles], dim=-1)  # (max_len, d)
    return angles.cos().float(), angles.sin().float()


def rotate_half(x):  # (..., d): (x1, x2) -> (-x2, x1)
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):  # x (B, T, heads, d); cos, sin (T, 1, d)
    return x * cos + rotate_half(x) * sin


class RMSNorm(nn.Module):
    """torch.nn.RMSNorm of later torch versions: x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(d_model, norm_type):
    return nn.LayerNorm(d_model, eps=1e-5) if norm_type == "layernorm" else RMSNorm(d_model, eps=1e-5)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, max_len, out_std, bias, rope):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_k = d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d_k)
        kv = n_kv_heads * self.d_k
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # (H d_k, C), head-major rows
        self.k_proj = nn.Linear(d_model, kv, bias=bias)  # (G d_k, C)
        self.v_proj = nn.Linear(d_model, kv, bias=bias)  # (G d_v, C)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # (C, H d_v)
        self.out_proj.out_std = out_std
        # (max_len, max_len), True above the diagonal: key j is hidden from query i
        # when j > i. Not persistent, so the state_dict holds parameters only.
        mask = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)
        self.rope = rope
        if rope:
            cos, sin = rope_tables(max_len, self.d_k, 10000.0)
            self.register_buffer("rope_cos", cos[:, None, :], persistent=False)  # (max_len, 1, d_k)
            self.register_buffer("rope_sin", sin[:, None, :], persistent=False)

    def split_heads(self, x):  # (B, T, H d) -> (B, H, T, d)
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, -1).transpose(1, 2)

    def forward(self, x):  # x (B, T, C)
        if self.rope or self.n_kv_heads != self.n_heads:
            return self.forward_grouped(x)
        B, T, C = x.shape
        q = self.split_heads(self.q_proj(x))  # (B, H, T, d_k)
        k = self.split_heads(self.k_proj(x))  # (B, H, T, d_k)
        v = self.split_heads(self.v_proj(x))  # (B, H, T, d_v)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, T, T)
        scores = scores.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        attn = torch.softmax(scores, dim=-1)  # (B, H, T, T)
        ctx = (attn @ v).transpose(1, 2).reshape(B, T, C)  # (B, T, H d_v)
        return self.out_proj(ctx)

    def forward_grouped(self, x):  # x (B, T, C); grouped K/V and/or RoPE
        B, T, C = x.shape
        H, G, d = self.n_heads, self.n_kv_heads, self.d_k
        g = H // G
        q = self.q_proj(x).view(B, T, H, d)  # (B, T, H, d_k)
        k = self.k_proj(x).view(B, T, G, d)  # (B, T, G, d_k)
        v = self.v_proj(x).view(B, T, G, d)  # (B, T, G, d_v)
        if self.rope:
            cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, 1, d_k)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Query head j = G' g + r reads kv head G': the group's g heads stacked along
        # time, (B, G, g T, d_k), against the group's one K (B, G, T, d_k).
        q = q.view(B, T, G, g, d).permute(0, 2, 3, 1, 4).reshape(B, G, g * T, d)
        k = k.transpose(1, 2)  # (B, G, T, d_k)
        v = v.transpose(1, 2)  # (B, G, T, d_v)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, G, g T, T)
        scores = scores.view(B, G, g, T, T).masked_fill(self.causal_mask[:T, :T], float("-inf"))
        attn = torch.softmax(scores, dim=-1).view(B, G, g * T, T)
        ctx = (attn @ v).view(B, G, g, T, d).permute(0, 3, 1, 2, 4).reshape(B, T, C)  # (B, T, H d_v)
        return self.out_proj(ctx)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, out_std, bias):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.fc2.out_std = out_std

    def forward(self, x):  # (B, T, C)
        return self.fc2(F.gelu(self.fc1(x)))  # exact (erf) GELU, F.gelu's default


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff, out_std, bias):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.down_proj.out_std = out_std

    def forward(self, x):  # (B, T, C)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TransformerBlock(nn.Module):
    def __init__(self, a, out_std):
        super().__init__()
        bias = not a.no_bias
        self.ln1 = make_norm(a.d_model, a.norm_type)
        self.attn = MultiHeadAttention(a.d_model, a.heads, a.kv_heads, a.seq_len, out_std, bias, a.pos == "rope")
        self.ln2 = make_norm(a.d_model, a.norm_type)
        ffn = FeedForward if a.ffn == "mlp" else SwiGLU
        self.ffn = ffn(a.d_model, a.d_ff, out_std, bias)

    def forward(self, x):  # pre-norm
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(self, a):  # a: the parsed arguments; max_len = T
        super().__init__()
        out_std = 0.02 / math.sqrt(2 * a.layers)
        self.tok_emb = nn.Embedding(a.vocab, a.d_model)
        self.pos_emb = nn.Embedding(a.seq_len, a.d_model) if a.pos == "learned" else None
        self.blocks = nn.ModuleList(TransformerBlock(a, out_std) for _ in range(a.layers))
        self.ln_f = make_norm(a.d_model, a.norm_type)
        self.head = nn.Linear(a.d_model, a.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=getattr(m, "out_std", 0.02))
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens):  # (B, T) -> logits (B, T, V)
        T = tokens.shape[1]
        x = self.tok_emb(tokens)  # (B, T, C)
        if self.pos_emb is not None:
            x = x + self.pos_emb.weight[:T]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def loss(self, tokens):  # tokens (B, T+1): inputs [:, :T], targets [:, 1:]
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def quantile(sorted_values, q):
    """numpy.percentile's default (linear between closest ranks), as the C++ side."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def main(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed + 1)
    model = TransformerLM(a)
    model.train()
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.dim() >= 2 and not n.endswith("emb.weight")]
    no_decay = [p for n, p in named if not (p.dim() >= 2 and not n.endswith("emb.weight"))]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.999), eps=1e-8)

    gen = torch.Generator().manual_seed(a.seed)
    batches = [torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=gen)  # (B, T+1)
               for _ in range(a.warmup_steps + a.steps)]
    ms = []      # wall time per timed step
    cpu_ms = []  # process CPU time per timed step (all threads)
    initial_loss = final_loss = None
    for s, tokens in enumerate(batches):
        c0 = time.process_time()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model.loss(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t1 = time.perf_counter()
        c1 = time.process_time()
        value = loss.item()
        if not math.isfinite(value):
            sys.exit(f"torch_train_step: loss is {value} at step {s + 1}")
        if s == 0:
            initial_loss = value
        final_loss = value
        if s >= a.warmup_steps:
            ms.append((t1 - t0) * 1000.0)
            cpu_ms.append((c1 - c0) * 1000.0)
        if (s + 1) % 10 == 0:
            print(f"torch: step {s + 1}/{len(batches)}", file=sys.stderr)

    ordered = sorted(ms)
    median = quantile(ordered, 0.5)
    print(json.dumps({
        "impl": "torch", "d_model": a.d_model, "n_heads": a.heads, "n_kv_heads": a.kv_heads, "n_layers": a.layers,
        "d_ff": a.d_ff, "pos": a.pos, "norm_type": a.norm_type, "ffn": a.ffn, "bias": not a.no_bias,
        "seq_len": a.seq_len, "batch": a.batch, "vocab": a.vocab, "threads": a.threads,
        "steps": a.steps, "warmup_steps": a.warmup_steps,
        "parameters": sum(p.numel() for p in model.parameters()),
        "initial_loss": round(initial_loss, 6), "final_loss": round(final_loss, 6),
        "ln_vocab": round(math.log(a.vocab), 6),
        "median_ms": round(median, 4), "p10_ms": round(quantile(ordered, 0.1), 4),
        "p90_ms": round(quantile(ordered, 0.9), 4),
        "median_cpu_ms": round(quantile(sorted(cpu_ms), 0.5), 4),
        "tokens_per_s": round(a.batch * a.seq_len / (median / 1000.0), 1),
        # ru_maxrss is KiB on Linux; it includes libtorch's own code and data.
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "ms_per_step": [round(v, 4) for v in ms],
        "torch_version": torch.__version__,
    }))


if __name__ == "__main__":
    main(ARGS)
