"""The engine benchmark's tables (one run, several variants) and the block timer it measures with."""

from __future__ import annotations

import time

import torch

from ..pipeline import PipelineHooks


def format_variants(results: list[tuple[str, dict]]) -> str:
    """One line per variant: total, FPS, first block, peak memory, and whether CUDA graphs ran."""
    lines = [f"{'variant':<24} {'total s':>8} {'FPS':>6} {'first block s':>13} {'peak GiB':>8}  CUDA graphs"]
    base = results[0][1]["median_total_s"] if results else None
    for name, r in results:
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        speed = f" ({base / r['median_total_s']:.2f}x of {results[0][0]})" if base else ""
        lines.append(
            f"{name:<24} {r['median_total_s']:8.3f} {r['fps']:6.1f} {r['median_first_block_s']:13.3f} {peak:>8}  "
            f"{_graphs_row(r)}{speed}"
        )
    return "\n".join(lines)


class BlockTimer(PipelineHooks):
    """Records an event (or a host time) at each block boundary; resolved after the run."""

    def __init__(self, cuda: bool):
        self.cuda, self.marks = cuda, []

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def on_block_start(self, index, start_frame):
        if index == 0:
            self.mark()

    def on_block_end(self, output):
        self.mark()

    def seconds(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def effective_attention(name: str) -> str:
    """The backend that ran: an unavailable one falls back to sdpa (flash_attn_4: and per shape, by its table)."""
    from ..attention import get_attention_backend

    return get_attention_backend(name).name


def _graphs_row(result: dict) -> str:
    g = result.get("cuda_graphs")
    if g is None:
        return "on, refused (see the log)" if result["config"].get("cuda_graphs") else "off"
    text = f"{g['graphs']} graphs, {g['replays']} replays, {g['captures']} captures, {g['eager_calls']} eager calls"
    if g["failed_captures"] or g["fallbacks"]:
        text += f", {g['failed_captures']} failed captures, fallbacks {g['fallbacks']}"
    return text


def format_table(result: dict) -> str:
    c = result["config"]
    rows = [
        ("preset", c["preset"]),
        ("device", result["gpu"]),
        (
            "dtype / attention",
            f"{c['dtype']}{' + fp8 block linears' if c.get('fp8') else ''}"
            f"{' + fp8 weight storage' if c.get('fp8_weights') else ''} / {c['attention']}",
        ),
        ("compiled blocks", c.get("compile", False)),
        ("CUDA graphs", _graphs_row(result)),
        ("steps / KV recompute", f"{c.get('steps')} / {c.get('kv_recompute_frames') or 'off'}"),
        ("frames (pixel)", result["pixel_frames"]),
        (
            "vae stream decode",
            f"{c['vae_decode']} ({c.get('decoder', 'wan')}, options: {result.get('vae_options', c.get('vae_fast'))}, "
            f"overlapped: {c['overlap_decode']})",
        ),
        ("median total (s)", f"{result['median_total_s']:.3f}"),
        ("FPS (pixel frames)", f"{result['fps']:.1f}"),
        ("first block (s)", f"{result['median_first_block_s']:.3f}"),
        ("per block (s)", " ".join(f"{b:.3f}" for b in result["median_block_s"])),
        (
            "peak memory (GiB)",
            "-"
            if result["peak_gib"] is None
            else f"{result['peak_gib']:.2f} ({result['peak_reserved_gib']:.2f} reserved)",
        ),
        ("planned (GiB)", f"{result['planned_gib']:.2f}" if "planned_gib" in result else "-"),
        (
            "non-PyTorch GiB (planned / measured)",
            f"{result.get('planned_non_torch_gib', 0):.2f} / "
            + ("-" if result.get("measured_non_torch_gib") is None else f"{result['measured_non_torch_gib']:.2f}"),
        ),
        (
            "block swap",
            "off"
            if result.get("resident_blocks") is None
            else f"{result['resident_blocks']} of {c['preset_layers']} blocks resident",
        ),
        ("emulated card (GB)", c.get("gpu_memory_gb") or "-"),
        ("VAE decode (planned)", result.get("decode_slicing") or "-"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
