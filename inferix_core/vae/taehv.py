"""TAEHV / TAEW2.1 / TAEW2.2: a tiny video autoencoder for fast previews of Wan latents, with a streaming decoder.

Our own implementation of the published TAEHV structure (github.com/madebyollin/taehv): 2D convs per
frame, "memory blocks" that also see the previous frame's input, and 1x1 temporal grow/pool layers.
Module indices follow the published checkpoints (`decoder.3.conv.0.weight`, ...), so `taew2_1`
and `taew2_2` (48 latent channels, 2x2 pixel shuffle; both read from the weights; .safetensors or .pth)
load unchanged. It decodes the same normalised latents the diffusion model
uses (no mean/std), and we return pixels in [-1, 1], [B, 3, T, H, W], like the Wan VAE. Quality is
lower than the full VAE: use it for previews or when speed matters more than fidelity.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import CheckpointLayoutError, MissingFileError, ShapeMismatchError
from .checkpoint import read_state_dict

logger = logging.getLogger(__name__)

DECODER_PROBE = "decoder.3.conv.0.weight"
# Index layout of the published decoder: 0 clamp, 1 conv, 2 relu, then per stage s = 0..2 at
# 3 + 6s: three memory blocks, upsample, temporal grow, conv; finally 21 relu, 22 conv.
_DEC_STAGE_START = (3, 9, 15)
_ENC_STAGE_START = (2, 7, 12)  # encoder: 0 conv, 1 relu, per stage: pool, strided conv, three memory blocks; 17 conv


@dataclass(frozen=True)
class TAEHVConfig:
    latent_channels: int = 16  # 16 for Wan 2.1 (taew2_1)
    patch_size: int = 1  # pixel (un)shuffle factor; 2 for taew2_2 / taehv1_5
    decoder_channels: tuple[int, int, int, int] = (256, 128, 64, 64)
    encoder_channels: int = 64
    decoder_time_upscale: tuple[bool, bool, bool] = (False, True, True)
    decoder_space_upscale: tuple[bool, bool, bool] = (True, True, True)
    encoder_time_downscale: tuple[bool, bool, bool] = (True, True, False)
    has_encoder: bool = True

    @property
    def time_upscale(self) -> int:
        return 2 ** sum(self.decoder_time_upscale)

    @property
    def time_downscale(self) -> int:
        return 2 ** sum(self.encoder_time_downscale)

    @property
    def frames_to_trim(self) -> int:
        """Warm-up frames dropped at the start so F latents give 1 + 4·(F − 1) frames, aligned with the Wan VAE."""
        return self.time_upscale - 1

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Tensor]) -> TAEHVConfig:
        """Read channel widths and temporal strides from weight shapes.

        Some published files carry a stride-2 temporal grow at decoder index 7 although the model is used
        with stride 1 there (the reference then keeps the last rows). We resolve it the same way: strides
        are read from the shapes, then the earliest ones are turned off until the decoder's temporal
        upscale equals the encoder's downscale (4 when there is no encoder).
        """
        n = tuple(int(sd[f"decoder.{i}.weight"].shape[0]) for i in (1, 8, 14, 20))
        image_channels = int(sd["decoder.22.weight"].shape[0])
        patch = math.isqrt(image_channels // 3)
        has_encoder = "encoder.0.weight" in sd
        enc_down: tuple[bool, ...] = (True, True, False)
        enc_width = 64
        if has_encoder:
            enc_width = int(sd["encoder.0.weight"].shape[0])
            enc_down = tuple(int(sd[f"encoder.{i}.conv.weight"].shape[1]) // enc_width == 2 for i in _ENC_STAGE_START)
        grow = [int(sd[f"decoder.{s + 4}.conv.weight"].shape[0]) // n[k] == 2 for k, s in enumerate(_DEC_STAGE_START)]
        target = sum(enc_down)
        for k in range(3):
            if sum(grow) > target and grow[k]:
                grow[k] = False
        return cls(
            latent_channels=int(sd["decoder.1.weight"].shape[1]),
            patch_size=patch,
            decoder_channels=n,
            encoder_channels=enc_width,
            decoder_time_upscale=tuple(grow),
            encoder_time_downscale=enc_down,
            has_encoder=has_encoder,
        )


def _conv(n_in: int, n_out: int, **kwargs) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, padding=1, **kwargs)


class _SoftClamp(nn.Module):
    """tanh(x / 3) · 3: keeps out-of-range latents from blowing up the tiny decoder."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(x / 3) * 3


class MemoryBlock(nn.Module):
    """relu(conv(cat(x_t, x_{t−1})) + skip(x_t)): the only place information flows between frames."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            _conv(2 * n_in, n_out), nn.ReLU(), _conv(n_out, n_out), nn.ReLU(), _conv(n_out, n_out)
        )
        self.skip = nn.Conv2d(n_in, n_out, 1, bias=False) if n_in != n_out else nn.Identity()

    def forward(self, x: Tensor, past: Tensor) -> Tensor:  # both (B·T, C, H, W)
        return F.relu(self.conv(torch.cat([x, past], dim=1)) + self.skip(x))


class TemporalGrow(nn.Module):
    """1x1 conv C → stride·C; output frame t·stride + j takes channel group j of input frame t."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(channels, channels * stride, 1, bias=False)


class TemporalPool(nn.Module):
    """1x1 conv stride·C → C over groups of `stride` consecutive frames stacked on channels."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(channels * stride, channels, 1, bias=False)


@dataclass
class TAEHVState:
    """Streaming state: the last input frame of every memory block (by layer index) and frame counters."""

    memory: dict[int, Tensor] = field(default_factory=dict)
    frames_to_drop: int = 0
    frames_out: int = 0


def _run_frames(layers: nn.ModuleList, x: Tensor, state: TAEHVState | None) -> Tensor:
    """Apply the layer list to frames x (B, T, C, H, W), all frames in parallel, carrying memory in `state`."""
    B = x.shape[0]
    for i, layer in enumerate(layers):
        T = x.shape[1]
        if isinstance(layer, MemoryBlock):
            prev = state.memory.get(i) if state is not None else None
            prev = x[:, :1].new_zeros(x[:, :1].shape) if prev is None else prev
            past = torch.cat([prev, x[:, :-1]], dim=1)  # (B, T, C, H, W): frame t sees frame t−1
            if state is not None:
                state.memory[i] = x[:, -1:].clone()
            y = layer(x.flatten(0, 1), past.flatten(0, 1))
        elif isinstance(layer, TemporalGrow):
            y = layer.conv(x.flatten(0, 1))  # (B·T, stride·C, H, W)
            y = y.reshape(B, T * layer.stride, -1, *y.shape[-2:]).flatten(0, 1)
        elif isinstance(layer, TemporalPool):
            C, H, W = x.shape[2:]
            y = layer.conv(x.reshape(B * T // layer.stride, layer.stride * C, H, W))
        else:
            y = layer(x.flatten(0, 1))
        x = y.reshape(B, -1, *y.shape[1:])
    return x


class TAEHV(nn.Module):
    """Tiny autoencoder. `decode`/`encode` use the Wan VAE conventions: [B, C, T, H, W], pixels in [-1, 1]."""

    def __init__(self, config: TAEHVConfig) -> None:
        super().__init__()
        self.config = config
        n, img = config.decoder_channels, 3 * config.patch_size**2
        dec: list[nn.Module] = [_SoftClamp(), _conv(config.latent_channels, n[0]), nn.ReLU()]
        for k in range(3):
            dec += [MemoryBlock(n[k], n[k]) for _ in range(3)]
            dec += [
                nn.Upsample(scale_factor=2 if config.decoder_space_upscale[k] else 1),
                TemporalGrow(n[k], 2 if config.decoder_time_upscale[k] else 1),
                _conv(n[k], n[k + 1], bias=False),
            ]
        dec += [nn.ReLU(), _conv(n[3], img)]
        self.decoder = nn.ModuleList(dec)
        if config.has_encoder:
            e = config.encoder_channels
            enc: list[nn.Module] = [_conv(img, e), nn.ReLU()]
            for k in range(3):
                enc += [
                    TemporalPool(e, 2 if config.encoder_time_downscale[k] else 1),
                    _conv(e, e, stride=2, bias=False),
                ]
                enc += [MemoryBlock(e, e) for _ in range(3)]
            enc.append(_conv(e, config.latent_channels))
            self.encoder = nn.ModuleList(enc)

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Tensor], source: str = "state dict") -> TAEHV:
        prefix = next((k[: -len(DECODER_PROBE)] for k in sd if k.endswith(DECODER_PROBE)), None)
        if prefix is None:
            keys = list(sd)
            raise CheckpointLayoutError(
                f"'{source}' is not a TAEHV checkpoint: found {len(keys)} keys ({', '.join(keys[:5])} ...) but no "
                f"'{DECODER_PROBE}'. Expected the published taehv layout (e.g. taew2_1.safetensors / taew2_1.pth)."
            )
        sd = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
        model = cls(TAEHVConfig.from_state_dict(sd))
        expected = model.state_dict()
        for key, value in expected.items():  # stride-1 grow stored with stride-2 rows: keep the last rows
            if (
                key in sd
                and key.endswith(".conv.weight")
                and sd[key].shape[0] > value.shape[0]
                and sd[key].shape[1:] == value.shape[1:]
            ):
                sd[key] = sd[key][-value.shape[0] :]
        missing, unexpected = sorted(set(expected) - set(sd)), sorted(set(sd) - set(expected))
        if missing or unexpected:
            raise CheckpointLayoutError(
                f"'{source}': TAEHV weights do not match {model.config}: missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}"
            )
        model.load_state_dict({k: v.float() for k, v in sd.items()})
        return model

    @classmethod
    def from_file(
        cls, path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
    ) -> TAEHV:
        model = cls.from_state_dict(read_state_dict(path, expected="TAEHV preview decoder"), source=Path(path).name)
        logger.info("loaded TAEHV preview decoder from %s (%s)", path, model.config)
        return model.to(device=device, dtype=dtype).eval()

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder[1].weight.dtype

    def _decode_frames(self, latents: Tensor, state: TAEHVState | None) -> Tensor:
        if latents.ndim != 5 or latents.shape[1] != self.config.latent_channels:
            raise ShapeMismatchError(
                f"latents must be [B, {self.config.latent_channels}, f, h, w], got {list(latents.shape)}"
            )
        x = _run_frames(self.decoder, latents.transpose(1, 2).to(self.dtype), state)  # (B, T, 3·p², H, W)
        if self.config.patch_size > 1:
            x = F.pixel_shuffle(x.flatten(0, 1), self.config.patch_size).unflatten(0, x.shape[:2])
        return (x.clamp(0, 1) * 2 - 1).transpose(1, 2)  # (B, 3, T, H, W) in [-1, 1]

    @torch.no_grad()
    def decode(self, latents: Tensor) -> Tensor:
        """Normalised latents (B, C, F, h, w) → pixels (B, 3, 1 + 4·(F − 1), H, W) in [-1, 1]."""
        return self._decode_frames(latents, None)[:, :, self.config.frames_to_trim :]

    @torch.no_grad()
    def encode(self, video: Tensor) -> Tensor:
        """Pixels (B, 3, T, H, W) in [-1, 1] → latents (B, C, ceil(T / 4), h, w); the end is padded by repeating the last frame."""
        if not self.config.has_encoder:
            raise CheckpointLayoutError("this TAEHV checkpoint has no encoder weights")
        x = ((video + 1) / 2).transpose(1, 2).to(self.dtype)  # (B, T, 3, H, W) in [0, 1]
        if self.config.patch_size > 1:
            x = F.pixel_unshuffle(x.flatten(0, 1), self.config.patch_size).unflatten(0, x.shape[:2])
        pad = -x.shape[1] % self.config.time_downscale
        if pad:
            x = torch.cat([x, x[:, -1:].expand(-1, pad, -1, -1, -1)], dim=1)
        return _run_frames(self.encoder, x, None).transpose(1, 2)

    def stream_decoder(self) -> TAEHVStreamDecoder:
        return TAEHVStreamDecoder(self)


class TAEHVStreamDecoder:
    """Decode latent blocks in order; concatenated outputs equal `TAEHV.decode` of all latents."""

    def __init__(self, model: TAEHV) -> None:
        self.model = model
        self.reset()

    def reset(self) -> None:
        self.state = TAEHVState(frames_to_drop=self.model.config.frames_to_trim)

    @torch.no_grad()
    def decode(self, latents: Tensor) -> Tensor:
        """Next block of normalised latents (B, C, f, h, w) → new pixel frames (B, 3, T, H, W) in [-1, 1]."""
        state = TAEHVState(dict(self.state.memory), self.state.frames_to_drop, self.state.frames_out)
        pixels = self.model._decode_frames(latents, state)
        drop = min(state.frames_to_drop, pixels.shape[2])
        pixels, state.frames_to_drop = pixels[:, :, drop:], state.frames_to_drop - drop
        state.frames_out += pixels.shape[2]
        self.state = state
        return pixels


def load_preview_decoder(
    path: str | Path | None,
    full_vae: nn.Module | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> nn.Module:
    """The TAEHV decoder at `path`, or `full_vae` (logged) when no file is given or it does not exist.

    Both returned kinds offer `decode(latents)` and `stream_decoder().decode(block)` with the same
    tensor conventions, so callers do not branch on which one they got.
    """
    wanted = getattr(getattr(full_vae, "config", None), "z_dim", None)
    tae_name = "taew2_2" if wanted == 48 else "taew2_1"
    if path is not None and Path(path).is_file():
        tae = TAEHV.from_file(path, device=device, dtype=dtype)
        if wanted is None or tae.config.latent_channels == wanted:
            return tae
        reason = (
            f"preview decoder '{Path(path).name}' takes {tae.config.latent_channels} latent channels but the VAE "
            f"has {wanted} (use {tae_name} with this VAE)"
        )
        logger.warning("%s; previews use the full VAE", reason)
        return full_vae
    reason = "no preview decoder file given" if path is None else f"preview decoder file '{path}' not found"
    if full_vae is None:
        raise MissingFileError(
            f"{reason}, and no full VAE to fall back to. Put {tae_name}.safetensors in models/vae_approx "
            f"or pass the Wan VAE."
        )
    logger.info("%s; previews use the full Wan VAE (slower, exact)", reason)
    return full_vae
