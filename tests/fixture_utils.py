"""Read the reference fixtures: discovered by glob, settings taken from each file's `info` metadata."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from safetensors import safe_open

from inferix_core.pipeline import GenerationRequest, PipelineHooks
from tests.fixture_schema import OWN_KINDS, fixture_kind, own_kind

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


@functools.cache
def fixture_header(path: Path) -> tuple[dict, frozenset[str]]:
    """(info, tensor names) of a fixture, without reading a tensor."""
    with safe_open(str(path), "pt") as f:
        return json.loads((f.metadata() or {}).get("info", "{}")), frozenset(f.keys())


def files_of_kind(kind: str, where=None) -> list[Path]:
    """Every tests/fixtures/*.safetensors of a schema kind (`fixture_schema.fixture_kind`, or one of this
    repository's own schemas, `fixture_schema.own_kind`), told by content; `where(info, names)` narrows them
    (e.g. to runs with `lora.*` tensors)."""
    of = own_kind if kind in OWN_KINDS else fixture_kind
    out = []
    for path in sorted(FIXTURES.glob("*.safetensors")):
        info, names = fixture_header(path)
        if of(info, names) == kind and (where is None or where(info, names)):
            out.append(path)
    return out


def has_lora(info: dict, names) -> bool:
    """A LoRA run (README_families: `lora.*` tensors)."""
    return any(k.startswith("lora.") for k in names)


def has_switch(info: dict, names) -> bool:
    """A prompt-switch run (README_families: `info.switch`, `text_context_switch`)."""
    return "switch" in info or "text_context_switch" in names


def is_self_forcing_run(info: dict, names) -> bool:
    """A plain Self-Forcing-schema run (README.md §1): a context pass after every block, README.md's trace
    bookkeeping, no LoRA, no prompt switch, no KV recompute, one step list for every block."""
    p = info.get("pipeline", {})
    return (
        "block0.context.flow_pred" in names
        and "local_end_after_block_layer0" in info.get("trace", {})
        and not has_lora(info, names)
        and not has_switch(info, names)
        and not p.get("do_kv_recomp")
        and not p.get("denoising_step_list_first_chunk")
    )


def self_forcing_runs() -> list[Path]:
    """Every plain Self-Forcing-schema run in tests/fixtures, told by content (any file name)."""
    return files_of_kind("causal_wan", is_self_forcing_run)


def call_start_frame(call: dict, pipeline: dict) -> int:
    """A `trace.calls` entry's first latent frame: `start_frame` if it says, else current_start / frame_seq_length."""
    if call.get("start_frame") is not None:
        return call["start_frame"]
    return call["current_start"] // pipeline["frame_seq_length"]


def call_input(call: dict, tensors: dict) -> torch.Tensor:
    """A `trace.calls` entry's input: `<label>.input` where stored; a context pass stores none in the schema
    (README.md: its input is the block's last step's `x0_pred`), so that is read for `block{b}.context`."""
    key = call["label"] + ".input"
    if key in tensors:
        return tensors[key]
    block, _, kind = call["label"].rpartition(".")
    steps = [int(k[len(block) + 5 : -len(".x0_pred")]) for k in tensors
             if k.startswith(block + ".step") and k.endswith(".x0_pred")]  # fmt: skip
    if kind != "context" or not steps:
        raise KeyError(f"{key} (and no {block}.step*.x0_pred to stand for it)")
    return tensors[f"{block}.step{max(steps)}.x0_pred"]


def call_frames(call: dict, tensors: dict, layout: str = "BFCHW") -> int:
    """A `trace.calls` entry's latent frame count, from its input (`call_input`)."""
    return call_input(call, tensors).shape[1 if layout == "BFCHW" else 2]


def switch_prompts(info: dict, tensors) -> list[str]:
    """Tensor names of a switch run's prompts in order: `text_context`, then `text_context_switch`,
    `text_context_switch2`, ... (or `info.switch.prompts` where the file lists them)."""
    listed = info.get("switch", {}).get("prompts")
    if listed:
        return list(listed)
    n = len(info.get("switch", {}).get("switch_block_indices", [])) or 1
    return ["text_context", *(f"text_context_switch{i + 1 if i else ''}" for i in range(n))]


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


def assert_sigmas_used(sch, timesteps: torch.Tensor, pipeline: dict, sigmas_used: torch.Tensor) -> None:
    """`sigmas_used` is σ of each step, exactly, then one σ the schema READMEs word two ways: README.md says σ
    for t = 0, README_families.md and README_matrix_game2.md σ of the context pass (t = `context_noise`). The
    two agree when `context_noise` is 0; otherwise the last entry must be one of the two, and nothing else."""
    assert torch.equal(sch.sigma_at(timesteps), sigmas_used[:-1])
    candidates = sch.sigma_at(torch.tensor([0.0, float(pipeline["context_noise"])]))
    assert (candidates == sigmas_used[-1]).any(), (sigmas_used[-1], candidates)


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


def tiny_conditioning(seed: int, tokens: int = 16) -> torch.Tensor:
    """A seeded random prompt embedding (1, tokens, text_dim) for the tiny loader's model, its width read from the
    fixture's `config.text_dim` (never assumed: fixtures of other sizes are dropped in)."""
    with safe_open(str(FIXTURES / TINY_LOADER_INPUTS["model"]), "pt") as f:
        text_dim = int(json.loads(f.metadata()["info"])["config"]["text_dim"])
    return torch.randn(1, tokens, text_dim, generator=torch.Generator().manual_seed(seed))


def fixture_request(pipeline: dict, tensors: dict) -> GenerationRequest:
    """The recorded run's request: its `info.pipeline` (blocks, latent shape) with the stored prompt embedding
    and the stored noise replayed in the reference's order."""
    b, _f, _c, h, w = pipeline["latent_shape"]
    return GenerationRequest(num_blocks=pipeline["num_blocks"], latent_height=h, latent_width=w,
                             context=tensors["text_context"], batch_size=b, noise=FixtureNoise(tensors))  # fmt: skip
