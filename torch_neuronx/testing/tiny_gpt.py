"""A tiny GPT-style causal language model in plain PyTorch, plus synthetic training data.

Attention is written out (matmul, masked_fill, softmax) instead of using
``scaled_dot_product_attention`` so that the operators it dispatches are explicit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class GPTConfig:
    """Model hyperparameters."""

    vocab_size: int = 256
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    tie_weights: bool = True


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position only attends to earlier positions."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError("n_embd must be divisible by n_head")
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        future = torch.ones(config.block_size, config.block_size, dtype=torch.bool).triu(1)
        self.register_buffer("future_mask", future, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # (batch, seq, width) -> (batch, head, seq, head_dim)
        q, k, v = (t.view(batch, seq, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(self.future_mask[:seq, :seq], float("-inf"))
        weights = self.attn_dropout(F.softmax(scores, dim=-1))
        y = (weights @ v).transpose(1, 2).contiguous().view(batch, seq, width)
        return self.resid_dropout(self.proj(y))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: attention then GELU MLP, each with a residual."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """GPT-style causal LM: token + learned position embeddings, blocks, final LayerNorm, LM head."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        if config.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Return logits of shape (batch, seq, vocab) and, if targets are given, the mean loss."""
        seq = idx.size(1)
        if seq > self.config.block_size:
            raise ValueError(f"sequence length {seq} exceeds block_size {self.config.block_size}")
        pos = torch.arange(seq, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def make_batches(
    num_batches: int, batch_size: int, block_size: int, vocab_size: int, seed: int = 0
) -> list[tuple[Tensor, Tensor]]:
    """Deterministic (inputs, next-token targets) CPU batches from a synthetic text-like stream.

    The stream is a chain of 32 fixed "words" (2-5 tokens each, separated by token 0); each word
    is usually followed by its fixed successor, and 5% of tokens are replaced by random noise,
    so a model can learn the structure and its loss falls quickly.
    """
    g = torch.Generator().manual_seed(seed)
    n_words = 32
    lengths = torch.randint(2, 6, (n_words,), generator=g).tolist()
    words = [torch.randint(1, vocab_size, (n,), generator=g).tolist() for n in lengths]
    successor = torch.randint(0, n_words, (n_words,), generator=g).tolist()

    needed = num_batches * batch_size * (block_size + 1)
    max_words = needed // 3 + 1  # every word takes at least 3 tokens with its separator
    follows = (torch.rand(max_words, generator=g) < 0.8).tolist()
    jumps = torch.randint(0, n_words, (max_words,), generator=g).tolist()
    tokens: list[int] = []
    word = 0
    for follow, jump in zip(follows, jumps):
        if len(tokens) >= needed:
            break
        tokens += words[word] + [0]
        word = successor[word] if follow else jump

    stream = torch.tensor(tokens[:needed])
    noisy = torch.rand(needed, generator=g) < 0.05
    stream = torch.where(noisy, torch.randint(1, vocab_size, (needed,), generator=g), stream)
    sequences = stream.view(num_batches, batch_size, block_size + 1)
    return [(s[:, :-1].contiguous(), s[:, 1:].contiguous()) for s in sequences]


def training_step(device: torch.device | str, config: GPTConfig | None = None):
    """A closure running one synchronized TinyGPT training step (forward, backward, AdamW) on
    ``device`` with a fixed seed and batch: the unit the benchmarks time."""
    config = config or GPTConfig()
    torch.manual_seed(0)
    model = TinyGPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ((x, y),) = make_batches(1, 8, config.block_size, config.vocab_size, seed=0)
    x, y = x.to(device), y.to(device)
    sync = torch.get_device_module(torch.device(device)).synchronize

    def step() -> None:
        optimizer.zero_grad()
        model(x, y)[1].backward()
        optimizer.step()
        sync()
    return step
