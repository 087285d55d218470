"""The Wan 2.2 causal 3D VAE (TI2V-5B): 48 latent channels, 4x16x16 compression.

Our own implementation of Wan2.2's `wan/modules/vae2_2.py` (module names follow its keys, so
`Wan2.2_VAE.pth` and ComfyUI's `wan2.2_vae.safetensors` load unchanged). What differs from Wan 2.1:

* pixels are folded 2x2 into channels before the encoder (12 channels) and unfolded after the decoder;
* each encoder/decoder stage is a group of residual blocks plus its resample, wrapped by a
  parameter-free shortcut: `AvgDown3D` (space/time to channels, then a mean over channel groups) in the
  encoder and `DupUp3D` (channel repeats, then channels to space/time) in the decoder;
* the decoder upsample keeps its channel count (Wan 2.1 halves it), and the decoder is wider than the
  encoder (256 vs 160).

The residual, attention, causal-conv and resample blocks are Wan 2.1's (layers.py), with the same
explicit `CausalConvCache`; the stepwise/streaming API is `WanVAE`'s, inherited unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from .config import Wan22VAEConfig, is_wan22_state_dict
from .layers import (
    AttentionBlock,
    CausalConv3d,
    CausalConvCache,
    Downsample,
    ResidualBlock,
    Upsample,
    assign_cache_keys,
)
from .memory import wan_decode_working_set_bytes
from .options import DecodeSlicing, VAEDecodeOptions
from .streaming import StreamDecoder
from .wan_vae import OutputHead, WanVAE, run_layers


def patchify(x: Tensor, p: int) -> Tensor:
    """(B, C, T, H·p, W·p) → (B, C·p·p, T, H, W), channel order (c, w-phase, h-phase) as the reference."""
    return x if p == 1 else rearrange(x, "b c f (h q) (w r) -> b (c r q) f h w", q=p, r=p)


def unpatchify(x: Tensor, p: int) -> Tensor:
    """Inverse of `patchify`."""
    return x if p == 1 else rearrange(x, "b (c r q) f h w -> b c f (h q) (w r)", q=p, r=p)


class AvgDown3D(nn.Module):
    """Parameter-free encoder shortcut: fold (ft, fs, fs) blocks into channels, then average channel groups.

    Time is zero-padded in front to a multiple of ft per call, exactly as the reference does per chunk
    (the first chunk of one frame is paired with a zero frame).
    """

    def __init__(self, in_channels: int, out_channels: int, factor_t: int, factor_s: int = 1) -> None:
        super().__init__()
        self.out_channels, self.factor_t, self.factor_s = out_channels, factor_t, factor_s
        factor = factor_t * factor_s * factor_s
        if (in_channels * factor) % out_channels:
            raise ValueError(f"AvgDown3D: {in_channels}·{factor} channels do not split into {out_channels} groups")
        self.group_size = in_channels * factor // out_channels

    def forward(self, x: Tensor) -> Tensor:
        ft, fs = self.factor_t, self.factor_s
        pad_t = (ft - x.shape[2] % ft) % ft
        if pad_t:
            x = F.pad(x, (0, 0, 0, 0, pad_t, 0))
        B, C, T, H, W = x.shape
        x = x.reshape(B, C, T // ft, ft, H // fs, fs, W // fs, fs).permute(0, 1, 3, 5, 7, 2, 4, 6)
        x = x.reshape(B, self.out_channels, self.group_size, T // ft, H // fs, W // fs)
        return x.mean(dim=2)


class DupUp3D(nn.Module):
    """Parameter-free decoder shortcut: repeat channels, then unfold them into (ft, fs, fs) blocks.

    The first call of a stream drops the first ft − 1 output frames (latent frame 0 gives one frame),
    as the reference's `first_chunk`; whether the stream has started is kept in the cache.
    """

    cache_key: str = ""

    def __init__(self, in_channels: int, out_channels: int, factor_t: int, factor_s: int = 1) -> None:
        super().__init__()
        self.out_channels, self.factor_t, self.factor_s = out_channels, factor_t, factor_s
        factor = factor_t * factor_s * factor_s
        if (out_channels * factor) % in_channels:
            raise ValueError(f"DupUp3D: {out_channels}·{factor} channels are not a multiple of {in_channels}")
        self.repeats = out_channels * factor // in_channels

    def forward(self, x: Tensor, cache: CausalConvCache) -> Tensor:
        ft, fs = self.factor_t, self.factor_s
        B, _, T, H, W = x.shape
        x = x.repeat_interleave(self.repeats, dim=1)
        x = x.reshape(B, self.out_channels, ft, fs, fs, T, H, W).permute(0, 1, 5, 2, 6, 3, 7, 4)
        x = x.reshape(B, self.out_channels, T * ft, H * fs, W * fs)
        if self.cache_key not in cache.started:
            cache.started.add(self.cache_key)
            if cache.first_frame_bypass:
                x = x[:, :, ft - 1 :]
        return x


class Upsample22(Upsample):
    """Wan 2.2's upsample: as Wan 2.1's (nearest 2x + 3x3 conv, optional frame doubling) but C → C."""

    def __init__(self, dim: int, temporal: bool) -> None:
        super().__init__(dim, temporal)
        self.resample = nn.ModuleDict({"1": nn.Conv2d(dim, dim, 3, padding=1)})


class DownStage(nn.Module):
    """Encoder stage (the reference's Down_ResidualBlock): residual blocks, a resample, plus `AvgDown3D`."""

    def __init__(self, in_dim: int, out_dim: int, num_res: int, temporal: bool, down: bool) -> None:
        super().__init__()
        self.avg_shortcut = AvgDown3D(in_dim, out_dim, 2 if temporal else 1, 2 if down else 1)
        layers: list[nn.Module] = []
        for _ in range(num_res):
            layers.append(ResidualBlock(in_dim, out_dim))
            in_dim = out_dim
        if down:
            layers.append(Downsample(out_dim, temporal=temporal))
        self.downsamples = nn.ModuleList(layers)

    def forward(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
        return run_layers(self.downsamples, x, cache) + self.avg_shortcut(x)


class UpStage(nn.Module):
    """Decoder stage (the reference's Up_ResidualBlock): residual blocks, an upsample, plus `DupUp3D` when upsampling."""

    def __init__(self, in_dim: int, out_dim: int, num_res: int, temporal: bool, up: bool) -> None:
        super().__init__()
        self.avg_shortcut = DupUp3D(in_dim, out_dim, 2 if temporal else 1, 2) if up else None
        layers: list[nn.Module] = []
        for _ in range(num_res):
            layers.append(ResidualBlock(in_dim, out_dim))
            in_dim = out_dim
        if up:
            layers.append(Upsample22(out_dim, temporal=temporal))
        self.upsamples = nn.ModuleList(layers)

    def forward(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
        main = run_layers(self.upsamples, x, cache, opts)
        if self.avg_shortcut is None:
            return main
        shortcut = self.avg_shortcut(x, cache)
        return main.add_(shortcut) if opts is not None and opts.fused else main + shortcut


class Encoder22(nn.Module):
    """Pixels (B, 3, T, H, W) → 2·z_dim channels at (1 + (T−1)/4, H/16, W/16)."""

    def __init__(self, cfg: Wan22VAEConfig) -> None:
        super().__init__()
        self.patch_size = cfg.patch_size
        dims = [cfg.dim * m for m in (1, *cfg.dim_mult)]
        self.conv1 = CausalConv3d(3 * cfg.patch_size**2, dims[0], 3, padding=1)
        last = len(cfg.dim_mult) - 1
        self.downsamples = nn.ModuleList(
            DownStage(a, b, cfg.num_res_blocks, i < last and cfg.temporal_downsample[i], i != last)
            for i, (a, b) in enumerate(itertools.pairwise(dims))
        )
        self.middle = nn.ModuleList(
            [ResidualBlock(dims[-1], dims[-1]), AttentionBlock(dims[-1]), ResidualBlock(dims[-1], dims[-1])]
        )
        self.head = OutputHead(dims[-1], 2 * cfg.z_dim)

    def forward(self, x: Tensor, cache: CausalConvCache) -> Tensor:
        x = self.conv1(patchify(x, self.patch_size), cache)
        x = run_layers(self.downsamples, x, cache)
        x = run_layers(self.middle, x, cache)
        return self.head(x, cache)


class Decoder22(nn.Module):
    """z_dim channels (B, z, F, h, w) → pixels (B, 3, T, 16h, 16w); T = 1 + 4·(F − 1) for a fresh cache."""

    def __init__(self, cfg: Wan22VAEConfig) -> None:
        super().__init__()
        self.patch_size = cfg.patch_size
        mults = cfg.dim_mult[::-1]
        dims = [cfg.dec_dim * m for m in (mults[0], *mults)]
        temporal_up = cfg.temporal_downsample[::-1]
        last = len(cfg.dim_mult) - 1
        self.conv1 = CausalConv3d(cfg.z_dim, dims[0], 3, padding=1)
        self.middle = nn.ModuleList(
            [ResidualBlock(dims[0], dims[0]), AttentionBlock(dims[0]), ResidualBlock(dims[0], dims[0])]
        )
        self.upsamples = nn.ModuleList(
            UpStage(a, b, cfg.num_res_blocks + 1, i < len(temporal_up) and temporal_up[i], i != last)
            for i, (a, b) in enumerate(itertools.pairwise(dims))
        )
        self.head = OutputHead(dims[-1], 3 * cfg.patch_size**2)

    def forward(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
        x = self.conv1(x, cache)
        x = run_layers(self.middle, x, cache, opts)
        x = run_layers(self.upsamples, x, cache, opts)
        return unpatchify(self.head(x, cache, opts), self.patch_size)


class Wan22VAE(WanVAE):
    """Wan 2.2 VAE. `encode`/`decode` take and return normalised latents (B, 48, F, h, w), as `WanVAE`.

    Everything stepwise (decode_step/encode_step, streaming sessions, decode options, latent
    normalisation) is `WanVAE`'s; only the encoder and decoder differ.
    """

    config: Wan22VAEConfig

    def __init__(self, config: Wan22VAEConfig) -> None:  # not super().__init__: that builds the 2.1 modules
        nn.Module.__init__(self)
        self.config = config
        self.encoder = Encoder22(config)
        self.conv1 = CausalConv3d(2 * config.z_dim, 2 * config.z_dim, 1)
        self.conv2 = CausalConv3d(config.z_dim, config.z_dim, 1)
        self.decoder = Decoder22(config)
        assign_cache_keys(self)
        for name, module in self.named_modules():
            if isinstance(module, DupUp3D):
                module.cache_key = name
        self.decode_options: VAEDecodeOptions | None = None
        self.stream_slicing = DecodeSlicing(self.stream_latent_frames_per_step)
        self.register_buffer("latent_mean", torch.tensor(config.latent_mean, dtype=torch.float32), persistent=False)
        self.register_buffer("latent_std", torch.tensor(config.latent_std, dtype=torch.float32), persistent=False)

    @classmethod
    def reads_state_dict(cls, sd: Mapping[str, Tensor]) -> bool:
        return is_wan22_state_dict(sd)

    @classmethod
    def config_from_state_dict(cls, sd: Mapping[str, Tensor], **overrides) -> Wan22VAEConfig:
        return Wan22VAEConfig.from_state_dict(sd, **overrides)

    # Streaming sessions decode one latent frame per decoder call unless told otherwise, as the reference
    # does: a whole 8-frame LongLive 2.0 block at 704x1280 at once would need ~30 GB of activations.
    stream_latent_frames_per_step: int | None = 1

    def stream_decoder(self, **kwargs) -> StreamDecoder:
        """A `StreamDecoder` session; `latent_frames_per_step` defaults to `stream_latent_frames_per_step`."""
        if kwargs.get("latent_frames_per_step") is None:
            kwargs["latent_frames_per_step"] = self.stream_latent_frames_per_step
        return super().stream_decoder(**kwargs)

    def decode_working_set_bytes(self, latent_h: int, latent_w: int, latent_frames: int, batch: int = 1) -> int:
        """Estimated GPU bytes a streamed decode needs beyond the weights (one decoder call's activations).

        The Wan 2.1 formula at the decoder's own output grid (8x the latent, before the 2x unpatchify)
        with its width `dec_dim`, for the latent frames of one decoder call: the largest activations live
        there. Not calibrated on a GPU yet.
        """
        elem = next(self.parameters()).element_size()
        scale = self.config.spatial_compression // self.config.patch_size // 8  # 1 for the released VAE
        per_call = min(latent_frames, self.stream_latent_frames_per_step or latent_frames)
        return wan_decode_working_set_bytes(
            self.config.dec_dim, latent_h * scale, latent_w * scale, per_call, batch, elem
        )
