"""The GPT-style model that ``gpt_bf16`` trains, its FLOPs per token, and the GPUs' peaks.

Model FLOPs per token follow the usual estimate for a decoder-only transformer:
``6 * N + 12 * layers * width * sequence`` (forward and backward; ``N`` counts every parameter
but the position embedding). The utilisation divides the achieved FLOPs/s by the GPU's dense
bf16 peak from its data sheet.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

__all__ = ["GPT", "GPTConfig", "flops_per_token", "peak_tflops"]

# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) from the vendors' data sheets.
_PEAKS = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
)


@dataclass(frozen=True)
class GPTConfig:
    """The model and the run. The defaults make a 2.2-billion-parameter model (10 layers of
    width 4096, 32 heads of 128, sequence 2048, GPT-2's padded vocabulary) trained on 4
    sequences per step: about 65 GB of weights, gradients, AdamW moments and activations, which
    fits an 80 GB H100 and keeps it busy with large matrix products (on a 141 GB H200, pass
    ``--gpt_batch 8``)."""

    layers: int = 10
    heads: int = 32
    width: int = 4096
    sequence: int = 2048
    vocab: int = 50304
    batch_size: int = 4
    warmup_steps: int = 3
    steps: int = 10
    reps: int = 3
    device: str = "cuda"
    compiled: bool = False  # torch.compile (inductor) in every subject: see gpt_bf16.py

    def __post_init__(self) -> None:
        for name in ("layers", "heads", "width", "sequence", "vocab", "batch_size", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name} must be at least 1, not {getattr(self, name)}")
        if self.width % self.heads:
            raise ValueError(
                f"GPTConfig.width ({self.width}) must be a multiple of heads ({self.heads})"
            )
        if self.reps < 1 or self.warmup_steps < 0:
            raise ValueError("GPTConfig.reps must be at least 1 and warmup_steps at least 0")


class _Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.norm1 = nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, 4 * config.width),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.width, config.width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """A decoder-only transformer; the output layer shares the token embedding's weights."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Embedding(config.sequence, config.width)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)
        self.head.weight = self.tokens.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def flops_per_token(model: GPT, config: GPTConfig) -> float:
    """Training FLOPs per token: ``6 * N + 12 * layers * width * sequence``."""
    params = sum(p.numel() for p in model.parameters()) - model.positions.weight.numel()
    return 6.0 * params + 12.0 * config.layers * config.width * config.sequence


def peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a known GPU, by name; ``None`` when it is not in the table."""
    for key, value in _PEAKS:
        if key in device_name:
            return value
    return None
