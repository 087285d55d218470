"""What the side-by-side harnesses share (bench/compare_comfy_core.py, bench/compare_longlive.py).

One timing rule for both sides of a comparison: a run is one call of `fn(repeat_index)`, timed with CUDA
events on a GPU (synchronised before and after, peak memory reset before) and with perf_counter on the CPU;
warm-up runs first, then the median of the repeats. The table and the JSON have one shape for every
harness: rows of (side, variant) with total seconds, FPS in pixel frames, peak GiB and the speed-up of ours
over the other side in the same variant.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


def pixel_frames(latent_frames: int) -> int:
    """Wan's temporal VAE: 1 + 4·(F − 1) pixel frames from F latent frames (21 → 81)."""
    return 1 + 4 * (latent_frames - 1)


def time_runs(fn: Callable[[int], torch.Tensor], device: torch.device, warmup: int, repeats: int,
              frames: int) -> tuple[dict, torch.Tensor]:  # fmt: skip
    """Warm-up, then `repeats` timed calls of fn(r); returns the medians and the first timed run's output (CPU fp32)."""
    cuda = device.type == "cuda"
    times, peaks, first = [], [], None
    for r in range(warmup + repeats):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(r)
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1000
        else:
            t0 = time.perf_counter()
            out = fn(r)
            seconds = time.perf_counter() - t0
        if not torch.isfinite(out).all():
            raise RuntimeError("the run produced non-finite latents")
        if r >= warmup:
            times.append(seconds)
            peaks.append(torch.cuda.max_memory_allocated() / 2**30 if cuda else None)
            if first is None:
                first = out.detach().float().cpu()
    total = statistics.median(times)
    result = {"median_total_s": total, "fps": frames / total, "runs_s": times,
              "peak_gib": max(peaks) if cuda else None, "warmup": warmup, "repeats": repeats}  # fmt: skip
    return result, first


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def max_abs_diff(a: torch.Tensor | None, b: torch.Tensor | None) -> float | None:
    if a is None or b is None:
        return None
    return (a.float() - b.float()).abs().max().item()


def print_table(title: str, rows: list[dict], other: str, baseline: str | None = None) -> None:
    """rows: {"side", "variant", "median_total_s", "fps", "peak_gib", ...}; speed-up = other's time / ours in the
    same variant, or in `baseline` where the other side has no such variant (LongLive: eager only)."""
    print(title)
    print(f"{'side':<12} {'variant':<10} {'total s':>8} {'FPS':>7} {'peak GiB':>8} {'ours vs ' + other:>14}")
    base = {r["variant"]: r["median_total_s"] for r in rows if r["side"] == other and "median_total_s" in r}
    for r in rows:
        if "median_total_s" not in r:
            print(f"{r['side']:<12} {r['variant']:<10} FAILED: {r.get('error', '?')[:200]}")
            continue
        speed = "-"
        ref = base.get(r["variant"], base.get(baseline))
        if r["side"] == "ours" and ref is not None:
            speed = f"{ref / r['median_total_s']:.2f}x"
        peak = "-" if r.get("peak_gib") is None else f"{r['peak_gib']:.2f}"
        print(f"{r['side']:<12} {r['variant']:<10} {r['median_total_s']:8.3f} {r['fps']:7.2f} {peak:>8} {speed:>14}")


def speedups(rows: list[dict], other: str, baseline: str | None = None) -> dict[str, float]:
    """{variant: other's median / ours} for every variant of ours with a run of the other side to compare
    (the same variant, else `baseline`)."""
    t = {(r["side"], r["variant"]): r["median_total_s"] for r in rows if "median_total_s" in r}
    out = {}
    for side, v in t:
        ref = t.get((other, v), t.get((other, baseline)))
        if side == "ours" and ref is not None:
            out[v] = ref / t[("ours", v)]
    return out


def write_json(path: Path | None, payload: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(payload, indent=2))


def device_info(device: torch.device) -> dict:
    return {"gpu": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__}
