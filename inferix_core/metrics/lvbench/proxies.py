"""Weight-free stand-ins for the LV-Bench networks, used only when the real weights are absent.

Each proxy replaces the network and keeps VBench's formula (base_metrics.py), so it tracks the same
kind of drift, but its numbers are NOT the published metric: every output carries a `_proxy` label
(report.py). Aesthetic quality has no credible weight-free proxy and is reported as unavailable.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .base_metrics import imaging_quality_preprocess

LUMA = np.array([0.299, 0.587, 0.114])  # ITU-R BT.601, as PIL's "L" mode


def _gray(frames: np.ndarray) -> np.ndarray:
    """uint8 [T, H, W, 3] → float64 luma [T, H, W] in 0..255."""
    return frames.astype(np.float64) @ LUMA


# ---------------------------------------------------------------- clarity (for MUSIQ)


def laplacian_variance_frames(frames: np.ndarray) -> np.ndarray:
    """Variance of the 4-neighbour Laplacian of each frame's luma, a classic sharpness measure.

    Frames get MUSIQ's preprocessing first (longer side ≤ 512) so resolution affects both alike.
    Blur removes high frequencies, so the variance drops as a video softens.
    """
    x = imaging_quality_preprocess(frames).numpy() * 255.0  # (T, 3, h, w)
    g = np.einsum("tchw,c->thw", x, LUMA)
    lap = g[:, :-2, 1:-1] + g[:, 2:, 1:-1] + g[:, 1:-1, :-2] + g[:, 1:-1, 2:] - 4.0 * g[:, 1:-1, 1:-1]
    return lap.reshape(len(g), -1).var(axis=1)


# ---------------------------------------------------------------- motion smoothness (for AMT)


def linear_interpolate(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Middle frame as the rounded mean of its neighbours: exact for static content, blurs true motion."""
    return ((a.astype(np.uint16) + b.astype(np.uint16) + 1) // 2).astype(np.uint8)


# ---------------------------------------------------------------- background consistency (for CLIP)


def colour_histogram_features(frames: np.ndarray, bins: int = 8) -> np.ndarray:
    """√ of each frame's normalised joint RGB histogram [T, bins³].

    The cosine of two such vectors is the Bhattacharyya coefficient of the histograms, in [0, 1]; it
    ignores layout, so it follows scene/colour changes much as CLIP's global embedding does.
    """
    q = (frames.astype(np.int64) * bins) // 256  # (T, H, W, 3)
    codes = (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]
    hist = np.stack([np.bincount(c.ravel(), minlength=bins**3) for c in codes]).astype(np.float64)
    return np.sqrt(hist / hist.sum(axis=1, keepdims=True))


# ---------------------------------------------------------------- subject consistency (for DINO)


def _dct_matrix(n: int) -> np.ndarray:
    """Orthonormal DCT-II matrix (n × n)."""
    k, i = np.arange(n)[:, None], np.arange(n)[None, :]
    m = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    m[0] /= np.sqrt(2.0)
    return m


def structure_features(frames: np.ndarray, size: int = 32, keep: int = 8) -> np.ndarray:
    """Low-frequency DCT of a 32×32 luma thumbnail without the DC term [T, keep² − 1].

    This is the real-valued core of a perceptual hash (pHash): it encodes the coarse layout of the
    frame and not its brightness, so its cosine drops when the main structure changes.
    """
    g = torch.from_numpy(_gray(frames))[:, None]  # (T, 1, H, W)
    thumb = F.adaptive_avg_pool2d(g, size)[:, 0].numpy()  # (T, 32, 32)
    d = _dct_matrix(size)
    coeffs = np.einsum("ki,tij,lj->tkl", d, thumb, d)[:, :keep, :keep].reshape(len(frames), -1)
    return coeffs[:, 1:]


# ---------------------------------------------------------------- dynamic degree (for RAFT)


def block_matching_flow(a: np.ndarray, b: np.ndarray, radius: int = 6, block: int = 8) -> np.ndarray:
    """Coarse optical flow [2, h, w] in full-resolution pixels by exhaustive block matching.

    Luma is average-pooled so the shorter side is about 128 pixels, then each block×block tile of `a`
    takes the shift within ±radius whose mean absolute difference in `b` is lowest; a tiny penalty on
    the shift length makes textureless tiles and static scenes report zero motion.
    """
    scale = max(1, min(a.shape[:2]) // 128)
    ga = F.avg_pool2d(torch.from_numpy(_gray(a[None]))[:, None], scale)  # (1, 1, h, w)
    gb = F.avg_pool2d(torch.from_numpy(_gray(b[None]))[:, None], scale)
    h, w = ga.shape[-2:]
    gb = F.pad(gb, [radius] * 4, mode="replicate")
    shifts = [(dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)]
    cost = torch.cat(
        [(ga - gb[..., radius + dy : radius + dy + h, radius + dx : radius + dx + w]).abs() for dy, dx in shifts], dim=1
    )  # (1, S, h, w)
    cost = F.avg_pool2d(cost, min(block, h, w))[0]  # (S, hb, wb)
    lengths = torch.tensor([abs(dy) + abs(dx) for dy, dx in shifts], dtype=cost.dtype)
    best = (cost + 1e-3 * lengths[:, None, None]).argmin(dim=0)  # (hb, wb)
    table = torch.tensor(shifts, dtype=torch.float64) * scale  # (S, 2) as (dy, dx)
    return torch.stack([table[best, 1], table[best, 0]]).numpy()  # (2, hb, wb) as (u, v)
