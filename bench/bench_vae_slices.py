"""Wan VAE streamed decode per planner slicing: speed, and the working set measured vs the planner's formula.

Random dim-96 weights, bf16, 480×832, 7 blocks of 3 latent frames, for the reference path and
`VAEDecodeOptions.fast()` and every `vae.memory.DECODE_SLICINGS` entry (whole blocks; the previous
state released; one latent frame per call; that in 2 / 4 / 8 row bands): the median of the 6 later blocks (CUDA events) and the
decode's working set (peak allocated above what was allocated before the session, so the state it
keeps included), beside `VAEMemory.for_vae(...).decode(3, slicing).working_set_bytes`. The whole-block
run of each option set is repeated last, so autotuning in the first run biases nothing. Table + JSON.

    PYTHONPATH=. python3 bench/bench_vae_slices.py [--json vae_slices.json] [--blocks 3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vae.config import VAEDecodeOptions
from inferix_core.vae.memory import DECODE_SLICINGS, VAEMemory

GiB = 2**30


def run(vae: WanVAE, z: torch.Tensor, slicing, blocks: int) -> dict:
    decoder = vae.stream_decoder(
        latent_frames_per_step=slicing.latent_frames_per_step,
        release_previous_state=slicing.release_previous_state,
        row_bands=slicing.row_bands,
    )
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    times = []
    with torch.no_grad():
        for b in range(blocks):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = decoder.decode(z[:, :, 3 * b : 3 * b + 3])
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
            del out
    working = torch.cuda.max_memory_allocated() - base
    del decoder
    later = sorted(times[1:])
    return {"median_ms": later[len(later) // 2], "first_ms": times[0], "working_set_bytes": working}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    with torch.device("cuda"):
        vae = WanVAE(WanVAEConfig(dim=96)).to(torch.bfloat16).eval().requires_grad_(False)
    z = torch.randn(1, 16, 3 * args.blocks, 60, 104, device="cuda", dtype=torch.bfloat16)
    rows = []
    for name, options in (("reference", None), ("fast()", VAEDecodeOptions.fast())):
        vae.decode_options = options
        model = VAEMemory.for_vae(vae, 60, 104)
        for slicing in (*DECODE_SLICINGS, DECODE_SLICINGS[0]):
            r = run(vae, z, slicing, args.blocks)
            planned = model.decode(3, slicing).working_set_bytes
            rows.append({"options": name, "slicing": slicing.describe(3), **r, "planned_bytes": planned})
            print(
                f"{name:<9} {slicing.describe(3):<56} later blocks {r['median_ms']:6.1f} ms (first {r['first_ms']:6.1f}), "
                f"working set {r['working_set_bytes'] / GiB:5.2f} GiB, planned {planned / GiB:5.2f} GiB",
                flush=True,
            )
    if args.json:
        args.json.write_text(
            json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows})
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
