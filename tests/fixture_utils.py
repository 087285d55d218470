"""Read the reference fixtures: discovered by glob, settings taken from each file's `info` metadata."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from inferix_core.pipeline import PipelineHooks

FIXTURES = Path(__file__).parent / "fixtures"


class FixtureNoise:
    """Feeds a fixture's stored initial noise and per-step re-noise draws to the pipeline instead of drawing."""

    def __init__(self, tensors: dict):
        self.t = tensors

    def initial(self, start_frame, shape):
        return self.t["noise"][:, start_frame : start_frame + shape[1]]

    def step(self, block, step, shape):
        return self.t[f"block{block}.step{step}.noise"]


class Recorder(PipelineHooks):
    """Pipeline hooks that keep every step's x0 by (block, step), to compare with the fixture's."""

    def __init__(self):
        self.x0 = {}

    def on_step(self, index, step, x0):
        self.x0[(index, step)] = x0.clone()


def fixture_files(pattern: str) -> list[Path]:
    return sorted(FIXTURES.glob(pattern))


def read_fixture(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    with safe_open(str(path), "pt") as f:
        info = json.loads(f.metadata()["info"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    return info, tensors


def fixture_weights(path: Path, info: dict, tensors: dict) -> dict[str, torch.Tensor]:
    """`weights.*` of this file, or of the file named by `weights_file`."""
    if "weights_file" in info:
        _, tensors = read_fixture(path.parent / info["weights_file"])
    return {k[len("weights.") :]: v for k, v in tensors.items() if k.startswith("weights.")}


def sampling_from_metadata(p: dict):
    """The authors' run settings (a fixture's `info.pipeline`) as our SamplingConfig.

    Optional keys: `denoising_step_list_first_chunk` (Krea's first block) and `do_kv_recomp` with
    `kv_cache_num_frames` (Krea's KV recompute), `keep_first_frame` (Krea's first-frame re-encode when
    false; fixtures written before it was recorded kept the first frame); without them, the defaults.
    """
    from inferix_core.pipeline import SamplingConfig

    first = p.get("denoising_step_list_first_chunk")
    return SamplingConfig(
        denoising_steps=tuple(p["denoising_step_list"]),
        warp_denoising_steps=p["warp_denoising_step"],
        shift=p["timestep_shift"],
        num_train_timesteps=p["num_train_timesteps"],
        block_frames=p["num_frame_per_block"],
        context_noise=p["context_noise"],
        independent_first_frame=p["independent_first_frame"],
        first_block_denoising_steps=tuple(first) if first else None,
        kv_recompute_frames=p["kv_cache_num_frames"] if p.get("do_kv_recomp") else 0,
        keep_first_frame=p.get("keep_first_frame", True),
    )


def cache_from_metadata(p: dict):
    """The authors' attention window (`local_attn_size`, -1 or 0 = global) and sink as our KVCacheConfig."""
    from inferix_core.cache import KVCacheConfig

    window = p["local_attn_size"]
    return KVCacheConfig(window_frames=window if window > 0 else -1, sink_frames=p["sink_size"])


def settings_from_metadata(info: dict):
    """(SamplingConfig, KVCacheConfig) of a fixture, from its `info.pipeline` alone."""
    return sampling_from_metadata(info["pipeline"]), cache_from_metadata(info["pipeline"])


# Inferix Load World Model's inputs for the tiny fixture model (the `models_dir` fixture of tests/nodes):
# transformer + VAE files, no preview decoder, the bundled text encoder, fp32 SDPA on the CPU.
TINY_LOADER_INPUTS = dict(
    model="causal_wan_tiny.safetensors",
    vae="wan_vae_tiny.safetensors",
    preview_decoder="none",
    text_encoder="bundled",
    dtype="fp32",
    attention="sdpa",
    device="cpu",
)


def tiny_loader_inputs(**overrides) -> dict:
    """A fresh copy of TINY_LOADER_INPUTS with `overrides` (e.g. fp8=True, device="auto")."""
    return {**TINY_LOADER_INPUTS, **overrides}
