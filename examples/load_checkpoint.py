#!/usr/bin/python3
"""Load a headroom checkpoint into a plain PyTorch model and check its loss.

    /usr/bin/python3 examples/load_checkpoint.py run/model.safetensors \\
        --tokens 3,1,4,1,5 2,6,5,3,5 [--expect 1.9234] [--rtol 1e-5]

The number for --expect comes from headroom itself, for the same rows:

    build/headroom eval --model run --tokens 3,1,4,1,5 2,6,5,3,5

prints the same mean next-token loss (its "loss" line, 9 significant digits).

Runs with Debian's python3-torch (1.13) and nothing else: the safetensors file is
parsed here with struct and json (8-byte little-endian header length, JSON header,
raw little-endian data), not with the safetensors package.

The model is built from the config in the file's __metadata__ and follows
the conventions of docs/design.md in ordinary nn.Module code, with the parameter names of
the checkpoint, so load_state_dict(strict=True) takes the tensors without renaming:

    x = tok_emb[tokens] + P                   P learned (pos_emb) or sinusoidal, no scaling;
                                              nothing with pos "rope" or "none", or with
                                              pos_qk_only (P then goes to every attn)
    pre-norm:  x = x + attn(ln1(x));  x = x + ffn(ln2(x))
    post-norm: x = ln1(x + attn(x));  x = ln2(x + ffn(x))
    no norm:   x = x + attn(x);       x = x + ffn(x)        (norm = "none")
    attn_only: only the first half of each line (no ffn, no ln2)
    ln_f (not with norm = "none"), then head (or tok_emb.weight when tied)
    norms: LayerNorm, or RMSNorm x / sqrt(mean(x^2) + eps) * weight (norm_type)
    attn: q = q_proj(x + P), k = k_proj(x + P), v = v_proj(x) (P only with
          pos_qk_only); head-major q/k/v/out projections; then qk_norm (RMSNorm of
          each head's q and k over d_k), key_smear (k_t <- s k_t + (1 - s) k_{t-1},
          s = sigmoid(key_smear) per kv head), rope (rotate-half pairs i, i + d_k/2);
          query head j reads kv head j // g, g = n_heads / n_kv_heads;
          scores (q . k) * attn_scale; causal mask;
          heads concatenated before out_proj (or added, head_combine = "sum")
    ffn:  fc2(act(fc1(x))), act = exact GELU, tanh GELU or ReLU; or
          down_proj(silu(gate_proj(x)) * up_proj(x)) (ffn = "swiglu")

Keys a file does not have read as their defaults (docs/design.md #17), so older
checkpoints load as the models they were. The model is evaluated, so `dropout` (a
training setting, with no tensor) is not read.

Each --tokens argument is one row of comma-separated token ids (all rows the same
length T+1), or --tokens-file FILE holds one whitespace-separated row per line. The
loss is the mean next-token cross-entropy over all B*T positions. Several
checkpoints may be given, with one --expect value each.

Exit status: 0 when every loss matches its --expect within --rtol (default 1e-5 for
F32 checkpoints, 1e-10 for F64) or when no --expect is given; 1 on a mismatch; 2 on
a usage error or a file that cannot be read.
"""

import argparse
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F64": torch.float64}


def read_safetensors(path):
    """(tensors by name, metadata) from a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        shape = entry["shape"]
        if begin == end:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            # bytearray: frombuffer wants a writable buffer; clone: own the storage.
            flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype)
            tensors[name] = flat.reshape(shape).clone()
    return tensors, metadata


def sinusoidal_positions(max_len, d_model):
    """PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = 10000^(-2i/d_model)."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    p = torch.arange(max_len, dtype=torch.float64)
    for c in range(d_model):
        w = 10000.0 ** (-2.0 * (c // 2) / d_model)
        pe[:, c] = torch.sin(p * w) if c % 2 == 0 else torch.cos(p * w)
    return pe


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last axis (torch 1.13 has no nn.RMSNorm)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def rope(x, base):
    """Rotary positions on (B, heads, T, d), rotate-half pairing: channel i turns with
    i + d/2 by the angle p * base^(-2i/d), p the position from 0."""
    T, d = x.shape[2], x.shape[3]
    half = d // 2
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]  # (T, d/2)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H, G = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
        self.H, self.G, self.d_k, self.d_v = H, G, cfg["d_k"], cfg["d_v"]
        self.scale, self.causal = cfg["attn_scale"], cfg["causal"]
        self.rope_base = cfg.get("rope_base", 10000.0) if cfg["pos"] == "rope" else None
        # Parameters of the module itself come first in a state_dict, as in ours.
        self.key_smear = nn.Parameter(torch.zeros(G)) if cfg.get("key_smear", False) else None
        # "concat" (the standard) feeds out_proj the heads side by side; "sum" adds
        # them, so out_proj reads d_v features. Older files have no such key.
        self.combine = cfg.get("head_combine", "concat")
        if self.combine not in ("concat", "sum"):
            raise ValueError(f"unknown head_combine {self.combine!r}")
        out_in = H * self.d_v if self.combine == "concat" else self.d_v
        self.q_proj = nn.Linear(C, H * self.d_k, bias=cfg["bias"])  # head-major rows
        self.k_proj = nn.Linear(C, G * self.d_k, bias=cfg["bias"])
        self.v_proj = nn.Linear(C, G * self.d_v, bias=cfg["bias"])
        if cfg.get("qk_norm", False):  # one d_k weight shared by every head
            self.q_norm = RMSNorm(self.d_k, cfg["ln_eps"])
            self.k_norm = RMSNorm(self.d_k, cfg["ln_eps"])
        else:
            self.q_norm = self.k_norm = None
        self.out_proj = nn.Linear(out_in, C, bias=cfg["bias"])

    def forward(self, x, pos=None):  # x (B, T, C); pos (T, C) with pos_qk_only
        B, T, _ = x.shape
        g = self.H // self.G
        qk_in = x if pos is None else x + pos  # v never sees a position
        q = self.q_proj(qk_in).view(B, T, self.H, self.d_k).transpose(1, 2)  # (B, H, T, d_k)
        k = self.k_proj(qk_in).view(B, T, self.G, self.d_k).transpose(1, 2)  # (B, G, T, d_k)
        v = self.v_proj(x).view(B, T, self.G, self.d_v).transpose(1, 2)  # (B, G, T, d_v)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.key_smear is not None:
            s = torch.sigmoid(self.key_smear).view(1, self.G, 1, 1)
            previous = F.pad(k, (0, 0, 1, 0))[:, :, :T]  # k_{t-1}, zero at t = 0
            k = s * k + (1 - s) * previous
        if self.rope_base is not None:
            q, k = rope(q, self.rope_base), rope(k, self.rope_base)
        # Query head j reads kv head j // g: repeat each kv head g times in place.
        k = k.repeat_interleave(g, dim=1)  # (B, H, T, d_k)
        v = v.repeat_interleave(g, dim=1)  # (B, H, T, d_v)
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, T, T)
        if self.causal:
            later = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            scores = scores.masked_fill(later, float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ v  # (B, H, T, d_v)
        if self.combine == "sum":
            return self.out_proj(ctx.sum(dim=1))  # (B, T, d_v)
        return self.out_proj(ctx.transpose(1, 2).reshape(B, T, self.H * self.d_v))  # (B, T, H d_v)


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, d_ff, bias = cfg["d_model"], cfg["d_ff"], cfg["bias"]
        self.kind = cfg.get("ffn", "mlp")
        if self.kind == "swiglu":
            self.gate_proj = nn.Linear(C, d_ff, bias=bias)
            self.up_proj = nn.Linear(C, d_ff, bias=bias)
            self.down_proj = nn.Linear(d_ff, C, bias=bias)
        elif self.kind == "mlp":
            self.fc1 = nn.Linear(C, d_ff, bias=bias)
            self.fc2 = nn.Linear(d_ff, C, bias=bias)
        else:
            raise ValueError(f"unknown ffn {self.kind!r}")
        self.activation = cfg["activation"]

    def forward(self, x):
        if self.kind == "swiglu":
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        h = self.fc1(x)
        if self.activation == "gelu":
            h = F.gelu(h)  # exact, erf
        elif self.activation == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")
        elif self.activation == "relu":
            h = F.relu(h)
        else:
            raise ValueError(f"unknown activation {self.activation!r}")
        return self.fc2(h)


def layer_norm(cfg):
    """A LayerNorm or RMSNorm (norm_type), or None (the identity) with norm = "none"."""
    if cfg["norm"] not in ("pre", "post", "none"):
        raise ValueError(f"unknown norm {cfg['norm']!r}")
    if cfg["norm"] == "none":
        return None
    kind = cfg.get("norm_type", "layernorm")
    if kind == "rmsnorm":
        return RMSNorm(cfg["d_model"], cfg["ln_eps"])
    if kind != "layernorm":
        raise ValueError(f"unknown norm_type {kind!r}")
    return nn.LayerNorm(cfg["d_model"], eps=cfg["ln_eps"])


def apply(norm, x):
    return x if norm is None else norm(x)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        # A file written before attn_only existed has no key: its blocks have a ffn.
        attn_only = cfg.get("attn_only", False)
        self.post = cfg["norm"] == "post"
        self.ln1 = layer_norm(cfg)
        self.attn = Attention(cfg)
        self.ln2 = None if attn_only else layer_norm(cfg)
        self.ffn = None if attn_only else FeedForward(cfg)

    def forward(self, x, pos=None):
        if self.post:
            x = apply(self.ln1, x + self.attn(x, pos))
            return x if self.ffn is None else apply(self.ln2, x + self.ffn(x))
        # Pre-norm, and no norm, where apply passes x through.
        x = x + self.attn(apply(self.ln1, x), pos)
        return x if self.ffn is None else x + self.ffn(apply(self.ln2, x))


class TransformerLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg["vocab"], cfg["d_model"])
        self.pos_emb = nn.Embedding(cfg["max_len"], cfg["d_model"]) if cfg["pos"] == "learned" else None
        if cfg["pos"] == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_positions(cfg["max_len"], cfg["d_model"]), persistent=False)
        else:
            self.sinusoid = None
        if cfg["pos"] not in ("learned", "sinusoidal", "rope", "none"):  # rope turns q and k inside attn
            raise ValueError(f"unknown pos {cfg['pos']!r}")
        self.qk_only = cfg.get("pos_qk_only", False)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layers"]))
        self.ln_f = layer_norm(cfg)
        self.head = None if cfg["tie_embeddings"] else nn.Linear(cfg["d_model"], cfg["vocab"], bias=False)

    def forward(self, tokens):  # (B, T) -> logits (B, T, V)
        T = tokens.shape[1]
        pos = None  # (T, C)
        if self.pos_emb is not None:
            pos = self.pos_emb.weight[:T]
        elif self.sinusoid is not None:
            pos = self.sinusoid[:T]
        x = self.tok_emb(tokens)  # (B, T, C)
        if pos is not None and not self.qk_only:
            x, pos = x + pos, None
        for block in self.blocks:
            x = block(x, pos)  # pos is None unless pos_qk_only
        x = apply(self.ln_f, x)
        return self.head(x) if self.head is not None else x @ self.tok_emb.weight.T

    def loss(self, tokens):  # (B, T+1) -> mean next-token cross-entropy
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def load(path):
    """The model of a checkpoint, its parameters loaded strictly, in the file's dtype."""
    tensors, metadata = read_safetensors(path)
    if "config" not in metadata:
        raise ValueError(f"{path}: no model config in __metadata__")
    cfg = json.loads(metadata["config"])
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1:
        raise ValueError(f"{path}: mixed dtypes {sorted(map(str, dtypes))}")
    model = TransformerLM(cfg).to(dtypes.pop())
    model.load_state_dict(tensors, strict=True)  # names match without renaming
    return model.eval()


def read_tokens(args, parser):
    if (args.tokens is None) == (args.tokens_file is None):
        parser.error("give exactly one of --tokens and --tokens-file")
    if args.tokens is not None:
        rows = [[int(t) for t in row.split(",") if t] for row in args.tokens]
    else:
        with open(args.tokens_file) as f:
            rows = [[int(t) for t in line.split()] for line in f if line.strip()]
    if not rows or len({len(r) for r in rows}) != 1 or len(rows[0]) < 2:
        parser.error("token rows must all have the same length T+1 >= 2")
    return torch.tensor(rows, dtype=torch.long)  # (B, T+1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT")
    parser.add_argument("--tokens", nargs="+", metavar="ROW", help="rows of comma-separated token ids")
    parser.add_argument("--tokens-file", metavar="FILE", help="one whitespace-separated row per line")
    parser.add_argument("--expect", type=float, nargs="+", metavar="LOSS", help="expected loss, one per checkpoint")
    parser.add_argument("--rtol", type=float, help="relative tolerance (default 1e-5 for F32, 1e-10 for F64)")
    args = parser.parse_args()
    tokens = read_tokens(args, parser)
    if args.expect is not None and len(args.expect) != len(args.checkpoints):
        parser.error(f"{len(args.checkpoints)} checkpoints but {len(args.expect)} --expect values")

    ok = True
    for i, path in enumerate(args.checkpoints):
        try:
            model = load(path)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
            print(f"{path}: cannot load: {e}", file=sys.stderr)
            return 2
        vocab, max_len = model.cfg["vocab"], model.cfg["max_len"]
        if tokens.min() < 0 or tokens.max() >= vocab or tokens.shape[1] - 1 > max_len:
            print(f"{path}: token ids must be in [0, {vocab}) and rows at most max_len + 1 = {max_len + 1} long",
                  file=sys.stderr)
            return 2
        with torch.no_grad():
            loss = model.loss(tokens).item()
        if args.expect is None:
            print(f"{path}: torch loss {loss:.9g}")
            continue
        expected = args.expect[i]
        double = model.tok_emb.weight.dtype == torch.float64
        rtol = args.rtol if args.rtol is not None else (1e-10 if double else 1e-5)
        rel = abs(loss - expected) / max(abs(expected), 1e-30)
        match = math.isfinite(loss) and rel <= rtol
        ok = ok and match
        verdict = "match" if match else "MISMATCH"
        print(f"{path}: torch loss {loss:.9g}, expected {expected:.9g}, rel diff {rel:.2e} (rtol {rtol:g}): {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
