"""LV-Bench results: the JSON-serialisable dataclasses, the text table and the per-chunk PNG plot.

Every score a user sees is named here, in one place, so a proxy can never be printed under the
published metric's name: a proxy's label always ends in `_proxy`. The plot is drawn with Pillow
(matplotlib is not a dependency).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw

# The whole-video VBench dimension behind each LV-Bench metric.
VBENCH_NAMES = {
    "clarity": "imaging_quality",
    "motion": "motion_smoothness",
    "aesthetic": "aesthetic_quality",
    "background": "background_consistency",
    "subject": "subject_consistency",
    "dynamic": "dynamic_degree",
}


def _jsonable(x: object) -> object:
    """Floats that strict JSON cannot hold (inf from m₁ = 0, NaN from too-short chunks) become strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    return x


@dataclass
class MetricReport:
    """One base metric on one video: its per-chunk scores, VDE, whole-video score and start–end contrast."""

    metric: str  # "clarity", "motion", …
    is_proxy: bool
    backend: str  # which network or proxy produced the numbers
    chunk_scores: list[float] = field(default_factory=list)
    vde: float = math.nan
    video_score: float = math.nan  # the whole-video VBench score (or its proxy)
    start_score: float = math.nan  # FramePack: metric on the first 15% of frames
    end_score: float = math.nan  # … and on the last 15%
    start_end_contrast: float = math.nan
    unavailable: str | None = None  # why nothing was computed, when nothing was

    @property
    def label(self) -> str:
        return f"{self.metric}_proxy" if self.is_proxy else self.metric

    def named_scores(self) -> dict[str, float]:
        """The scores under their public names: vde_*, vbench_*, framepack_drift_* (+ _proxy)."""
        if self.unavailable is not None:
            return {}
        suffix = "_proxy" if self.is_proxy else ""
        return {
            f"vde_{self.label}": self.vde,
            f"vbench_{VBENCH_NAMES[self.metric]}{suffix}": self.video_score,
            f"framepack_drift_{self.label}": self.start_end_contrast,
        }


@dataclass
class LVBenchResult:
    """All LV-Bench scores of one video; `to_dict()` is what `--json` writes and the node returns."""

    video: str
    num_frames: int
    num_chunks: int
    frames_per_chunk: int
    weighting: str = "linear"
    fps: float | None = None
    metrics: dict[str, MetricReport] = field(default_factory=dict)
    skipped: str | None = None  # why the video was not scored (e.g. fewer frames than chunks)

    def scores(self) -> dict[str, float]:
        """Flat {public name: value} over all metrics that were computed."""
        out: dict[str, float] = {}
        for report in self.metrics.values():
            out.update(report.named_scores())
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        for name, report in self.metrics.items():
            d["metrics"][name]["label"] = report.label
        d["scores"] = self.scores()
        return _jsonable(d)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)


def mean_scores(results: list[LVBenchResult]) -> dict[str, float]:
    """Mean of each public score over the videos that have a finite value for it."""
    sums: dict[str, list[float]] = {}
    for r in results:
        for k, v in r.scores().items():
            if math.isfinite(v):
                sums.setdefault(k, []).append(v)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def format_table(results: list[LVBenchResult]) -> str:
    """Plain-text table: one row per video plus a mean row, one column per public score name."""
    columns: list[str] = []
    for r in results:
        columns += [k for k in r.scores() if k not in columns]
    names = [Path(r.video).name or r.video for r in results]
    width = max([len("mean"), *map(len, names)])
    lines = ["  ".join(["video".ljust(width), *(c.rjust(max(len(c), 8)) for c in columns)])]

    def row(name: str, values: dict[str, float]) -> str:
        cells = [(f"{values[c]:.4f}" if c in values else "-").rjust(max(len(c), 8)) for c in columns]
        return "  ".join([name.ljust(width), *cells])

    for name, r in zip(names, results):
        lines.append(row(name, r.scores()) if r.skipped is None else f"{name.ljust(width)}  skipped: {r.skipped}")
    if len(results) > 1:
        lines.append(row("mean", mean_scores(results)))
    notes = sorted({f"{m.metric}: {m.unavailable}" for r in results for m in r.metrics.values() if m.unavailable})
    return "\n".join(lines + [f"unavailable - {n}" for n in notes])


def plot_chunk_scores(result: LVBenchResult, path: str | Path, panel_size: tuple[int, int] = (360, 200)) -> Path:
    """Write a PNG with one panel per metric: its score on each chunk, so drift shows as a slope."""
    reports = [m for m in result.metrics.values() if m.chunk_scores and m.unavailable is None]
    pw, ph = panel_size
    cols = max(1, min(3, len(reports)))
    rows = max(1, math.ceil(len(reports) / cols))
    img = Image.new("RGB", (cols * pw, rows * ph + 24), "white")
    draw = ImageDraw.Draw(img)
    draw.text((6, 6), f"{Path(result.video).name}: per-chunk scores ({result.num_chunks} chunks)", fill="black")
    for k, report in enumerate(reports):
        x0, y0 = (k % cols) * pw, 24 + (k // cols) * ph
        left, right, top, bottom = x0 + 48, x0 + pw - 12, y0 + 22, y0 + ph - 22
        draw.text((x0 + 6, y0 + 4), f"{report.label}  VDE={report.vde:.4g}", fill="black")
        draw.rectangle([left, top, right, bottom], outline="gray")
        vals = [v if math.isfinite(v) else math.nan for v in report.chunk_scores]
        finite = [v for v in vals if not math.isnan(v)]
        if not finite:
            continue
        lo, hi = min(finite), max(finite)
        span = (hi - lo) or max(abs(hi), 1e-6)
        lo, hi = lo - 0.1 * span, hi + 0.1 * span
        draw.text((x0 + 2, top), f"{hi:.3g}", fill="gray")
        draw.text((x0 + 2, bottom - 10), f"{lo:.3g}", fill="gray")
        n = len(vals)
        pts = [
            (left + (right - left) * (i / max(n - 1, 1)), bottom - (bottom - top) * (v - lo) / (hi - lo))
            for i, v in enumerate(vals)
            if not math.isnan(v)
        ]
        color = "darkorange" if report.is_proxy else "royalblue"
        if len(pts) > 1:
            draw.line(pts, fill=color, width=2)
        for px, py in pts:
            draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=color)
        draw.text((left, bottom + 4), "chunk 1", fill="gray")
        draw.text((right - 50, bottom + 4), f"chunk {n}", fill="gray")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path
