#!/usr/bin/python3
"""nanoGPT's CPU character recipe in plain PyTorch: the peer of `headroom train` in
bench/char_recipe.py (see bench/README.md, "A character model on real text").

Run it with /usr/bin/python3 (Debian's python3-torch 1.13):

    /usr/bin/python3 bench/torch_char_recipe.py --train DIR/train.txt --val DIR/val.txt

DIR comes from `headroom corpora --corpus kjv --write-splits DIR`, so both sides read
the same bytes. The recipe is the one nanoGPT's README gives for a CPU
(shakespeare_char at 4 layers, 4 heads, d_model 128, context 64, batch 12, 2000
iterations, dropout 0): its config file's lr 1e-3, 100 warm-up steps, cosine decay to
1e-4, AdamW betas (0.9, 0.99), and train.py's defaults for the rest (weight decay 0.1,
clip 1.0, bias False). The model is headroom's TransformerLM with the flags
char_recipe.py gives it (--no-bias --tie-embeddings), written out:

    x = tok_emb[tokens] + pos_emb[0:T]
    pre-norm blocks: x = x + attn(ln1(x)); x = x + ffn(ln2(x))
    attn: q/k/v/out projections without bias, scores (q . k) / sqrt(d_k), causal
          mask, softmax, heads concatenated
    ffn: fc1 (4 d_model), exact GELU, fc2, without bias
    ln_f, then logits = x tok_emb^T (the head is the token embedding)

LayerNorm has a gain and a bias (eps 1e-5) as headroom's always has; nanoGPT's
bias=False also drops the LayerNorm bias, which --no-ln-bias does here. Initial
weights N(0, 0.02^2), out_proj and fc2 N(0, (0.02 / sqrt(2 n_layers))^2) (GPT-2's
scaled residual writers, as both nanoGPT and headroom do).

The learning rate of the t-th update (t from 1) is headroom's cosine schedule
(optim/schedule.hpp): lr t / warmup up to t = warmup, then half a cosine to min_lr at
t = steps. nanoGPT's own loop makes steps + 1 updates and reaches the peak one update
later, which is the same schedule at --steps 2001 --warmup 101.

Weight decay (--decay): `all-2d` is nanoGPT's configure_optimizers rule, every tensor
of two or more axes (the tied token embedding and the position embedding included);
`no-embeddings` is headroom's default exclusion (also no decay on *emb.weight).

A batch is --batch windows of T+1 characters whose starts are uniform over the train
text, drawn by torch's generator from --seed (the weights come from the same seed;
headroom draws its own). The score is headroom eval --text's rule
(train/evaluate.cpp, evaluate_windows): every character of the val text but the first
predicted once, in windows of T+1 characters with stride T, the last window shorter
when T does not divide the text, each target seeing its own window only; the mean
cross-entropy in nats per character over all of them.

Threads are set before `import torch` (OMP, OpenBLAS and BLIS read their variables
when they load): --threads N sets all of them and torch.set_num_threads(N),
--blas-threads M then sets the BLAS library's to M (char_recipe.py runs torch's BLAS
on one thread beside two or more of torch's); --threads 0 leaves torch at its own
default, which the JSON line reports. Prints one JSON line:
the losses, the times (`train_s`: the 2000 steps, batch drawing included; `eval_s`;
`import_s`; `setup_s`: reading the texts and building the model) and the settings.
"""

import argparse
import json
import math
import os
import sys
import time

START = time.perf_counter()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="the train text (UTF-8)")
    p.add_argument("--val", required=True, help="the held-out text (UTF-8)")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64, help="T, the context (nanoGPT's block_size)")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--steps", type=int, default=2000, help="updates")
    p.add_argument("--lr", type=float, default=1e-3, help="the peak")
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--eps", type=float, default=1e-8, help="AdamW's eps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--decay", choices=("all-2d", "no-embeddings"), default="all-2d")
    p.add_argument("--no-ln-bias", action="store_true", help="LayerNorm without bias, as nanoGPT's bias=False")
    p.add_argument("--clip", type=float, default=1.0, help="global gradient norm; 0: off")
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--eval-batch", type=int, default=12, help="windows per forward when scoring")
    p.add_argument("--threads", type=int, default=1, help="0: torch's default")
    p.add_argument("--blas-threads", type=int, default=0,
                   help="threads of the BLAS library (its environment variables; default: --threads, unset with 0)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.d_model % a.heads != 0:
        p.error(f"--d-model {a.d_model} is not a multiple of --heads {a.heads}")
    if not 0 <= a.warmup <= a.steps:
        p.error(f"--warmup {a.warmup} must be in [0, --steps {a.steps}]")
    if a.threads < 0:
        p.error(f"--threads must be >= 0, got {a.threads}")
    return a


ARGS = parse_args()
if ARGS.threads > 0:
    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[key] = str(ARGS.threads)
if ARGS.blas_threads > 0:
    for key in ("OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[key] = str(ARGS.blas_threads)

import torch  # noqa: E402  (after the thread variables)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

IMPORTED = time.perf_counter()


class Attention(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(c, c, bias=False)
        self.k_proj = nn.Linear(c, c, bias=False)
        self.v_proj = nn.Linear(c, c, bias=False)
        self.out_proj = nn.Linear(c, c, bias=False)

    def forward(self, x):  # x (B, T, C)
        b, t, c = x.shape
        dk = c // self.heads

        def split(y):  # (B, T, C) -> (B, H, T, d_k)
            return y.view(b, t, self.heads, dk).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(dk)  # (B, H, T, T)
        later = torch.ones(t, t, dtype=torch.bool).triu(1)  # keys after their query
        weights = F.softmax(scores.masked_fill(later, float("-inf")), dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(b, t, c)  # heads side by side
        return self.out_proj(y)


class LayerNorm(nn.Module):
    def __init__(self, c, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self, c, heads, ln_bias):
        super().__init__()
        self.ln1 = LayerNorm(c, ln_bias)
        self.attn = Attention(c, heads)
        self.ln2 = LayerNorm(c, ln_bias)
        self.fc1 = nn.Linear(c, 4 * c, bias=False)
        self.fc2 = nn.Linear(4 * c, c, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CharGPT(nn.Module):
    def __init__(self, vocab, a):
        super().__init__()
        c = a.d_model
        self.tok_emb = nn.Parameter(torch.empty(vocab, c))
        self.pos_emb = nn.Parameter(torch.empty(a.seq_len, c))
        self.blocks = nn.ModuleList(Block(c, a.heads, not a.no_ln_bias) for _ in range(a.layers))
        self.ln_f = LayerNorm(c, not a.no_ln_bias)
        residual_std = a.init_std / math.sqrt(2 * a.layers)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                writes_residual = name.endswith("out_proj.weight") or name.endswith("fc2.weight")
                nn.init.normal_(p, 0.0, residual_std if writes_residual else a.init_std)

    def forward(self, tokens):  # tokens (B, T) -> logits (B, T, V)
        x = self.tok_emb[tokens] + self.pos_emb[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok_emb.t()


def read_ids(train_path, val_path):
    """The two texts as ids of the sorted distinct code points of both (headroom's CharVocab)."""
    texts = []
    for path in (train_path, val_path):
        with open(path, encoding="utf-8", newline="") as f:
            texts.append(f.read())
    vocab = sorted(set(texts[0]) | set(texts[1]))
    index = {ch: i for i, ch in enumerate(vocab)}
    return [torch.tensor([index[ch] for ch in text], dtype=torch.long) for text in texts], len(vocab)


def lr_at(t, a):
    """headroom's cosine schedule (optim/schedule.hpp) for the t-th update, t from 1."""
    if t <= a.warmup:
        return a.lr * t / a.warmup
    if t >= a.steps:
        return a.min_lr
    progress = (t - a.warmup) / (a.steps - a.warmup)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model, a):
    decay, keep = [], []
    for name, p in model.named_parameters():
        excluded = p.dim() < 2 or (a.decay == "no-embeddings" and name.endswith("emb"))
        (keep if excluded else decay).append(p)
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": keep, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps), sum(p.numel() for p in decay)


def train(model, train_ids, a):
    opt, decayed = make_optimizer(model, a)
    gen = torch.Generator().manual_seed(a.seed + 1)
    offsets = torch.arange(a.seq_len + 1)
    losses = []
    model.train()
    for t in range(1, a.steps + 1):
        starts = torch.randint(len(train_ids) - a.seq_len, (a.batch, 1), generator=gen)
        rows = train_ids[starts + offsets]  # (B, T+1)
        logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        for group in opt.param_groups:
            group["lr"] = lr_at(t, a)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        losses.append(loss.item())
    return losses, decayed


@torch.no_grad()
def score(model, ids, a):
    """Mean nats per character over every id but the first, as evaluate_windows."""
    model.eval()
    T = a.seq_len
    targets = len(ids) - 1
    full, rest = divmod(targets, T)
    total = 0.0
    windows = [(w * T, T) for w in range(full)]
    for i in range(0, len(windows), a.eval_batch):
        chunk = windows[i:i + a.eval_batch]
        rows = torch.stack([ids[s:s + T + 1] for s, _ in chunk])
        logits = model(rows[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1),
                                 reduction="sum").item()
    if rest > 0:
        row = ids[full * T:].unsqueeze(0)
        logits = model(row[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), row[0, 1:], reduction="sum").item()
    return total / targets, targets


def main():
    a = ARGS
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    (train_ids, val_ids), vocab = read_ids(a.train, a.val)
    model = CharGPT(vocab, a)
    ready = time.perf_counter()
    losses, decayed = train(model, train_ids, a)
    trained = time.perf_counter()
    val_loss, counted = score(model, val_ids, a)
    scored = time.perf_counter()
    tail = losses[-100:]
    print(json.dumps({
        "impl": "torch", "torch_version": torch.__version__, "threads": torch.get_num_threads(),
        "threads_asked": a.threads, "blas_threads": a.blas_threads or a.threads, "seed": a.seed, "vocab": vocab,
        "parameters": sum(p.numel() for p in model.parameters()), "decayed_parameters": decayed,
        "train_chars": len(train_ids), "val_chars": len(val_ids), "counted": counted,
        "val_loss": val_loss, "val_bpc": val_loss / math.log(2),
        "initial_loss": losses[0], "train_loss_last100": sum(tail) / len(tail),
        "import_s": IMPORTED - START, "setup_s": ready - IMPORTED, "train_s": trained - ready,
        "eval_s": scored - trained, "steps": a.steps, "batch": a.batch, "seq_len": a.seq_len,
        "decay": a.decay, "ln_bias": not a.no_ln_bias, "beta2": a.beta2, "weight_decay": a.weight_decay,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
