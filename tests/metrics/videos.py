"""Synthetic videos with known behaviour for the LV-Bench metric tests (seeded, never all-zeros)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def texture(rng: np.random.Generator, h: int, w: int, cell: int = 4) -> np.ndarray:
    """A random colour texture [H, W, 3] uint8 with detail at `cell` pixels (so blur is visible)."""
    small = rng.integers(0, 256, (h // cell + 1, w // cell + 1, 3)).astype(np.float32)
    x = torch.from_numpy(small).permute(2, 0, 1)[None]
    big = F.interpolate(x, scale_factor=cell, mode="bilinear", align_corners=False)[0, :, :h, :w]
    return big.permute(1, 2, 0).round().clamp(0, 255).byte().numpy()


def box_blur(img: np.ndarray, radius: int) -> np.ndarray:
    """Separable box blur of an [H, W, 3] uint8 image (radius 0 = unchanged)."""
    if radius == 0:
        return img
    x = torch.from_numpy(img.astype(np.float32)).permute(2, 0, 1)[None]
    k = 2 * radius + 1
    x = F.avg_pool2d(F.pad(x, [radius] * 4, mode="replicate"), k, stride=1)
    return x[0].permute(1, 2, 0).round().byte().numpy()


def noisy(rng: np.random.Generator, img: np.ndarray, sigma: float = 2.0) -> np.ndarray:
    return np.clip(img + rng.normal(0, sigma, img.shape), 0, 255).astype(np.uint8)


def frozen(rng: np.random.Generator, t: int = 24, h: int = 48, w: int = 64) -> np.ndarray:
    return np.repeat(texture(rng, h, w)[None], t, axis=0)


def translating(rng: np.random.Generator, t: int = 24, h: int = 48, w: int = 64, step: int = 4) -> np.ndarray:
    big = texture(rng, h, w + step * t)
    return np.stack([big[:, i * step : i * step + w] for i in range(t)])
