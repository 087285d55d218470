"""Render a ``ProfileReport`` as one self-contained HTML page with inline SVG plots.

No JavaScript, fonts or CDN: the file opens offline, attaches to issues and diffs as text.
Plots: per-block time (bars, median and p90 lines) and memory over time (RSS and GPU allocated).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from inferix_core.profiling.report import ProfileReport

_W, _H, _PAD = 720, 220, 44
_MIB = 1024 * 1024


def _fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}{unit}"


def _axis(max_value: float, label: str) -> str:
    """Y grid lines at 0, 1/2 and the max, with the unit label."""
    parts = [f'<text x="4" y="14" class="lbl">{html.escape(label)}</text>']
    for frac in (0.0, 0.5, 1.0):
        y = _H - _PAD + (2 * _PAD - _H) * frac
        parts.append(f'<line x1="{_PAD}" x2="{_W - 8}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{_PAD - 4}" y="{y + 4:.1f}" class="tick" text-anchor="end">{max_value * frac:.3g}</text>'
        )
    return "".join(parts)


def block_time_svg(report: ProfileReport) -> str:
    """Bars of wall time per block (ms), with dashed median and p90 lines."""
    times = [b.wall_s * 1000 for b in report.blocks]
    if not times:
        return "<p>No blocks recorded.</p>"
    top = max(times) * 1.1
    span_w = (_W - _PAD - 8) / len(times)
    plot_h = _H - 2 * _PAD

    def y_of(v: float) -> float:
        return _H - _PAD - v / top * plot_h

    parts = [f'<svg class="plot" id="block-times" viewBox="0 0 {_W} {_H}" role="img">', _axis(top, "ms per block")]
    for i, t in enumerate(times):
        x = _PAD + i * span_w
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{y_of(t):.1f}" width="{max(span_w - 2, 1):.1f}" height="{_H - _PAD - y_of(t):.1f}"'
            f' class="bar"><title>block {report.blocks[i].index}: {t:.1f} ms</title></rect>'
        )
    for name, key in (("median", "median"), ("p90", "p90")):
        y = y_of(report.block_latency_s[key] * 1000)
        parts.append(f'<line x1="{_PAD}" x2="{_W - 8}" y1="{y:.1f}" y2="{y:.1f}" class="{name}"/>')
        x, anchor = (_PAD + 4, "start") if name == "median" else (_W - 10, "end")  # apart when the lines are close
        parts.append(f'<text x="{x}" y="{y - 4:.1f}" text-anchor="{anchor}" class="tick">{name}</text>')
    parts.append(
        f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle" class="lbl">block index (0–{len(times) - 1})</text>'
    )
    return "".join(parts) + "</svg>"


def _polyline(points: Sequence[tuple[float, float]], x_max: float, y_max: float, cls: str) -> str:
    plot_w, plot_h = _W - _PAD - 8, _H - 2 * _PAD
    coords = " ".join(f"{_PAD + t / x_max * plot_w:.1f},{_H - _PAD - v / y_max * plot_h:.1f}" for t, v in points)
    return f'<polyline points="{coords}" class="{cls}"/>'


def memory_svg(report: ProfileReport) -> str:
    """Lines of RSS and (on CUDA) GPU allocated memory in MiB against seconds since run start."""
    samples = report.memory
    if not samples:
        return "<p>No memory samples.</p>"
    rss = [(m.t_s, m.rss_bytes / _MIB) for m in samples]
    gpu = [(m.t_s, m.gpu_allocated_bytes / _MIB) for m in samples if m.gpu_allocated_bytes is not None]
    x_max = max(max(t for t, _ in rss), 1e-9)
    y_max = max(v for _, v in rss + gpu) * 1.1
    parts = [f'<svg class="plot" id="memory" viewBox="0 0 {_W} {_H}" role="img">', _axis(y_max, "MiB")]
    parts.append(_polyline(rss, x_max, y_max, "rss"))
    if gpu:
        parts.append(_polyline(gpu, x_max, y_max, "gpu"))
    parts.append(
        f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle" class="lbl">seconds since run start (0–{x_max:.2f})</text>'
    )
    legend = '<text x="60" y="14" class="rss-t">— CPU RSS</text>' + (
        '<text x="160" y="14" class="gpu-t">— GPU allocated</text>' if gpu else ""
    )
    return "".join(parts) + legend + "</svg>"


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: ProfileReport) -> str:
    """The whole report page."""
    lat = report.block_latency_s
    summary = [
        ("device", report.device), ("decoded frames", str(report.num_frames)), ("FPS (frames / s)", _fmt(report.fps)),
        ("steady FPS (after block 0)", _fmt(report.steady_fps)), ("time to first frame", _fmt(report.time_to_first_frame_s, " s")),
        ("block latency median / p90 / max", " / ".join(_fmt(lat.get(k), " s") for k in ("median", "p90", "max"))),
        ("wall time", _fmt(report.wall_s, " s")), ("peak CPU RSS", f"{report.peak_rss_bytes / _MIB:.0f} MiB"),
        ("peak GPU allocated", "–" if report.peak_gpu_bytes is None else f"{report.peak_gpu_bytes / _MIB:.0f} MiB"),
    ] + [(str(k), str(v)) for k, v in report.meta.items()]  # fmt: skip
    stages = [
        (name, str(int(t["count"])), f"{t['wall_s']:.4f}", f"{t['wall_s'] / t['count'] * 1000:.1f}",
         f"{t['gpu_s']:.4f}" if report.device.startswith("cuda") else "–")
        for name, t in sorted(report.stage_totals.items(), key=lambda kv: -kv[1]["wall_s"])
    ]  # fmt: skip
    kv_section = ""
    if report.kv_cache:
        keys = sorted({k for s in report.kv_cache for k in s.stats})
        last = report.kv_cache[-1].stats
        rows = [
            (
                k,
                f"{last.get(k, float('nan')):.6g}",
                f"{max(s.stats.get(k, float('-inf')) for s in report.kv_cache):.6g}",
            )
            for k in keys
        ]
        kv_section = "<h2>KV cache</h2>" + _table(rows, ["stat", "last", "max"])
    style = (
        "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;max-width:780px}"
        "h1{font-size:20px}h2{font-size:15px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}"
        "td,th{border-bottom:1px solid #dde2ea;padding:4px 12px 4px 0;text-align:left;font-variant-numeric:tabular-nums}"
        ".plot{width:100%;height:auto;background:#fafbfc;border:1px solid #e3e7ee}.grid{stroke:#e3e7ee}"
        ".bar{fill:#3d8bd9}.median{stroke:#e08a00;stroke-dasharray:5 3}.p90{stroke:#c0392b;stroke-dasharray:2 3}"
        ".rss{fill:none;stroke:#3d8bd9;stroke-width:2}.gpu{fill:none;stroke:#27ae60;stroke-width:2}"
        ".tick,.lbl{font-size:11px;fill:#5a6577}.rss-t{font-size:11px;fill:#3d8bd9}.gpu-t{font-size:11px;fill:#27ae60}"
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Inferix profile</title><style>{style}</style>'
        f"</head><body><h1>Inferix run profile</h1>{_table(summary, ['metric', 'value'])}"
        f"<h2>Per-block time</h2>{block_time_svg(report)}<h2>Memory over time</h2>{memory_svg(report)}"
        f"<h2>Stages</h2>{_table(stages, ['stage', 'count', 'total s', 'mean ms', 'GPU s'])}{kv_section}</body></html>"
    )
