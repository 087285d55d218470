"""TinyCausalAE: the bundled world model's small causal video autoencoder, built for laptop CPUs.

Same latent contract as the Wan 2.1 VAE (8× spatial, 4× causal temporal compression: latent frame 0
holds pixel frame 0, latent frame f ≥ 1 holds pixel frames 4f−3 .. 4f; normalised latents in and out
of the public methods; `stream_decoder()` whose outputs concatenate to `decode`). Unlike the Wan VAE,
nearly all compute sits at latent resolution with wide channels (GEMM-friendly), and pixel resolution
is reached by pixel shuffles with a few narrow convs; on a 2-core CPU the Wan VAE architecture at
width 8 decodes 10 s of 128² video in about 100 s (its full-resolution 3D convs with 8 channels run at
0.3 GFLOP/s there), this one decodes 10 s of 64² in a few seconds. Temporal context: the decoder mixes
each latent frame with the previous one (a causal kernel of 2 latent frames); the encoder is per group.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, ShapeMismatchError
from .config import check_latent_stats

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TinyAEConfig:
    """Architecture and latent statistics of a TinyCausalAE (saved beside its weights)."""

    z_dim: int = 16
    latent_channels: int = 192  # width of the latent-resolution trunk
    num_res_blocks: int = 2  # per trunk (encoder and decoder)
    pixel_channels: tuple[int, int] = (64, 32)  # decoder widths at 1/4 and 1/2 resolution
    temporal_compression: int = 4
    latent_mean: tuple[float, ...] = field(default_factory=lambda: (0.0,) * 16)
    latent_std: tuple[float, ...] = field(default_factory=lambda: (1.0,) * 16)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pixel_channels", tuple(int(c) for c in self.pixel_channels))
        object.__setattr__(self, "latent_mean", tuple(float(v) for v in self.latent_mean))
        object.__setattr__(self, "latent_std", tuple(float(v) for v in self.latent_std))
        check_latent_stats(self.latent_mean, self.latent_std, self.z_dim)

    @property
    def spatial_compression(self) -> int:
        return 8

    def num_frames(self, num_latent_frames: int) -> int:
        """Pixel frames decoded from F latent frames: 1 + 4·(F − 1)."""
        return 1 + self.temporal_compression * (num_latent_frames - 1) if num_latent_frames else 0

    def num_latent_frames(self, num_frames: int) -> int:
        """Latent frames encoded from T = 1 + 4·k pixel frames."""
        k, rem = divmod(num_frames - 1, self.temporal_compression)
        if num_frames < 1 or rem:
            raise ConfigError(f"{num_frames} frames cannot be encoded: the causal AE needs 1 + 4·k frames")
        return 1 + k

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["pixel_channels"] = list(self.pixel_channels)
        d["latent_mean"], d["latent_std"] = list(self.latent_mean), list(self.latent_std)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TinyAEConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names})


class ResBlock(nn.Module):
    """x + conv3x3(SiLU(conv3x3(SiLU(x)))), no normalisation (keeps the CPU path to two GEMMs)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1)
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(F.silu(self.conv1(F.silu(x))))


class GroupEncoder(nn.Module):
    """One group of 4 frames (B, 3, 4, H, W) → latent mean (B, z_dim, H/8, W/8)."""

    def __init__(self, cfg: TinyAEConfig) -> None:
        super().__init__()
        t, c = cfg.temporal_compression, cfg.latent_channels
        self.down1 = nn.Conv2d(3 * t * 4, 64, 3, padding=1)  # after unshuffle 2: (3·4·4) ch at H/2
        self.down2 = nn.Conv2d(64 * 4, 128, 3, padding=1)  # H/4
        self.down3 = nn.Conv2d(128 * 4, c, 1)  # H/8
        self.trunk = nn.Sequential(*[ResBlock(c) for _ in range(cfg.num_res_blocks)])
        self.out = nn.Conv2d(c, cfg.z_dim, 1)

    def forward(self, groups: Tensor) -> Tensor:
        b, _, t, h, w = groups.shape
        x = groups.reshape(b, 3 * t, h, w)  # (B, 12, H, W): frames stacked as channels
        x = F.silu(self.down1(F.pixel_unshuffle(x, 2)))  # (B, 64, H/2, W/2)
        x = F.silu(self.down2(F.pixel_unshuffle(x, 2)))  # (B, 128, H/4, W/4)
        x = self.down3(F.pixel_unshuffle(x, 2))  # (B, C, H/8, W/8)
        return self.out(F.silu(self.trunk(x)))


class CausalDecoder(nn.Module):
    """Latent frames (B, z, F, h, w) → 4 pixel frames each (B, 3, 4F, 8h, 8w), causal over latent frames."""

    def __init__(self, cfg: TinyAEConfig) -> None:
        super().__init__()
        c, (c1, c2) = cfg.latent_channels, cfg.pixel_channels
        self.t = cfg.temporal_compression
        self.inp = nn.Conv2d(cfg.z_dim, c, 1)
        self.temporal = nn.Conv2d(2 * c, c, 1)  # [this frame ‖ previous frame] → c
        self.trunk = nn.Sequential(*[ResBlock(c) for _ in range(cfg.num_res_blocks)])
        self.to_frames = nn.Conv2d(c, self.t * c1 * 4, 1)  # 4 frames × c1 channels × (2×2 shuffle)
        self.up1 = nn.Conv2d(c1, c1, 3, padding=1)
        self.up1_out = nn.Conv2d(c1, c2 * 4, 1)
        self.up2 = nn.Conv2d(c2, c2, 3, padding=1)
        self.up2_out = nn.Conv2d(c2, 3 * 4, 3, padding=1)

    def forward(self, z: Tensor, previous: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Decode; `previous` is the input features (B, C, h, w) of the latent frame before z's first.

        Returns (pixels (B, 3, 4F, 8h, 8w), features of z's last frame for the next call).
        """
        b, _, f, h, w = z.shape
        a = self.inp(z.permute(0, 2, 1, 3, 4).reshape(b * f, -1, h, w)).view(b, f, -1, h, w)  # (B, F, C, h, w)
        prev = torch.zeros_like(a[:, :1]) if previous is None else previous.unsqueeze(1).to(a.dtype)
        shifted = torch.cat([prev, a[:, :-1]], dim=1)  # (B, F, C, h, w): frame f−1 beside frame f
        x = self.temporal(torch.cat([a, shifted], dim=2).flatten(0, 1))  # (B·F, C, h, w)
        x = F.silu(self.trunk(x))
        x = self.to_frames(x).view(b * f * self.t, -1, h, w)  # (B·F·4, c1·4, h, w)
        x = F.silu(self.up1(F.pixel_shuffle(x, 2)))  # (B·F·4, c1, 2h, 2w)
        x = F.silu(self.up2(F.pixel_shuffle(self.up1_out(x), 2)))  # (B·F·4, c2, 4h, 4w)
        x = F.pixel_shuffle(self.up2_out(x), 2)  # (B·F·4, 3, 8h, 8w)
        x = x.view(b, f * self.t, 3, 8 * h, 8 * w).permute(0, 2, 1, 3, 4)  # (B, 3, 4F, H, W)
        return x, a[:, -1]


@dataclass
class TinyDecodeState:
    """What a streaming decode carries between blocks: the last latent frame's features and a counter."""

    previous: Tensor | None = None
    latent_frames_in: int = 0

    def fork(self) -> TinyDecodeState:
        """A state that goes on from here without touching this one (a branch's future; `previous` is replaced,
        never written in place)."""
        return TinyDecodeState(self.previous, self.latent_frames_in)


class TinyCausalAE(nn.Module):
    """Encoder + causal decoder; public methods take and return normalised latents (z − mean) / std."""

    def __init__(self, config: TinyAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = GroupEncoder(config)
        self.decoder = CausalDecoder(config)
        self.register_buffer("latent_mean", torch.tensor(config.latent_mean), persistent=False)
        self.register_buffer("latent_std", torch.tensor(config.latent_std), persistent=False)

    def decode_working_set_bytes(self, latent_h: int, latent_w: int, latent_frames: int, batch: int = 1) -> int:
        """Estimated bytes a streamed decode of `latent_frames` needs beyond the weights.

        Four live tensors of the widest stage: the latent-resolution trunk (`latent_channels`), the
        frame projection (t·c1·4 channels at latent resolution) or the half-resolution stage (c2
        channels, t frames at (2h)·(2w)·4 pixels); an upper bound, not a measurement.
        """
        cfg, elem = self.config, next(self.parameters()).element_size()
        t, (c1, c2) = cfg.temporal_compression, cfg.pixel_channels
        latent_px, half_px = latent_h * latent_w, (4 * latent_h) * (4 * latent_w)
        widest = max(cfg.latent_channels * latent_px, t * c1 * 4 * latent_px, t * c2 * half_px)
        return 4 * batch * latent_frames * widest * elem

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_file(
        cls, path: str | Path, config: TinyAEConfig | dict | None = None, device: str = "cpu"
    ) -> TinyCausalAE:
        """Load weights; the config comes from the argument or the file's `config` metadata."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        if config is None:
            with safe_open(str(path), "pt") as f:
                meta = f.metadata() or {}
            if "config" not in meta:
                raise ConfigError(f"{path} has no 'config' metadata; pass the TinyAEConfig explicitly")
            config = json.loads(meta["config"])
        if isinstance(config, dict):
            config = TinyAEConfig.from_dict(config)
        model = cls(config)
        sd = {k: v.float() for k, v in load_file(str(path)).items()}
        model.load_state_dict(sd)
        logger.info("loaded TinyCausalAE from %s (z_dim %d)", path, config.z_dim)
        return model.to(device).eval()

    # ---- normalisation ------------------------------------------------------------------------
    def normalise(self, mu: Tensor) -> Tensor:
        return (mu.float() - self.latent_mean.view(1, -1, 1, 1, 1)) / self.latent_std.view(1, -1, 1, 1, 1)

    def denormalise(self, z: Tensor) -> Tensor:
        return z.float() * self.latent_std.view(1, -1, 1, 1, 1) + self.latent_mean.view(1, -1, 1, 1, 1)

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.inp.weight.dtype

    # ---- raw (unnormalised) paths, used by training -------------------------------------------
    def groups(self, video: Tensor) -> Tensor:
        """(B, 3, 1 + 4k, H, W) → (B·(1 + k), 3, 4, H, W): frame 0 repeated 4×, then consecutive 4-frame groups."""
        b, c, t, h, w = video.shape
        num_latent = self.config.num_latent_frames(t)
        first = video[:, :, :1].expand(b, c, self.config.temporal_compression, h, w)
        rest = video[:, :, 1:].reshape(b, c, num_latent - 1, self.config.temporal_compression, h, w)
        g = torch.cat([first.unsqueeze(2), rest], dim=2)  # (B, 3, F, 4, H, W)
        return g.permute(0, 2, 1, 3, 4, 5).reshape(b * num_latent, c, self.config.temporal_compression, h, w)

    def encode_raw(self, video: Tensor) -> Tensor:
        """Pixels (B, 3, 1 + 4k, H, W) in [-1, 1] → unnormalised latents (B, z, 1 + k, H/8, W/8)."""
        b = video.shape[0]
        mu = self.encoder(self.groups(video.to(self.dtype)))  # (B·F, z, h, w)
        return mu.view(b, -1, *mu.shape[1:]).permute(0, 2, 1, 3, 4)

    def decode_raw(self, z: Tensor, state: TinyDecodeState | None = None) -> tuple[Tensor, TinyDecodeState]:
        """Unnormalised latents → pixels; latent frame 0 of a fresh stream gives 1 frame, the others 4."""
        state = state or TinyDecodeState()
        pixels, last = self.decoder(z.to(self.dtype), state.previous)
        if state.latent_frames_in == 0:
            pixels = pixels[:, :, self.config.temporal_compression - 1 :]  # frame 0 was encoded as 4 copies
        return pixels, TinyDecodeState(last, state.latent_frames_in + z.shape[2])

    # ---- public API (normalised latents), matching WanVAE -------------------------------------
    def _check(self, x: Tensor, channels: int, what: str) -> None:
        if x.ndim != 5 or x.shape[1] != channels:
            raise ShapeMismatchError(f"{what} must be [B, {channels}, T, H, W], got {list(x.shape)}")

    @torch.no_grad()
    def encode(self, video: Tensor) -> Tensor:
        """Pixels (B, 3, 1 + 4k, H, W) in [-1, 1] → normalised latents (B, z_dim, 1 + k, H/8, W/8)."""
        self._check(video, 3, "video")
        return self.normalise(self.encode_raw(video))

    @torch.no_grad()
    def decode_step(self, z: Tensor, state: TinyDecodeState | None = None) -> tuple[Tensor, TinyDecodeState]:
        """Decode normalised latents given the state of everything before; returns pixels in [-1, 1]."""
        self._check(z, self.config.z_dim, "latents")
        pixels, state = self.decode_raw(self.denormalise(z), state)
        return pixels.float().clamp(-1, 1), state

    def decode(self, z: Tensor) -> Tensor:
        """Full causal decode: normalised (B, z_dim, F, h, w) → pixels (B, 3, 1 + 4(F − 1), 8h, 8w)."""
        return self.decode_step(z)[0]

    def stream_decoder(self) -> TinyStreamDecoder:
        return TinyStreamDecoder(self)


class TinyStreamDecoder:
    """Streaming decode session: `decode(latent_block)` per block; outputs concatenate to `decode`."""

    def __init__(self, vae: TinyCausalAE) -> None:
        self.vae = vae
        self.state = TinyDecodeState()

    def reset(self) -> None:
        self.state = TinyDecodeState()

    def decode(self, latents: Tensor) -> Tensor:
        """Normalised latents (B, z_dim, f, h, w) → the new pixel frames (B, 3, T, 8h, 8w)."""
        pixels, self.state = self.vae.decode_step(latents, self.state)
        return pixels
