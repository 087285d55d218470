"""`inferix lvbench`: LV-Bench scores (VDE, VBench, FramePack drift) for videos or frame folders.

Prints a per-video and mean table, optionally writes JSON and per-chunk PNG plots. The scoring itself
lives in inferix_core/metrics/lvbench/; this module only parses arguments and presents results.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from ..errors import ConfigError

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..metrics.lvbench.scoring import DEFAULT_METRICS, METRICS

    p = subparsers.add_parser(
        "lvbench",
        help="score videos with LV-Bench (VDE drift, VBench, FramePack start-end contrast)",
        description="Score videos with LV-Bench. Networks load from --weights-dir only; a metric whose weights "
        "are missing is reported as a labelled *_proxy (aesthetic has no proxy and is left out).",
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="VIDEO_OR_FOLDER",
        help="an mp4/mov/webm file, a folder of PNG frames, or a folder of either",
    )
    p.add_argument(
        "--metrics",
        nargs="+",
        default=list(DEFAULT_METRICS),
        choices=METRICS,
        metavar="METRIC",
        help=f"metrics to compute, from {', '.join(METRICS)} (default: the five published ones)",
    )
    p.add_argument("--chunks", type=int, default=10, help="N equal chunks per video for VDE (default 10)")
    p.add_argument("--weighting", choices=("linear", "log"), default="linear", help="VDE weights (default linear)")
    p.add_argument(
        "--weights-dir",
        type=Path,
        default=None,
        help="folder with the metric networks (see inferix_core/metrics/lvbench/networks.py)",
    )
    p.add_argument(
        "--fps",
        type=float,
        default=None,
        help="frame rate of frame folders (sets the ~8 fps sampling of dynamic degree; default 16)",
    )
    p.add_argument("--device", default="cpu", help="torch device for the networks (default cpu)")
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="OUT",
        help="write all results to this JSON file (a taken name gets the next number)",
    )
    p.add_argument("--force", action="store_true", help="let --json replace an existing file")
    p.add_argument("--plot-dir", type=Path, default=None, metavar="DIR", help="write a per-chunk PNG plot per video")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..metrics.lvbench.report import format_table, mean_scores, plot_chunk_scores
    from ..metrics.lvbench.scoring import resolve_backends, score_video
    from ..metrics.lvbench.video_io import find_videos, read_video

    if args.chunks < 1:
        raise ConfigError(f"--chunks must be at least 1; got {args.chunks}.")
    videos = [v for path in args.inputs for v in find_videos(path)]
    backends = resolve_backends(args.metrics, args.weights_dir, args.device)
    results = []
    with tqdm(total=len(videos) * len(backends), desc="lvbench", unit="metric") as bar:
        for video in videos:
            bar.set_postfix_str(video.name)
            frames, fps = read_video(video)
            result = score_video(
                frames,
                chunks=args.chunks,
                weighting=args.weighting,
                fps=fps or args.fps,
                backends=backends,
                name=str(video),
                on_metric=lambda _m: bar.update(1),
            )
            if result.skipped is not None:
                bar.update(len(backends))
            results.append(result)
            if args.plot_dir is not None and result.skipped is None:
                plot_chunk_scores(result, args.plot_dir / f"{video.stem}_lvbench.png")

    print(format_table(results))
    if any(b.is_proxy for b in backends.values()):
        print("note: *_proxy columns are weight-free stand-ins, not the published LV-Bench/VBench metrics.")
    if args.json is not None:
        from ..sinks.paths import write_text_output

        payload = {
            "videos": [r.to_dict() for r in results],
            "mean": mean_scores(results),
            "chunks": args.chunks,
            "weighting": args.weighting,
        }
        written = write_text_output(args.json, json.dumps(payload, indent=2, allow_nan=False), force=args.force)
        log.info("wrote %s", written)
    return 0
