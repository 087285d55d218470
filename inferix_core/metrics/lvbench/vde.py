"""Video Drift Error (VDE) and FramePack's start–end contrast: pure arithmetic on per-chunk scores.

VDE is a weighted MAPE of every chunk against the first one (BlockVid / LV-Bench). It follows
Inferix `LV-Bench/vde.py::vde` exactly: no normalisation by the weight sum, 0 for fewer than two
chunks, +inf when the first chunk scores 0. Scoring the chunks is not done here (see scoring.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...errors import ConfigError

WEIGHTINGS = ("linear", "log")

# FramePack (Zhang & Agrawala 2025, eq. 7): V_start / V_end are the first / last 15% of frames.
START_END_RATIO = 0.15


def drift_weights(num_chunks: int, weighting: str = "linear") -> list[float]:
    """Weights w_2..w_N of VDE: N − i + 1 ("linear") or ln(N − i + 1) ("log").

    The log weighting gives the last chunk weight ln 1 = 0, as in Inferix `vde.py`.
    """
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"Unknown VDE weighting '{weighting}'. Expected one of {list(WEIGHTINGS)}.")
    raw = [num_chunks - i + 1 for i in range(2, num_chunks + 1)]
    return [float(w) for w in raw] if weighting == "linear" else [math.log(w) for w in raw]


def vde(scores: Sequence[float], weighting: str = "linear") -> float:
    """VDE = Σ_{i=2..N} w_i · |m_i − m_1| / m_1 over per-chunk scores m_1..m_N (lower is more stable).

    Args:
        scores: one base-metric score per chunk, in time order.
        weighting: "linear" (default) or "log".
    """
    m = [float(s) for s in scores]
    weights = drift_weights(len(m), weighting)  # validates weighting even when N < 2
    if len(m) < 2:
        return 0.0
    m1 = m[0]
    if m1 == 0.0:
        return math.inf
    # Inferix divides by m_1 itself, not |m_1|; base metrics are non-negative so this only matters
    # for a signed score, where the sign is kept on purpose to match the reference.
    return sum(w * abs(mi - m1) / m1 for w, mi in zip(weights, m[1:]))


def start_end_contrast(start_score: float, end_score: float) -> float:
    """FramePack's Δ_drift = |M(V_start) − M(V_end)| for one quality metric M."""
    return abs(float(start_score) - float(end_score))
