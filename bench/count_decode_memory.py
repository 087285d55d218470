"""Count the Wan VAE streaming decode's memory on the meta device and compare it with the planner's formula.

No GPU needed, nothing is computed: the full-size decoder (dim 96, bf16, 480×832) runs on `meta` under
`profiling.LiveBytes`, which tracks every tensor storage until it is freed. For each decode option set
and slicing it decodes two blocks and reports, for the later block, the peak above what was alive before
(the previous state included) and the state kept after it, in GiB and in units U of one latent frame's
last-stage activation, beside `vae.memory.wan_decode_memory` on the CPU (the count does not see cuDNN's
workspaces, see docs/memory.md). The derivation of the formula in docs/memory.md comes from these rows.

    PYTHONPATH=. python bench/count_decode_memory.py [--json counts.json] [--dim 96 --height 60 --width 104]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from inferix_core.profiling.live_bytes import LiveBytes
from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vae.config import VAEDecodeOptions
from inferix_core.vae.memory import DECODE_SLICINGS, VAEMemory

GiB = 2**30


def count_decode(
    vae: WanVAE, latent_h: int, latent_w: int, block_frames: int, slicing, device: str = "meta", blocks: int = 2
) -> dict:
    """Most bytes alive during the last of `blocks` streamed blocks (the state kept from the block before
    included: the decoder's working set) and the state kept after it."""
    decoder = vae.stream_decoder(
        latent_frames_per_step=slicing.latent_frames_per_step,
        release_previous_state=slicing.release_previous_state,
        row_bands=slicing.row_bands,
    )
    z = torch.randn(1, vae.config.z_dim, block_frames, latent_h, latent_w, device=device, dtype=vae.dtype)
    with LiveBytes() as live:
        for _ in range(blocks):
            live.reset_peak()
            out = decoder.decode(z)
            del out
        state = decoder.state.nbytes()
    return {"working_set_bytes": live.peak.bytes, "state_bytes": state, "peak_op": live.peak.op}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=96)
    p.add_argument("--height", type=int, default=60, help="latent height (480 px / 8)")
    p.add_argument("--width", type=int, default=104, help="latent width (832 px / 8)")
    p.add_argument("--block-frames", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    with torch.device("meta"):
        vae = WanVAE(WanVAEConfig(dim=args.dim)).to(torch.bfloat16).eval().requires_grad_(False)
    rows = []
    header = ("options", "slicing", "counted GiB", "formula GiB", "U", "state GiB", "peak op")
    for name, opts in (("reference", None), ("fast()", VAEDecodeOptions.fast())):
        vae.decode_options = opts
        model = VAEMemory.for_vae(vae, args.height, args.width, cuda=False)
        for slicing in DECODE_SLICINGS:
            c = count_decode(vae, args.height, args.width, args.block_frames, slicing)
            formula = model.decode(args.block_frames, slicing)
            rows.append(
                {
                    "options": name,
                    "slicing": slicing.describe(args.block_frames),
                    "counted_working_set_bytes": c["working_set_bytes"],
                    "formula_working_set_bytes": formula.working_set_bytes,
                    "state_bytes": c["state_bytes"],
                    "formula_state_bytes": formula.state_bytes,
                    "unit_bytes": model.unit_bytes,
                    "peak_op": c["peak_op"],
                }
            )
    table = [header]
    for r in rows:
        table.append(
            (
                r["options"],
                r["slicing"],
                f"{r['counted_working_set_bytes'] / GiB:.2f}",
                f"{r['formula_working_set_bytes'] / GiB:.2f}",
                f"{r['counted_working_set_bytes'] / r['unit_bytes']:.2f}",
                f"{r['state_bytes'] / GiB:.2f}",
                r["peak_op"],
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(*table, strict=True)]
    for row in table:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
