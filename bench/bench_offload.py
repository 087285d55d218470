"""Big models on small cards (issue #18): each case fully resident, then capped to an emulated card.

Every run is a fresh `inferix bench` process (so each per-process memory cap and allocator starts clean),
with random weights at 480x832. A capped run plans block swap with the memory planner (`--gpu-memory`)
and reports the measured peak beside the planned total. Prints a table and writes JSON.

    python bench/bench_offload.py --json OUT.json                     # the default cases on one GPU
    python bench/bench_offload.py --case wan-14b:24:fp8w --latent-frames 9
    python bench/bench_offload.py --smoke                              # CPU check of the harness (tiny)

A case is PRESET:CARD_GB[:FLAGS], FLAGS joined by '+': fp8w (fp8 weight storage), fp8 (fp8 GEMMs),
vae (stream-decode with the Wan VAE), vaefast (its `VAEDecodeOptions.fast()`, the loader's default on CUDA),
compile, window=N (KV window, latent frames), sink=N. A capped run with the Wan VAE also lets the planner
choose how the VAE decodes (whole blocks, one latent frame per call with the previous state released, then
that in 2 / 4 / 8 row bands: the same frames); the table names it. "planned GiB" is the plan's tensors (what
the allocated peak is compared with); the cap is the card less the plan's non-PyTorch term (CUDA context and
library workspaces, outside PyTorch's allocator: `cache.planner.planned_non_torch_bytes`), whose planned and
measured (after the run: total − free − reserved) sizes the last column shows.

    PYTHONPATH=. python bench/bench_offload.py --repeats 2 --case wan-1.3b:8:window=12+sink=3+vae+vaefast
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_CASES = [
    "wan-14b:24:window=6",  # Krea Realtime's shape: kv_cache_num_frames 3 + a 3-frame block
    "wan-14b:24:window=6+fp8w",
    "wan-14b:16:window=6+fp8w",
    "wan-1.3b:8:window=12+sink=3",  # LongLive's window
    "wan-1.3b:8:window=12+sink=3+vae",  # the reference decode path (what the first H200 table measured)
    "wan-1.3b:8:window=12+sink=3+vae+vaefast",  # end to end as the loader runs it on CUDA: decode sliced to fit
]


def parse_case(text: str) -> tuple[str, float | None, list[str]]:
    parts = text.split(":")
    if len(parts) < 2:
        raise SystemExit(f"error: case '{text}' is not PRESET:CARD_GB[:FLAGS]")
    card = float(parts[1]) if parts[1] not in ("", "0", "full") else None
    return parts[0], card, parts[2].split("+") if len(parts) > 2 and parts[2] else []


def bench_args(preset: str, card: float | None, flags: list[str], args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "inferix_core", "bench", "--preset", preset]
    cmd += ["--latent-frames", str(args.latent_frames), "--warmup", "1", "--repeats", str(args.repeats)]
    if args.smoke:
        cmd += ["--device", "cpu", "--dtype", "fp32", "--warmup", "0", "--repeats", "1"]
    for flag in flags:
        name, _, value = flag.partition("=")
        if name == "fp8w":
            cmd.append("--fp8-weights")
        elif name in ("fp8", "compile"):
            cmd.append(f"--{name}")
        elif name == "vae":
            cmd.append("--vae-decode")
        elif name == "vaefast":
            cmd.append("--vae-fast")
        elif name in ("window", "sink"):
            cmd += [f"--{name}", value]
        else:
            raise SystemExit(f"error: unknown case flag '{flag}'")
    if card is not None:
        cmd += ["--gpu-memory", str(card)]
    return cmd


def run_one(cmd: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        try:
            proc = subprocess.run(
                [*cmd, "--json", str(out)], capture_output=True, text=True, timeout=timeout, env=dict(os.environ)
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s (--timeout)"}
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"error": " | ".join(tail)}
        return json.loads(out.read_text())


def _non_torch(r: dict) -> str:
    measured = r.get("measured_non_torch_gib")
    return f"{r.get('planned_non_torch_gib', 0):.2f} / " + ("-" if measured is None else f"{measured:.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", help="PRESET:CARD_GB[:FLAGS] (repeatable; default: the issue's cases)")
    p.add_argument("--latent-frames", type=int, default=9, help="latent frames per run (default 9 = 33 pixel frames)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900, help="seconds per bench process")
    p.add_argument("--capped-only", action="store_true", help="skip the fully resident run of each case")
    p.add_argument("--smoke", action="store_true", help="tiny preset on the CPU: checks the harness, not speed")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    cases = args.case or (["tiny:0.001:window=6", "tiny:full:window=6+fp8w"] if args.smoke else DEFAULT_CASES)
    rows, results = [], []
    for case in cases:
        preset, card, flags = parse_case(case)
        resident = None if args.capped_only else run_one(bench_args(preset, None, flags, args), args.timeout)
        capped = run_one(bench_args(preset, card, flags, args), args.timeout) if card is not None else None
        results.append({"case": case, "resident": resident, "capped": capped})
        for label, r in (("resident", resident), (f"{card} GB card", capped)):
            if r is None:
                continue
            if "error" in r:
                rows.append((case, label, "-", "-", "-", "-", "-", "-", "-", r["error"][:90]))
                continue
            blocks = r.get("resident_blocks")
            rows.append(
                (
                    case,
                    label,
                    f"{r['fps']:.2f}",
                    f"{r['median_first_block_s']:.3f}",
                    "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}",
                    f"{r['planned_gib']:.2f}",
                    "all" if blocks is None else str(blocks),
                    r.get("decode_slicing") or "-",
                    _non_torch(r),
                    "",
                )
            )
    header = (
        "case", "run", "FPS", "first block s", "peak GiB", "planned GiB", "resident blocks", "VAE decode",
        "non-PyTorch GiB planned / measured", "note",
    )  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
