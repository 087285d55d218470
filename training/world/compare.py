"""Frame comparisons for checking a world model against the renderer: PSNR, SSIM, horizontal and road shift.

numpy only; frames are uint8 [T, H, W, 3] (or [H, W, 3]). No model or torch code here.
"""

from __future__ import annotations

import numpy as np


def psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-frame PSNR in dB of uint8 frames [T, H, W, 3] (a scalar array for one frame)."""
    err = (a.astype(np.float64) - b.astype(np.float64)) ** 2
    mse = err.reshape(err.shape[0], -1).mean(1) if a.ndim == 4 else err.mean()
    return 10 * np.log10(255.0**2 / np.maximum(mse, 1e-10))


def _blur(x: np.ndarray, sigma: float = 1.5, radius: int = 5) -> np.ndarray:
    """Separable Gaussian blur over the last two axes with reflect padding."""
    k = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    k /= k.sum()
    pad = [(0, 0)] * (x.ndim - 2) + [(radius, radius), (radius, radius)]
    x = np.pad(x, pad, mode="reflect")
    x = sum(k[i] * x[..., i : i + x.shape[-2] - 2 * radius, :] for i in range(2 * radius + 1))
    return sum(k[i] * x[..., i : i + x.shape[-1] - 2 * radius] for i in range(2 * radius + 1))


def ssim(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-frame SSIM (Wang et al. 2004, Gaussian window σ = 1.5) on luma of uint8 frames [T, H, W, 3]."""
    w = np.array([0.299, 0.587, 0.114])
    x, y = a.astype(np.float64) @ w, b.astype(np.float64) @ w  # (T, H, W)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = _blur(x), _blur(y)
    sxx, syy, sxy = _blur(x * x) - mx**2, _blur(y * y) - my**2, _blur(x * y) - mx * my
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    return s.reshape(s.shape[0], -1).mean(1) if s.ndim == 3 else s.mean()


def horizontal_shift(frame: np.ndarray, reference: np.ndarray, rows: slice, max_shift: int = 16) -> int:
    """The integer dx that best aligns `frame` to `reference` over `rows` (positive: content moved right)."""
    f = frame[rows].astype(np.float64).mean(-1)  # (R, W)
    r = reference[rows].astype(np.float64).mean(-1)
    width = f.shape[1]
    best, best_err = 0, np.inf
    for dx in range(-max_shift, max_shift + 1):
        a = f[:, max(dx, 0) : width + min(dx, 0)]  # frame columns x + dx ...
        b = r[:, max(-dx, 0) : width + min(-dx, 0)]  # ... against reference columns x
        err = ((a - b) ** 2).mean()
        if err < best_err:
            best, best_err = dx, err
    return best


def road_centre_shift(
    frame: np.ndarray, reference: np.ndarray, rows: slice, road: np.ndarray, grass: np.ndarray
) -> float:
    """How far the road's centre moved right (px) from `reference` to `frame`, averaged over `rows`.

    Each pixel is road if it is nearer (RGB) to one of the `road` colours than to all of the `grass` colours
    (arrays of RGB rows: a scene's palette); a row's centre is the mean column of its road pixels. The lane
    dividers and rumble strips count as road, so the centre is that of the whole road. Rows without road in
    either frame are left out (0.0 if none is left). Unlike `horizontal_shift` this reads the road/grass
    boundary, which the channel mean hides (night: road 66 against grass 45-55 grey levels), and it has no
    alias one lane over.
    """

    def centres(img: np.ndarray) -> np.ndarray:
        f = img[rows].astype(np.float64)[..., None, :]  # (R, W, 1, 3)
        d_road = ((f - np.asarray(road, np.float64)) ** 2).sum(-1).min(-1)
        d_grass = ((f - np.asarray(grass, np.float64)) ** 2).sum(-1).min(-1)
        mask = d_road < d_grass  # (R, W)
        cols = np.arange(mask.shape[1], dtype=np.float64)
        n = mask.sum(1)
        return np.where(n > 0, (mask * cols).sum(1) / np.maximum(n, 1), np.nan)

    d = centres(frame) - centres(reference)
    return float(np.nanmean(d)) if np.isfinite(d).any() else 0.0
