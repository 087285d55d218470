"""Start-image conditioning of image-started world models (Matrix-Game 2.0, Wan I2V): pixels, cond_concat, tokens.

What the authors' `inference.py` / `inference_streaming.py` (Matrix-Game-2 at 3ceb3114) do with the
start image, restated:

1. `_resizecrop(image, 352, 640)`: centre-crop to the target aspect ratio (PIL crop box in floats,
   which PIL rounds), then torchvision `v2.Resize((352, 640), antialias=True)` on the PIL image (PIL's
   bilinear resize), `ToTensor` (/255) and `Normalize(0.5, 0.5)`: the image in [-1, 1].
2. `cond_concat` [1, 20, F, h, w]: the Wan VAE encoding of [image ; 4·(F − 1) zero (mid-grey) frames]
   (16 channels), after a 4-channel mask that is 1 at latent frame 0 and 0 elsewhere.
3. `visual_context`: CLIP ViT-H/14 tokens of the same [-1, 1] image (`inferix_core.vision`).

At 352×640 the authors' tiled encode (tile 44×80 latents) is one tile covering the frame, i.e. the
plain encode used here. `StartImageLatents` encodes the zero frames lazily with the streaming encoder,
so an open-ended session needs no frame count up front; its latents equal one `vae.encode` of the whole
padded clip.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageOps

from ..errors import ConfigError, ShapeMismatchError

log = logging.getLogger(__name__)

MASK_CHANNELS = 4


def resize_crop_box(width: int, height: int, target_h: int, target_w: int) -> tuple[float, float, float, float]:
    """The authors' `_resizecrop` box (left, top, right, bottom): the centred region of the target aspect."""
    if height / width > target_h / target_w:
        new_w = int(width)
        new_h = int(new_w * target_h / target_w)
    else:
        new_h = int(height)
        new_w = int(new_h * target_w / target_h)
    return (width - new_w) / 2, (height - new_h) / 2, (width + new_w) / 2, (height + new_h) / 2


def _to_pil(image: Any) -> Image.Image | list[Image.Image]:
    """A path, PIL image, uint8 [H, W, 3] array or a ComfyUI IMAGE ([B,] H, W, 3 floats in 0..1) → PIL.

    Floats that are exactly k/255 (what Load Image produces) become an 8-bit image losslessly; other
    floats become three 32-bit float channels ('F' mode), resized without rounding to 8 bits.
    """
    if isinstance(image, (str, Path)):
        if not Path(image).is_file():
            raise ConfigError(f"start image '{image}' does not exist")
        with Image.open(image) as im:
            return ImageOps.exif_transpose(im).convert("RGB")  # as diffusers' load_image
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    x = torch.as_tensor(np.asarray(image) if not isinstance(image, torch.Tensor) else image).detach().cpu()
    if x.ndim == 4:
        if x.shape[0] > 1:
            log.info("the start image is a batch of %d; the first image starts the video", x.shape[0])
        x = x[0]
    if x.ndim != 3 or x.shape[-1] not in (3, 4):
        raise ShapeMismatchError(f"the start image must be [H, W, 3] (or a ComfyUI IMAGE), got {list(x.shape)}")
    x = x[..., :3]
    if x.dtype == torch.uint8:
        return Image.fromarray(x.numpy(), "RGB")
    x = x.float()
    if not torch.isfinite(x).all():
        raise ConfigError("the start image has NaN or infinite values")
    x = x.clamp(0, 1)
    q = (x * 255).round()
    if torch.equal(q / 255, x) or (q / 255 - x).abs().max() < 1e-6:
        return Image.fromarray(q.to(torch.uint8).numpy(), "RGB")
    return [Image.fromarray(x[..., c].numpy().astype(np.float32), "F") for c in range(3)]


def start_image_pixels(image: Any, height: int = 352, width: int = 640) -> torch.Tensor:
    """The start image as the model sees it: [1, 3, height, width] float32 in [-1, 1] (the authors' steps 1)."""
    pil = _to_pil(image)
    channels = pil if isinstance(pil, list) else [pil]
    w, h = channels[0].size
    box = resize_crop_box(w, h, height, width)
    resized = [c.crop(box).resize((width, height), resample=Image.BILINEAR) for c in channels]
    if len(resized) == 1:  # 8-bit: ToTensor divides by 255
        x = torch.from_numpy(np.asarray(resized[0], dtype=np.uint8).copy()).permute(2, 0, 1).float().div(255)
    else:
        x = torch.stack([torch.from_numpy(np.asarray(c, dtype=np.float32).copy()) for c in resized])
    return x.sub(0.5).div(0.5).unsqueeze(0)  # Normalize(mean 0.5, std 0.5)


def resized_image_frames(image: Any, height: int, width: int) -> torch.Tensor:
    """A start image as LongLive 2.0 reads one: [1, height, width, 3] float in 0..1, resized without a crop.

    NVlabs/LongLive main `utils/dataset.py` `ImagePromptDataset`: `/255`, then torchvision
    `Resize((H, W), antialias=True)` on the tensor (bilinear with antialiasing, the aspect is not kept),
    then `Normalize(0.5, 0.5)` (left to `conditioning.encode_start_frames`, which takes 0..1 frames).
    """
    pil = _to_pil(image)
    channels = pil if isinstance(pil, list) else [pil]
    if len(channels) == 1:
        x = torch.from_numpy(np.asarray(channels[0], dtype=np.uint8).copy()).permute(2, 0, 1).float().div(255)
    else:
        x = torch.stack([torch.from_numpy(np.asarray(c, dtype=np.float32).copy()) for c in channels])
    if tuple(x.shape[1:]) != (height, width):
        x = torch.nn.functional.interpolate(
            x.unsqueeze(0), size=(height, width), mode="bilinear", antialias=True, align_corners=False
        )[0]
    return x.permute(1, 2, 0).unsqueeze(0)


class StartImageLatents:
    """`cond_concat` of an image-started run, [1, 4 + z_dim, F, h, w], built as far as it is asked for.

    Channels 0–3: 1 at latent frame 0, else 0. Channels 4…: the VAE latents of the image followed by
    zero frames; frames are encoded on demand with the VAE's streaming encoder (4 zero frames per
    latent frame), so `frames(F)` equals `vae.encode([image ; 4·(F − 1) zeros])` for any F.
    """

    def __init__(self, vae: Any, pixels: torch.Tensor):
        if pixels.ndim != 4 or pixels.shape[:2] != (1, 3):
            raise ShapeMismatchError(f"start pixels must be [1, 3, H, W], got {list(pixels.shape)}")
        if vae is None or not callable(getattr(vae, "stream_encoder", None)):
            raise ConfigError(
                "an image-started model needs a Wan VAE with an encoder: load the VAE file (Wan2.1_VAE.pth)"
            )
        self.vae = vae
        self.stride = vae.config.temporal_compression
        param = next(vae.parameters())
        self.pixels = pixels.to(param.device, param.dtype)
        self._encoder = vae.stream_encoder()
        self._latents = self._encoder.encode(self.pixels.unsqueeze(2))  # [1, z, 1, h, w]
        self.steady_from: int | None = None  # first latent frame from which every later one is the same

    @property
    def num_encoded(self) -> int:
        return self._latents.shape[2]

    def _extend(self, num_frames: int) -> None:
        """Encode zero frames up to `num_frames` latent frames, one latent frame per encoder call.

        The causal encoder has a finite memory, so after enough zero frames its cache stops changing
        (bitwise; 29 latent frames for the Wan VAE's layout): from then on every latent frame is the same
        as the last one stored. Encoding and storing stop there, so a long session pays no encoder call
        per block and keeps at most those few frames.
        """
        zeros = self.pixels.new_zeros(1, 3, self.stride, *self.pixels.shape[-2:])
        new = []
        while self.steady_from is None and self.num_encoded + len(new) < num_frames:
            before = self._encoder.cache.fork()
            new.append(self._encoder.encode(zeros))
            if _same_cache(before, self._encoder.cache):
                self.steady_from = self.num_encoded + len(new) - 1
                log.debug("start-image latents are constant from latent frame %d on", self.steady_from)
        if new:
            self._latents = torch.cat([self._latents, *new], dim=2)

    def latents(self, start: int, num_frames: int) -> torch.Tensor:
        """Image latents (no mask) of latent frames [start, start + num_frames), [1, z, n, h, w]."""
        self._extend(start + num_frames)
        stored = self._latents[:, :, start : start + num_frames]
        if stored.shape[2] == num_frames:
            return stored
        tail = self._latents[:, :, -1:].expand(-1, -1, num_frames - stored.shape[2], -1, -1)  # the steady latent
        return torch.cat([stored, tail], dim=2)

    def cond_concat(self, start: int, num_frames: int) -> torch.Tensor:
        """[1, 4 + z, n, h, w] for latent frames [start, start + num_frames): mask then image latents."""
        lat = self.latents(start, num_frames).float()
        mask = lat.new_zeros(1, MASK_CHANNELS, num_frames, *lat.shape[-2:])
        if start == 0:
            mask[:, :, 0] = 1.0
        return torch.cat([mask, lat], dim=1)


def _same_cache(a: Any, b: Any) -> bool:
    """Two causal-conv caches hold the same state (entries are replaced, never mutated, so this is exact)."""
    return (
        a.started == b.started
        and a.frames.keys() == b.frames.keys()
        and all(a.frames[k] is b.frames[k] or torch.equal(a.frames[k], b.frames[k]) for k in a.frames)
    )


__all__ = ["StartImageLatents", "resize_crop_box", "start_image_pixels"]
