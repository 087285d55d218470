"""Benchmark the KV cache kinds: time per block, memory, offload transfer hiding, quantization error.

    python bench/bench_kv_cache.py --tiny            # CPU, seconds: tiny model + fixture/random-data errors
    python bench/bench_kv_cache.py                   # GPU: Wan 1.3B shape (random weights), 480×832, window 21

Prints a table and writes JSON (--json). On CUDA every kind's loop first runs once under
torch.cuda.set_sync_debug_mode("error") (no host syncs), and offloaded runs are checked bitwise against the
resident paged cache. Times cover the blocks only (the cache, with its pinned host pages, is built before the
clock starts). Offload runs with several numbers of offloaded layers (all, 24, the planner's largest count for
hidden copies, half); per setting: pinned H2D bandwidth (a plain copy of one layer's past window, and the rate
the run's own copies reached), transfer seconds, hidden share = 1 − max(0, t_offload − t_resident) / (h2d + d2h
copy time), the same measured from the compute stream's waits (1 − stall / h2d time), and s/block.
Weights are random: quantization errors here are for a random model; the trained-model numbers need a
checkpoint (docs/kv_cache.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from inferix_core.cache import KVCacheConfig, KVCacheSpec, create_kv_cache, plan_memory
from inferix_core.cache.offload_layout import budget_for_offloaded
from inferix_core.cache.planner import estimate_offload
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest, SamplingConfig

log = logging.getLogger("bench_kv_cache")
BLOCK = 3


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


class DeviceNoise:
    """Seeded noise drawn where the model runs (a CPU draw copied to the GPU would be a host sync)."""

    def __init__(self, seed: int, device: str):
        self.device = device
        self.g = torch.Generator(device=device).manual_seed(seed)

    def initial(self, start_frame, shape):
        return torch.randn(shape, generator=self.g, device=self.device)

    def step(self, block, step, shape):
        return torch.randn(shape, generator=self.g, device=self.device)


def kinds(window: int, sink: int, spec: KVCacheSpec, model_config) -> dict[str, KVCacheConfig]:
    """The configurations compared. offload_<m>: m layers offloaded (budget from budget_for_offloaded)."""
    base = KVCacheConfig(window_frames=window, sink_frames=sink)
    paged = dataclasses.replace(base, page_frames=BLOCK)
    out = {
        "ring": base,
        "paged": paged,
        "offload_all": dataclasses.replace(paged, offload="always"),
        "int8": dataclasses.replace(base, quantization="int8"),
        "int4": dataclasses.replace(base, quantization="int4"),
    }
    L = spec.num_layers
    planner = estimate_offload(model_config, spec, paged, num_offloaded=L).max_hidden_offloaded
    for m in sorted({round(0.8 * L), planner, L // 2} - {L}, reverse=True):
        if m >= 3:  # fewer than 3 offloaded layers save nothing (offload.budget_for_offloaded)
            out[f"offload_{m}"] = dataclasses.replace(
                paged, offload="auto", gpu_budget_bytes=budget_for_offloaded(paged, spec, m)
            )
    return out


def copy_bandwidth(nbytes: int, repeats: int = 10) -> dict:
    """Pinned host ↔ device copy rate (GB/s) for a buffer of `nbytes` (one layer's past window)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    res = {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        dst.copy_(src, non_blocking=True)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        res[f"{name}_GBps"] = repeats * nbytes / (start.elapsed_time(end) / 1000) / 1e9
    res["bytes"] = nbytes
    return res


def run(model, cfg: KVCacheConfig, lat_h: int, lat_w: int, num_blocks: int, device: str, strict: bool = False):
    """One generation; returns (latents, cache, seconds of the blocks alone)."""
    pipe = BlockDiffusionPipeline(model, SamplingConfig(block_frames=BLOCK), cfg)
    c = model.config
    context = torch.randn(1, c.text_len, c.text_dim, generator=torch.Generator().manual_seed(1))
    context = context.to(device, next(model.parameters()).dtype)
    cuda = device.startswith("cuda")
    if cuda:
        dev = next(model.parameters()).device
        for b in range(num_blocks):  # RoPE tables are built on the CPU on first use: build them up front
            model.rope.freqs(torch.arange(b * BLOCK, (b + 1) * BLOCK), lat_h // 2, lat_w // 2, dev)
    state = pipe.start_stream(context, lat_h, lat_w, noise=DeviceNoise(2, device), max_frames=num_blocks * BLOCK)
    if cuda:
        torch.cuda.synchronize()
        if strict:
            torch.cuda.set_sync_debug_mode("error")
    try:
        t0 = time.perf_counter()
        out = torch.cat([pipe.denoise_block(state).latents for _ in range(num_blocks)], dim=1)
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(0)
    return out, state.cache, secs


def random_attention_errors(device: str) -> dict:
    """Attention-output and K/V relative error of int8/int4 pages on random data (window 21, sink 3)."""
    res = {}
    for q in ("int8", "int4"):
        g = torch.Generator().manual_seed(0)
        spec = KVCacheSpec(1, 4, 32, 64, BLOCK, device=device)
        exact = create_kv_cache(KVCacheConfig(window_frames=21, sink_frames=3), spec)
        quant = create_kv_cache(KVCacheConfig(window_frames=21, sink_frames=3, quantization=q), spec)
        worst = {"k": 0.0, "v": 0.0, "attn": 0.0}
        for b in range(12):
            k = torch.randn(1, 192, 4, 32, generator=g) * (1 + 3 * torch.rand(1, 1, 1, 32, generator=g))
            v, query = torch.randn(1, 192, 4, 32, generator=g), torch.randn(1, 192, 4, 32, generator=g)
            k, v, query = k.to(device), v.to(device), query.to(device).transpose(1, 2)
            exact.begin(3 * b, 3)
            quant.begin(3 * b, 3)
            exact.layer(0).update(k, v)
            kq, vq = quant.layer(0).update(k, v)
            ke, ve = exact.logical_kv(0)
            oe = F.scaled_dot_product_attention(query, ke.transpose(1, 2), ve.transpose(1, 2))
            oq = F.scaled_dot_product_attention(query, kq.transpose(1, 2), vq.transpose(1, 2))
            for key, val in (("k", rel(kq, ke)), ("v", rel(vq, ve)), ("attn", rel(oq, oe))):
                worst[key] = max(worst[key], val)
        worst["bytes_ratio"] = quant.stats()["resident_bytes"] / exact.stats()["resident_bytes"]
        res[q] = worst
    return res


def fixture_errors() -> dict:
    """Final-latent error of int8/int4 on the reference fixture rollouts (CPU, float32)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
    from tests.cache.test_cache_parity import FILES, FixtureNoise, build

    res = {}
    for path in FILES:
        for q in ("int8", "int4"):
            info, t, model, sampling, base = build(path)
            p = info["pipeline"]
            B, _F, _C, H, W = p["latent_shape"]
            pipe = BlockDiffusionPipeline(model, sampling, dataclasses.replace(base, quantization=q))
            out = pipe.generate(
                GenerationRequest(
                    num_blocks=p["num_blocks"],
                    latent_height=H,
                    latent_width=W,
                    context=t["text_context"],
                    batch_size=B,
                    noise=FixtureNoise(t),
                )
            )
            ref = t["output_latents"]
            res[f"{path.stem}/{q}"] = {"rel": rel(out, ref), "max_abs": (out - ref).abs().max().item()}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="CPU, tiny model (seconds)")
    ap.add_argument("--blocks", type=int, default=None, help="timed blocks (default 8 GPU, 40 tiny)")
    ap.add_argument("--window", type=int, default=21, help="window_frames (latent frames)")
    ap.add_argument("--sink", type=int, default=3, help="sink_frames")
    ap.add_argument("--json", type=Path, default=Path("bench_kv_cache.json"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    # 1. model and geometry
    if args.tiny or not torch.cuda.is_available():
        device, dtype, lat_h, lat_w = "cpu", torch.float32, 8, 12
        torch.set_num_threads(1)
        cfg = WanConfig(dim=64, ffn_dim=128, freq_dim=32, text_dim=32, text_len=16, num_heads=4, num_layers=2)
        blocks = args.blocks or 40
    else:
        device, dtype, lat_h, lat_w = "cuda", torch.bfloat16, 60, 104  # 480 × 832
        cfg = WanConfig()  # Wan 2.1 T2V 1.3B shape
        blocks = args.blocks or 8
    torch.manual_seed(0)
    model = CausalWanTransformer(cfg).to(device, dtype).eval()
    spec = KVCacheSpec(cfg.num_layers, cfg.num_heads, cfg.head_dim, cfg.frame_tokens(lat_h, lat_w), BLOCK, dtype=dtype)
    plan = plan_memory(
        cfg,
        lat_h,
        lat_w,
        KVCacheConfig(window_frames=args.window, sink_frames=args.sink),
        dtype=dtype,
        budget_bytes=torch.cuda.get_device_properties(0).total_memory if device == "cuda" else None,
    )
    log.info("%s\n", plan.describe())

    # 2. every kind: a strict no-sync run (CUDA), a warm-up, then the timed run
    results: dict[str, dict] = {}
    outputs: dict[str, torch.Tensor] = {}
    configs = kinds(args.window, args.sink, spec, cfg)
    bandwidth = None
    if device == "cuda":
        past = estimate_offload(cfg, spec, configs["offload_all"]).bytes_per_layer_call
        bandwidth = copy_bandwidth(past)
        log.info(
            "pinned copies of %.1f MB: h2d %.1f GB/s, d2h %.1f GB/s",
            past / 1e6,
            bandwidth["h2d_GBps"],
            bandwidth["d2h_GBps"],
        )
    for name, kv in configs.items():
        if device == "cuda":
            run(model, kv, lat_h, lat_w, 2, device, strict=True)
            torch.cuda.reset_peak_memory_stats()
            base_mem = torch.cuda.memory_allocated()
        out, cache, secs = run(model, kv, lat_h, lat_w, blocks, device)
        st = cache.stats()
        outputs[name] = out
        results[name] = {
            "kind": st["kind"],
            "s_per_block": secs / blocks,
            "resident_bytes": st["resident_bytes"],
            "offloaded_bytes": st.get("offloaded_bytes", 0),
            "transfer_seconds": st.get("transfer_seconds", 0.0),
            "offloaded_layers": len(st.get("offloaded_layers", [])),
            "h2d_bytes": st.get("h2d_bytes", 0),
            "d2h_bytes": st.get("d2h_bytes", 0),
            "h2d_GBps": st.get("h2d_GBps"),
            "hidden_h2d_pct": st.get("hidden_h2d_pct"),
            "stall_seconds": st.get("stall_seconds"),
            "prefetch_hit_rate": st.get("prefetch_hit_rate"),
            "prefetch_ready_rate": st.get("prefetch_ready_rate"),
            "peak_extra_bytes": (torch.cuda.max_memory_allocated() - base_mem) if device == "cuda" else None,
            "sync_free": device == "cuda" or None,
        }
    # 3. derived: hidden transfer share (vs resident paged), bitwise check, error vs the exact cache
    t_res = results["paged"]["s_per_block"] * blocks
    for name, r in results.items():
        r["rel_err_vs_ring"] = rel(outputs[name], outputs["ring"])
        if name.startswith("offload"):
            r["bitwise_equal_resident"] = bool(torch.equal(outputs[name], outputs["paged"]))
            overhead = max(0.0, r["s_per_block"] * blocks - t_res)
            r["hidden_transfer_pct"] = 100 * (1 - overhead / r["transfer_seconds"]) if r["transfer_seconds"] else 100.0
            est = estimate_offload(cfg, spec, configs[name], num_offloaded=r["offloaded_layers"])
            r["planner_best_hidden_pct"] = 100 * est.best_hidden_fraction
    report = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "dtype": str(dtype),
        "latent": [lat_h, lat_w],
        "window_frames": args.window,
        "sink_frames": args.sink,
        "blocks": blocks,
        "model": {"num_layers": cfg.num_layers, "dim": cfg.dim, "num_heads": cfg.num_heads},
        "plan": plan.to_dict(),
        "copy_bandwidth": bandwidth,
        "kinds": results,
        "random_attention_errors": random_attention_errors(device),
    }
    if device == "cpu":
        report["fixture_errors"] = fixture_errors()

    # 4. table + JSON
    mib = 1024**2
    log.info(
        "%-13s %9s %10s %10s %7s %9s %8s %8s %8s %9s %10s",
        "kind",
        "s/block",
        "cache MiB",
        "host MiB",
        "layers",
        "xfer s",
        "h2d GB/s",
        "hidden%",
        "stall-h%",
        "bitwise",
        "rel err",
    )

    def pct(x):
        return "-" if x is None else f"{x:.1f}"

    for name, r in results.items():
        log.info(
            "%-13s %9.4f %10.3f %10.3f %7s %9.3f %8s %8s %8s %9s %10.2e",
            name,
            r["s_per_block"],
            r["resident_bytes"] / mib,
            r["offloaded_bytes"] / mib,
            r["offloaded_layers"] or "-",
            r["transfer_seconds"],
            pct(r["h2d_GBps"]),
            pct(r.get("hidden_transfer_pct")),
            pct(r["hidden_h2d_pct"]),
            r.get("bitwise_equal_resident", "-"),
            r["rel_err_vs_ring"],
        )
    for q, e in report["random_attention_errors"].items():
        log.info(
            "random data %s: attention rel err %.2e, K %.2e, V %.2e, bytes %.2f of exact",
            q,
            e["attn"],
            e["k"],
            e["v"],
            e["bytes_ratio"],
        )
    for key, e in report.get("fixture_errors", {}).items():
        log.info("fixture %s: final latents rel err %.2e, max abs %.2e", key, e["rel"], e["max_abs"])
    args.json.write_text(json.dumps(report, indent=1))
    log.info("wrote %s", args.json)
    bad = [n for n, r in results.items() if r.get("bitwise_equal_resident") is False]
    if bad:
        raise SystemExit(f"offloaded cache differs from the resident one: {bad}")


if __name__ == "__main__":
    main()
