"""A ProfileReport as a few lines of plain text: for the Profile Report node, logs and terminals.

Only lays out numbers the report already holds (html_report.py draws the same data as a page); it
measures nothing and reads no files.
"""

from __future__ import annotations

from inferix_core.profiling.report import ProfileReport

GiB = 1024**3


def _num(value: float | None, unit: str, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GiB:.2f} GiB"


def format_profile(report: ProfileReport) -> str:
    """Throughput, latency, stage totals, peak memory (host, GPU, KV cache), then one line per block."""
    lat = report.block_latency_s
    lines = [
        f"{report.num_frames} frames in {report.wall_s:.2f} s on {report.device}: {_num(report.fps, ' fps')} "
        f"(steady {_num(report.steady_fps, ' fps')}), first frame {_num(report.time_to_first_frame_s, ' s')}",
        f"block latency: median {_num(lat.get('median'), ' s')}, p90 {_num(lat.get('p90'), ' s')}, "
        f"max {_num(lat.get('max'), ' s')}",
    ]
    for name, total in report.stage_totals.items():
        lines.append(f"  {name}: {total['wall_s']:.2f} s over {int(total['count'])} call(s)")
    memory = f"peak host memory {_gib(report.peak_rss_bytes)}"
    if report.peak_gpu_bytes is not None:
        memory += f", peak GPU {_gib(report.peak_gpu_bytes)}"
    kv = {s.block_index: s.stats for s in report.kv_cache if s.block_index is not None}
    resident = [st.get("resident_bytes") for st in kv.values() if st.get("resident_bytes") is not None]
    if resident:
        memory += f", peak KV cache {_gib(max(resident))}"
        offloaded = [st.get("offloaded_bytes") or 0 for st in kv.values()]
        if any(offloaded):
            memory += f" (+{_gib(max(offloaded))} offloaded to host)"
    lines.append(memory)
    for block in report.blocks:
        line = f"  block {block.index}: {block.wall_s:.3f} s, {block.num_frames} frames"
        if kv.get(block.index, {}).get("resident_bytes") is not None:
            line += f", KV {_gib(kv[block.index]['resident_bytes'])}"
        lines.append(line)
    return "\n".join(lines)
