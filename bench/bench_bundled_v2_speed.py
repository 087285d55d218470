"""CPU speed of candidate bundled-model v2 sizes: 10 s of video through the real pipeline, random weights.

    python bench/bench_bundled_v2_speed.py [--threads 2] [--repeats 3] [--json OUT.json]

Each candidate builds a random CausalWanTransformer + TinyCausalAE at the given sizes, then times the
quickstart path (BlockDiffusionPipeline.stream + the AE's streaming decoder) for 160+ frames; the
minimum over repeats is reported, because the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from inferix_core.cache.spec import KVCacheConfig
from inferix_core.models.wan.causal_transformer import CausalWanTransformer
from inferix_core.models.wan.config import WanConfig
from inferix_core.pipeline.block_diffusion import BlockDiffusionPipeline, GenerationRequest
from inferix_core.scheduler import SamplingConfig
from inferix_core.vae.tiny_ae import TinyAEConfig, TinyCausalAE

CANDIDATES = {
    # name: (pixels, dim, layers, heads, ffn, steps, block_frames, window, ae latent channels, ae pixel channels)
    "v1_64": (64, 256, 8, 4, 768, 4, 3, 12, 192, (64, 32)),
    "96_d256_l8_s4": (96, 256, 8, 4, 768, 4, 3, 12, 192, (64, 32)),
    "96_d256_l6_s3": (96, 256, 6, 4, 768, 3, 3, 12, 192, (64, 32)),
    "96_d256_l8_s3": (96, 256, 8, 4, 768, 3, 3, 12, 192, (64, 32)),
    "96_d320_l6_s3": (96, 320, 6, 5, 960, 3, 3, 12, 192, (64, 32)),
    "96_d256_l8_s4_w18": (96, 256, 8, 4, 768, 4, 3, 18, 192, (64, 32)),
    "128_d256_l8_s4": (128, 256, 8, 4, 768, 4, 3, 12, 192, (64, 32)),
}


def build(c):
    px, dim, layers, heads, ffn, steps, bf, window, lc, pc = c
    wcfg = WanConfig(
        dim=dim, ffn_dim=ffn, freq_dim=128, text_dim=32, text_len=4, num_heads=heads, num_layers=layers, action_dim=5
    )
    tr = CausalWanTransformer(wcfg).eval()
    ae = TinyCausalAE(TinyAEConfig(latent_channels=lc, pixel_channels=pc)).eval()
    ts = [1000, 750, 500, 250][:steps] if steps == 4 else [1000, 667, 333][:steps]
    sampling = SamplingConfig(denoising_steps=ts, warp_denoising_steps=True, shift=5.0, block_frames=bf)
    cache = KVCacheConfig(window_frames=window, sink_frames=0)
    return tr, ae, sampling, cache, px // 8


@torch.inference_mode()
def time_once(tr, ae, sampling, cache, lat, bf, frames_wanted=160):
    num_latent = bf * -(-((frames_wanted - 1) // 4 + 1) // bf)
    t0 = time.perf_counter()
    pipe = BlockDiffusionPipeline(tr, sampling, cache)
    req = GenerationRequest(
        num_blocks=num_latent // bf,
        latent_height=lat,
        latent_width=lat,
        context=torch.randn(1, 4, 32),
        seed=0,
        actions=torch.nn.functional.one_hot(torch.randint(0, 5, (1, num_latent)), 5).float(),
    )
    dec, t_model, t_dec, frames = ae.stream_decoder(), 0.0, 0.0, 0
    for out in pipe.stream(req):
        t_model += out.seconds
        t1 = time.perf_counter()
        frames += dec.decode(out.latents.permute(0, 2, 1, 3, 4)).shape[2]
        t_dec += time.perf_counter() - t1
    return {"frames": frames, "total_s": time.perf_counter() - t0, "transformer_s": t_model, "decode_s": t_dec}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", default=list(CANDIDATES))
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = {}
    print(
        f"{'candidate':22s} {'params M':>8s} {'MB fp16':>8s} {'frames':>6s} {'min total s':>11s} {'transf s':>8s} {'dec s':>6s}"
    )
    for name in args.only:
        c = CANDIDATES[name]
        tr, ae, sampling, cache, lat = build(c)
        n_tr = sum(p.numel() for p in tr.parameters())
        n_ae = sum(p.numel() for p in ae.parameters())
        runs = [time_once(tr, ae, sampling, cache, lat, c[6]) for _ in range(args.repeats)]
        best = min(runs, key=lambda r: r["total_s"])
        rows[name] = {
            **best,
            "all_total_s": [round(r["total_s"], 2) for r in runs],
            "params_transformer": n_tr,
            "params_ae": n_ae,
            "mb_fp16": 2 * (n_tr + n_ae) / 1e6,
            "threads": args.threads,
        }
        print(
            f"{name:22s} {(n_tr + n_ae) / 1e6:8.2f} {2 * (n_tr + n_ae) / 1e6:8.1f} {best['frames']:6d} "
            f"{best['total_s']:11.2f} {best['transformer_s']:8.2f} {best['decode_s']:6.2f}  all {rows[name]['all_total_s']}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
