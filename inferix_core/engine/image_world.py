"""Inputs of image-started, keyboard/mouse-driven world models (Matrix-Game 2.0), per block.

Joins the three sources of conditioning the model takes besides noise:

* `cond_concat` (mask + VAE latents of the start image and zero frames, `image_conditioning`),
* `visual_context`, the CLIP ViT-H tokens of the start image (`vision`), which take the place of
  the text context (the pipeline's `context`, encoded once into the cross-attention K/V),
* keyboard and mouse rows per pixel frame (`controls`).

`MatrixGameInputs.for_block(start, n)` gives what one block's calls take, as the authors'
`cond_current` slices it: cond_concat frames [start, start + n) and the action rows
[0, 1 + 4·(start + n − 1)). The fields carry the names of the model's `MatrixGameConditioning`
(cond_concat, visual_context, keyboard, mouse), so `MatrixGameConditioning(**block.fields())` is the
only glue the model side needs.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import torch

from ..controls import (
    ActionTrack,
    Control,
    ControlChannel,
    ControlSpec,
    PixelFrameActions,
    block_rows,
    control_spec_of,
    parse_control,
)
from ..errors import ConfigError
from ..models.wan.action_module import MatrixGameBlockInput
from ..models.wan.causal_transformer import StartImageBlockInput
from .image_conditioning import StartImageLatents, start_image_pixels
from .schedules import ActionSchedule, BlockTiming
from .world_state import WorldState

log = logging.getLogger(__name__)

DEFAULT_SIZE = (640, 352)  # (width, height) Matrix-Game 2.0 was trained at


def takes_start_image(world_model: Any) -> bool:
    """Image-started models read 16 noise channels + 20 of cond_concat (Wan I2V's in_dim 36)."""
    cfg = getattr(world_model, "config", None)
    return cfg is not None and getattr(cfg, "in_dim", 16) == 2 * getattr(cfg, "out_dim", 16) + 4


def takes_prompt_and_image(world_model: Any) -> bool:
    """Wan 2.1 I2V: a text prompt and a start image (cond_concat + its CLIP tokens beside the prompt), no actions."""
    return bool(getattr(getattr(world_model, "config", None), "has_image_input", False))


START_ROLES = ("prompt_and_image", "ti2v", "image_world")


def start_image_role(world_model: Any, start_image: Any) -> str | None:
    """What a start image is to this model, decided once for every client (facade, session, branching):

    "prompt_and_image": Wan 2.1 I2V (cond_concat per block + CLIP tokens beside the prompt, `StartImageInputs`);
    "ti2v": Wan 2.2 TI2V / LongLive 2.0 (the image's latent is the clean first latent of block 0);
    "image_world": Matrix-Game 2.0 (start image, CLIP tokens instead of text, keyboard/mouse rows,
    `MatrixGameInputs`), also with no image given (it is then refused there, naming the input);
    None: a text-only model and no image.
    """
    if takes_prompt_and_image(world_model):
        return "prompt_and_image"
    cfg = getattr(world_model, "config", None)
    if start_image is not None and getattr(cfg, "model_type", None) == "ti2v":
        return "ti2v"
    if start_image is not None or takes_start_image(world_model):
        return "image_world"
    return None


def visual_tokens(clip_vision: Any, pixels: torch.Tensor) -> torch.Tensor:
    """CLIP tokens of the start pixels from a CLIPVisionEncoder, a file/folder path, a CLIP_VISION_OUTPUT or a tensor."""
    from ..vision import CLIPVisionEncoder, tokens_from_clip_vision_output

    if clip_vision is None:
        raise ConfigError(
            "this model needs the CLIP vision tokens of its start image: give clip_vision "
            "(models/clip_vision/clip_vision_h.safetensors, or a CLIP_VISION_OUTPUT from CLIP Vision Encode)"
        )
    if isinstance(clip_vision, torch.Tensor):
        return clip_vision.float() if clip_vision.dim() == 3 else clip_vision.float().unsqueeze(0)
    if isinstance(clip_vision, (str, bytes)) or hasattr(clip_vision, "__fspath__"):
        clip_vision = CLIPVisionEncoder.load(clip_vision)
    if isinstance(clip_vision, CLIPVisionEncoder):
        return clip_vision.encode(pixels)
    return tokens_from_clip_vision_output(clip_vision)


class MatrixGameInputs:
    """The start image's conditioning and the action track of one run or session.

    Args:
        world_model: an image-started model handle with a `control_variant` (or pass `spec`).
        image: the start image (path, PIL, uint8 array, ComfyUI IMAGE).
        width, height: the video size (default 640×352).
        clip_vision: CLIPVisionEncoder, its file, a CLIP_VISION_OUTPUT, or the tokens [1, T, D].
    """

    def __init__(self, world_model: Any, image: Any, width: int, height: int, clip_vision: Any = None,
                 spec: ControlSpec | None = None):  # fmt: skip
        if not takes_start_image(world_model):
            raise ConfigError(
                "this model takes no image: disconnect the start image (an image-started model such as "
                "Matrix-Game 2.0 has 36 input channels)"
            )
        if image is None:
            raise ConfigError("this model starts from an image: connect a start image (e.g. Load Image)")
        self.spec = spec or control_spec_of(world_model)
        if self.spec is None:
            raise ConfigError("this image-started model has no keyboard/mouse controls (no control_variant)")
        self.pixels = start_image_pixels(image, height, width)
        self.start = StartImageLatents(world_model.vae, self.pixels)
        self.visual_context = visual_tokens(clip_vision, self.pixels)
        self.track = ActionTrack(self.spec, world_model.temporal_compression)

    def fill(self, actions: Any, num_blocks: int, block_frames: int, timing: BlockTiming, start_block: int = 0) -> None:
        """Write a run's action rows: an ActionSchedule, rows {"keyboard", "mouse"}, or None (no input).

        `start_block` > 0 continues a resumed world whose past rows are already in the track
        (`resume_image_world`): the schedule's times then count from the first new block and the rows are
        the rest of the track (the rows after the saved ones, 4 per latent frame).
        """
        first = 0 if start_block == 0 else block_rows(start_block * block_frames, block_frames, self.track.stride)[0]
        if len(self.track) != first:
            raise ConfigError("the action track is already written")
        if isinstance(actions, ControlChannel):
            return  # written block by block from the channel (`live_block`)
        if isinstance(actions, ActionSchedule) and start_block == 0:
            self.track = actions.action_track(self.spec, num_blocks, block_frames, timing, self.track.stride)
            return
        if isinstance(actions, ActionSchedule):
            controls = [parse_control(self.spec, value) for _, value in actions.entries]
            for b, k in enumerate(actions._entry_blocks(num_blocks, timing)):
                self.track.write_block((start_block + b) * block_frames, block_frames, controls[k])
            return
        if actions is None:
            log.info("no actions given: every frame gets no key and no mouse movement")
            for b in range(start_block, start_block + num_blocks):
                self.track.write_block(b * block_frames, block_frames, Control())
            return
        if isinstance(actions, PixelFrameActions):
            actions = {"keyboard": actions.keyboard, "mouse": actions.mouse}
        if isinstance(actions, dict) and "keyboard" in actions:
            self.track.set_rows(torch.as_tensor(actions["keyboard"]).float(),
                                None if actions.get("mouse") is None else torch.as_tensor(actions["mouse"]).float())  # fmt: skip
            end = (start_block + num_blocks) * block_frames
            need = block_rows(end - block_frames, block_frames, self.track.stride)[1] - first
            if len(self.track) - first < need:
                what = "(1 + 4·(F − 1))" if start_block == 0 else f"(4 per latent frame after block {start_block})"
                raise ConfigError(f"{num_blocks} blocks need {need} action rows {what}; got {len(self.track) - first}")
            return
        raise ConfigError(
            "actions for a keyboard/mouse model are an Action Schedule ('0 | W', '2 | W+A yaw=0.1') or rows "
            "{'keyboard': [T, K], 'mouse': [T, 2]}"
        )

    def live_block(self, channel: ControlChannel, start: int, num_frames: int) -> MatrixGameBlockInput:
        """Write the block's new rows from the live controls (events queued so far), then `for_block`.

        Every call of a block asks again (steps and context pass); only the first one writes its rows.
        """
        lo, hi = block_rows(start, num_frames, self.track.stride)
        if len(self.track) == lo:
            control, extra = channel.take_block(hi - lo)
            self.track.write_block(start, num_frames, control, extra)
        return self.for_block(start, num_frames)

    def for_block(self, start: int, num_frames: int) -> MatrixGameBlockInput:
        """The block at latent frame `start`: cond_concat of its frames and every action row up to its last,
        as the model's own per-block input (the CLIP tokens go to the pipeline as its context)."""
        rows = self.track.for_block(start, num_frames)
        return MatrixGameBlockInput(self.start.cond_concat(start, num_frames), rows.keyboard, rows.mouse)


def _digest(t: torch.Tensor) -> str:
    """A fingerprint of a tensor's exact values (dtype, shape and bytes)."""
    t = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{t.dtype}:{tuple(t.shape)}".encode())
    h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:32]


def image_world_extra(inputs: MatrixGameInputs, next_frame: int) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """What a saved Matrix-Game world needs beside its stream state, for `capture_world_state(extra=...)`:
    the action rows its blocks read (the track up to its last generated frame) and fingerprints of the start
    image's cond_concat latents and CLIP tokens, so a resume with another image is refused."""
    rows = inputs.track.rows(0 if next_frame == 0 else block_rows(next_frame - 1, 1, inputs.track.stride)[1])
    tensors = {"image_world.keyboard": rows.keyboard[0]}
    if rows.mouse is not None:
        tensors["image_world.mouse"] = rows.mouse[0]
    meta = {
        "variant": inputs.spec.variant,
        "rows": int(rows.keyboard.shape[1]),
        "start_latents": _digest(inputs.start.cond_concat(0, 1)),
        "visual_context": _digest(inputs.visual_context.float()),
    }
    return meta, tensors


def resume_image_world(inputs: MatrixGameInputs, world: WorldState) -> None:
    """Check that `inputs` (the start image and its CLIP tokens given again) are the saved world's and put the
    saved action rows into the track, so the next block reads the same rows as the uninterrupted run.

    Raises a one-line ConfigError for a world saved without them (stream level), another variant, start image
    or CLIP tokens, or rows that do not end at the world's next frame.
    """
    meta = world.header["extra"].get("image_world")
    if meta is None or "extra.image_world.keyboard" not in world.tensors:
        raise ConfigError(
            "this world state has no Matrix-Game action track (saved at the stream level?); resume it with "
            "world_state.load_world_state and your own conditioning, or save it from generate_video or a session"
        )
    if meta["variant"] != inputs.spec.variant:
        raise ConfigError(
            f"this world was saved with the {meta['variant']} controls; this model has {inputs.spec.variant}"
        )
    if meta["start_latents"] != _digest(inputs.start.cond_concat(0, 1)):
        raise ConfigError(
            "this world was started from another start image (or VAE); give the saved world's start image"
        )
    if meta["visual_context"] != _digest(inputs.visual_context.float()):
        raise ConfigError("this world was started with other CLIP vision tokens; give the saved world's clip_vision")
    next_frame = world.header["position"]["next_frame"]
    expected = 0 if next_frame == 0 else block_rows(next_frame - 1, 1, inputs.track.stride)[1]
    if meta["rows"] != expected:
        raise ConfigError(
            f"the saved action track has {meta['rows']} rows; a world at frame {next_frame} needs {expected}"
        )
    if len(inputs.track):
        raise ConfigError("the action track is already written; resume a world before writing actions")
    mouse = world.tensors.get("extra.image_world.mouse")
    if expected:
        inputs.track.set_rows(world.tensors["extra.image_world.keyboard"], mouse)


class StartImageInputs:
    """A Wan 2.1 I2V run's start image: cond_concat per block, and the CLIP tokens the model attends beside the
    prompt (the pipeline's `image_context`).

    The pixels go through the same resize-crop as Matrix-Game's (`start_image_pixels`, to the video size) for both
    the VAE and CLIP. Wan 2.1's own `image2video.py` instead resizes the image to the video size without a crop
    (bicubic) for the VAE and gives CLIP the image as loaded: with an image already of the video's aspect ratio
    the two differ only by the resampling filter.
    """

    def __init__(self, world_model: Any, image: Any, width: int, height: int, clip_vision: Any = None):
        if not takes_prompt_and_image(world_model):
            raise ConfigError("this model has no image cross-attention (k_img/v_img): it is not a Wan 2.1 I2V model")
        if image is None:
            raise ConfigError("this Wan 2.1 I2V model starts from an image: connect a start image (e.g. Load Image)")
        self.pixels = start_image_pixels(image, height, width)
        self.start = StartImageLatents(world_model.vae, self.pixels)
        self.visual_context = visual_tokens(clip_vision, self.pixels)

    def for_block(self, start: int, num_frames: int) -> StartImageBlockInput:
        """cond_concat (mask + start-image latents) of latent frames [start, start + num_frames)."""
        return StartImageBlockInput(self.start.cond_concat(start, num_frames))


__all__ = [
    "DEFAULT_SIZE", "START_ROLES", "MatrixGameInputs", "StartImageInputs", "image_world_extra", "resume_image_world",
    "start_image_role", "takes_prompt_and_image", "takes_start_image", "visual_tokens",
]  # fmt: skip
