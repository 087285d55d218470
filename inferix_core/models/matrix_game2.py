"""Matrix-Game 2.0 (Skywork): the image-started, keyboard/mouse-driven causal Wan 2.1 world model.

What the model core takes (the API other code calls; see docs/matrix_game2.md):

* `MatrixGameConditioning(cond_concat, visual_context, keyboard, mouse)` — one run's conditioning:

  - cond_concat  (B, 20, F, H, W): [mask (4) ; start-image latent (16)] over the F latent frames; the mask is
    1 at latent frame 0 and 0 elsewhere, the latent is the Wan-VAE encoding of the start image followed
    by 4·(F − 1) zero (mid-grey) pixel frames (`cond_concat_from_latent` builds it from the encoding);
  - visual_context (B, L, clip_dim): CLIP ViT-H/14 tokens of the start image (L = 257, clip_dim 1280);
  - keyboard (B, T, K) and mouse (B, T, 2) or None: one row **per pixel frame**, T ≥ 1 + 4·(F − 1)
    (multi-hot keys; mouse = (pitch, yaw) deltas, the authors' demos use ±0.1).

  Give it to the pipeline as `GenerationRequest(context=cond.visual_context, actions=cond, …)` (or use
  `inferix_core.engine.conditioning.matrix_game_request`); `BlockDiffusionPipeline` calls `cond.for_block(start, n)` for every block and passes
  the resulting `MatrixGameBlockInput` to every model call of that block (denoising steps and context
  pass): block b gets cond_concat[:, :, b·n : b·n + n] and the action rows [: 1 + 4·(b·n + n − 1)].
  For an open-ended session call `pipeline.denoise_block(state, action=cond.for_block(start, n))` after
  writing the block's new rows (1 + 4·(n − 1) for the first block, 4·n later), as the authors' streaming
  demo does; `MatrixGameConditioning.extend_actions` appends rows.
* `MATRIX_GAME2_VARIANTS` — sampling and window of each released model, from the authors' configs.
* `detect_variant(config)` — which variant a loaded config is (keyboard width, mouse branch).

Variants (from `Matrix-Game-2/configs/distilled_model/{universal,gta_drive,templerun}/config.json` and
`configs/inference_yaml/inference_{universal,gta_drive,templerun}.yaml` of github:zoheth/Matrix-Game at
commit 3ceb3114, the last Skywork-authored commit):

| variant   | keyboard | mouse | steps (warped)           | shift | window | sink | file                                                  |
|-----------|----------|-------|--------------------------|-------|--------|------|-------------------------------------------------------|
| universal | 4 (WSAD) | yes   | 1000, 666, 333           | 5.0   | 6      | 0    | base_distilled_model/base_distill.safetensors         |
| gta_drive | 2 (W, S) | yes   | 1000, 666, 333           | 5.0   | 4      | 0    | gta_distilled_model/gta_keyboard2dim.safetensors      |
| templerun | 7        | no    | 1000, 750, 500, 250      | 5.0   | 6      | 0    | templerun_distilled_model/templerun_7dim_onlykey.safetensors |

All: 3 latent frames per block, context_noise 0, 16 fps video (4 pixel frames per latent frame). The file
names are not in Skywork's code; docs/matrix_game2.md says where they are confirmed (the variant is read from
the weights, never from the name).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cache import KVCacheConfig
from ..errors import ConfigError, ShapeMismatchError
from ..scheduler import SamplingConfig
from .family_detect import sidecar_configs
from .wan.action_module import MatrixGameBlockInput
from .wan.config import WanConfig

log = logging.getLogger(__name__)

PIXEL_FRAMES_PER_LATENT = 4  # the Wan VAE's temporal compression (action_config.vae_time_compression_ratio)


@dataclass(frozen=True)
class MatrixGameVariant:
    name: str
    keyboard_dim: int
    mouse: bool
    sampling: SamplingConfig
    cache: KVCacheConfig
    keyboard_names: tuple[str, ...]  # meaning of each keyboard column (the authors' demo key maps)
    file_hint: str

    @property
    def description(self) -> str:
        m = " + mouse" if self.mouse else ", no mouse"
        return (
            f"Matrix-Game 2.0 {self.name} (keyboard {self.keyboard_dim}{m}; "
            f"{len(self.sampling.denoising_steps)} steps per 3-frame block, window {self.cache.window_frames})"
        )


def _variant(name, keyboard_dim, mouse, steps, window, names, file_hint) -> MatrixGameVariant:
    sampling = SamplingConfig(steps, warp_denoising_steps=True, shift=5.0, block_frames=3, context_noise=0)
    cache = KVCacheConfig(window_frames=window, sink_frames=0)
    return MatrixGameVariant(name, keyboard_dim, mouse, sampling, cache, names, file_hint)


MATRIX_GAME2_VARIANTS: dict[str, MatrixGameVariant] = {
    "universal": _variant("universal", 4, True, (1000, 666, 333), 6, ("W", "S", "A", "D"),
                          "base_distilled_model/base_distill.safetensors"),
    "gta_drive": _variant("gta_drive", 2, True, (1000, 666, 333), 4, ("W", "S"),
                          "gta_distilled_model/gta_keyboard2dim.safetensors"),
    "templerun": _variant("templerun", 7, False, (1000, 750, 500, 250), 6,
                          ("no-op", "jump", "slide", "turn left", "turn right", "left side", "right side"),
                          "templerun_distilled_model/templerun_7dim_onlykey.safetensors"),
}  # fmt: skip


def detect_variant(config: WanConfig, name: str | None = None) -> MatrixGameVariant:
    """The variant of a Matrix-Game config: `name` if given (checked against the weights), else from them."""
    act = config.action_config
    if act is None:
        raise ConfigError("not a Matrix-Game 2.0 model: the weights have no blocks.N.action_model.* tensors")
    if name is not None:
        if name not in MATRIX_GAME2_VARIANTS:
            raise ConfigError(f"unknown Matrix-Game variant '{name}'; expected one of {list(MATRIX_GAME2_VARIANTS)}")
        v = MATRIX_GAME2_VARIANTS[name]
        if (v.keyboard_dim, v.mouse) != (act.keyboard_dim_in, act.enable_mouse):
            raise ConfigError(
                f"variant '{name}' has keyboard {v.keyboard_dim}, mouse {v.mouse}; these weights have keyboard "
                f"{act.keyboard_dim_in}, mouse {act.enable_mouse}"
            )
        return v
    for v in MATRIX_GAME2_VARIANTS.values():
        if (v.keyboard_dim, v.mouse) == (act.keyboard_dim_in, act.enable_mouse):
            return v
    raise ConfigError(
        f"Matrix-Game weights with keyboard {act.keyboard_dim_in} and mouse {act.enable_mouse} match no released "
        f"variant ({', '.join(f'{v.name}: {v.keyboard_dim}/{v.mouse}' for v in MATRIX_GAME2_VARIANTS.values())})"
    )


# The run settings of the authors' inference yaml / model config (their names), and our field each sets.
RUN_SETTINGS = {"denoising_step_list": "denoising_steps", "warp_denoising_step": "warp_denoising_steps",
                "timestep_shift": "shift", "num_frame_per_block": "block_frames", "context_noise": "context_noise",
                "num_train_timesteps": "num_train_timesteps"}  # fmt: skip
WINDOW_SETTINGS = {"local_attn_size": "window_frames", "sink_size": "sink_frames"}


def stored_run_settings(path: str | Path) -> tuple[dict, str]:
    """(settings, where from) stored with a Matrix-Game file: its metadata (`info.pipeline`, `info.config`, as
    the fixtures hold them), else the authors' config.json (window, sink) and inference yaml beside it."""
    path = Path(path)
    found: dict = {}
    if path.is_file() and path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), "pt") as f:
                info = json.loads((f.metadata() or {}).get("info", "{}"))
        except (ValueError, OSError):
            info = {}
        if isinstance(info, dict):
            cfg = info.get("config") if isinstance(info.get("config"), dict) else {}
            run = info.get("pipeline") if isinstance(info.get("pipeline"), dict) else {}
            found = {k: v for k, v in {**cfg, **run}.items() if k in RUN_SETTINGS or k in WINDOW_SETTINGS}
        if found:
            return found, "file metadata"
    for _side, data in sidecar_configs(path, "Matrix-Game settings"):  # config.json / *.yaml beside the weights
        kwargs = data.get("model_kwargs") if isinstance(data.get("model_kwargs"), dict) else {}
        for k, v in {**kwargs, **data}.items():
            if (k in RUN_SETTINGS or k in WINDOW_SETTINGS) and k not in found:
                found[k] = v
    return found, "files beside it" if found else "nothing stored"


def variant_with_settings(variant: MatrixGameVariant, stored: dict, source: str) -> MatrixGameVariant:
    """`variant` with every run setting `stored` has (steps, warp, shift, block size, context timestep, window,
    sink); the variant's released values only for the keys it lacks, and those are logged."""
    sampling = dataclasses.replace(
        variant.sampling,
        **{f: (tuple(stored[k]) if k == "denoising_step_list" else stored[k]) for k, f in RUN_SETTINGS.items()
           if k in stored},
    )  # fmt: skip
    window = {f: stored[k] for k, f in WINDOW_SETTINGS.items() if k in stored}
    if "window_frames" in window and window["window_frames"] <= 0:
        window["window_frames"] = -1
    cache = dataclasses.replace(variant.cache, **window)
    guessed = [k for k in (*RUN_SETTINGS, *WINDOW_SETTINGS) if k not in stored and k != "num_train_timesteps"]
    if guessed:
        log.info("%s: %s not stored with the weights; the released %s values apply", source, "/".join(guessed),
                 variant.name)  # fmt: skip
    return dataclasses.replace(variant, sampling=sampling, cache=cache)


def resolve_variant(config: WanConfig, stored: dict, source: str) -> MatrixGameVariant:
    """The variant of a Matrix-Game file with its stored run settings. Weights of no released variant (another
    keyboard width or mouse branch) run only when every run setting is stored with them: nothing is guessed."""
    try:
        variant = detect_variant(config)
    except ConfigError:
        missing = [k for k in (*RUN_SETTINGS, *WINDOW_SETTINGS) if k not in stored and k != "num_train_timesteps"]
        if missing:
            raise
        act = config.action_config
        variant = _variant("custom", act.keyboard_dim_in, act.enable_mouse, (1000,), -1,
                           tuple(f"key {i}" for i in range(act.keyboard_dim_in)), "")  # fmt: skip
    return variant_with_settings(variant, stored, source)


def pixel_frames(num_latent_frames: int) -> int:
    """Action rows (pixel frames) a run of F latent frames consumes: 1 + 4·(F − 1)."""
    return 1 + PIXEL_FRAMES_PER_LATENT * (num_latent_frames - 1)


def cond_concat_from_latent(image_latent: torch.Tensor) -> torch.Tensor:
    """(B, 16, F, H, W) VAE encoding of [start image ; grey frames] → cond_concat (B, 20, F, H, W) with the mask."""
    b, _, f, h, w = image_latent.shape
    mask = image_latent.new_zeros(b, 4, f, h, w)
    mask[:, :, 0] = 1
    return torch.cat([mask, image_latent], dim=1)


@dataclass
class MatrixGameConditioning:
    """One Matrix-Game run's conditioning (layouts in the module docstring)."""

    cond_concat: torch.Tensor  # (B, 20, F, H, W)
    visual_context: torch.Tensor  # (B, L, clip_dim)
    keyboard: torch.Tensor  # (B, T, K), one row per pixel frame
    mouse: torch.Tensor | None = None  # (B, T, 2) or None

    def __post_init__(self) -> None:
        if self.cond_concat.dim() != 5:
            raise ShapeMismatchError(f"cond_concat must be (B, 20, F, H, W), got {list(self.cond_concat.shape)}")
        if self.keyboard.dim() != 3:
            raise ShapeMismatchError(f"keyboard must be (B, T, K) per pixel frame, got {list(self.keyboard.shape)}")
        if self.mouse is not None and (self.mouse.dim() != 3 or self.mouse.shape[1] != self.keyboard.shape[1]):
            raise ShapeMismatchError(
                f"mouse must be (B, T, 2) with as many rows as keyboard ({self.keyboard.shape[1]}), "
                f"got {list(self.mouse.shape)}"
            )

    @property
    def num_latent_frames(self) -> int:
        return self.cond_concat.shape[2]

    def for_block(self, start_frame: int, num_frames: int) -> MatrixGameBlockInput:
        """The conditioning of every model call over latent frames [start_frame, start_frame + num_frames)."""
        end = start_frame + num_frames
        if end > self.num_latent_frames:
            raise ShapeMismatchError(
                f"cond_concat covers {self.num_latent_frames} latent frames; the block needs frames up to {end}. "
                "Build it for the whole run (num_blocks × block_frames latent frames)."
            )
        rows = pixel_frames(end)
        if self.keyboard.shape[1] < rows:
            raise ShapeMismatchError(
                f"the action tracks have {self.keyboard.shape[1]} rows (pixel frames); the block ending at latent "
                f"frame {end} needs {rows} (1 + 4·({end} − 1))"
            )
        return MatrixGameBlockInput(
            self.cond_concat[:, :, start_frame:end],
            self.keyboard[:, :rows],
            None if self.mouse is None else self.mouse[:, :rows],
        )

    def extend_actions(self, keyboard: torch.Tensor, mouse: torch.Tensor | None = None) -> None:
        """Append action rows (B, r, K) / (B, r, 2), e.g. the next block's 4·n rows in a live session."""
        if (mouse is None) != (self.mouse is None):
            raise ConfigError(
                "this run has a mouse track; pass mouse rows too (zeros for no movement)"
                if mouse is None
                else "this run has no mouse track (a keyboard-only variant); pass keyboard rows only"
            )
        if mouse is not None and mouse.shape[1] != keyboard.shape[1]:
            raise ShapeMismatchError(f"{keyboard.shape[1]} keyboard rows but {mouse.shape[1]} mouse rows; give both")
        self.keyboard = torch.cat([self.keyboard, keyboard.to(self.keyboard)], dim=1)
        if mouse is not None:
            self.mouse = torch.cat([self.mouse, mouse.to(self.mouse)], dim=1)
