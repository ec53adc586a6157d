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


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, max_len, out_std):
        super().__init__()
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d_k)
        self.q_proj = nn.Linear(d_model, d_model)  # (H d_k, C), head-major rows
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)  # (C, H d_v)
        self.out_proj.out_std = out_std
        # (max_len, max_len), True above the diagonal: key j is hidden from query i
        # when j > i. Not persistent, so the state_dict holds parameters only.
        mask = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def split_heads(self, x):  # (B, T, H d) -> (B, H, T, d)
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, -1).transpose(1, 2)

    def forward(self, x):  # x (B, T, C)
        B, T, C = x.shape
        q = self.split_heads(self.q_proj(x))  # (B, H, T, d_k)
        k = self.split_heads(self.k_proj(x))  # (B, H, T, d_k)
        v = self.split_heads(self.v_proj(x))  # (B, H, T, d_v)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, T, T)
        scores = scores.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        attn = torch.softmax(scores, dim=-1)  # (B, H, T, T)
        ctx = (attn @ v).transpose(1, 2).reshape(B, T, C)  # (B, T, H d_v)
        return self.out_proj(ctx)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, out_std):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.fc2.out_std = out_std

    def forward(self, x):  # (B, T, C)
        return self.fc2(F.gelu(self.fc1(x)))  # exact (erf) GELU, F.gelu's default


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, max_len, out_std):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, eps=1e-5)
        self.attn = MultiHeadAttention(d_model, n_heads, max_len, out_std)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-5)
        self.ffn = FeedForward(d_model, 4 * d_model, out_std)

    def forward(self, x):  # pre-norm
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(self, vocab, d_model, n_layers, n_heads, max_len):
        super().__init__()
        out_std = 0.02 / math.sqrt(2 * n_layers)
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, max_len, out_std) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
        self.head = nn.Linear(d_model, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=getattr(m, "out_std", 0.02))
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens):  # (B, T) -> logits (B, T, V)
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb.weight[:T]  # (B, T, C)
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
    model = TransformerLM(a.vocab, a.d_model, a.layers, a.heads, a.seq_len)
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
        "impl": "torch", "d_model": a.d_model, "n_heads": a.heads, "n_layers": a.layers,
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
