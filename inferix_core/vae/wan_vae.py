"""The Wan 2.1 causal 3D VAE: encoder, decoder, latent normalisation, and loading from any known layout.

Our own implementation of the architecture described in tests/fixtures/README.md §2 (module names
follow the original Wan keys so checkpoints load unchanged). Temporal state is an explicit
`CausalConvCache` threaded through `decode_step`/`encode_step`; streaming sessions that hold one
live in streaming.py. Latents in and out of the public methods are normalised, (z − mean) / std.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor, nn

from ..errors import CheckpointLayoutError, ConfigError, ShapeMismatchError
from .checkpoint import load_vae_state_dict
from .config import WanVAEConfig
from .layers import (
    AttentionBlock,
    CausalConv3d,
    CausalConvCache,
    Downsample,
    ResidualBlock,
    RMSNorm,
    Upsample,
    assign_cache_keys,
    norm_silu_padded,
)
from .memory import VAEMemory
from .options import DecodeSlicing, VAEDecodeOptions
from .row_bands import run_in_row_bands
from .streaming import StreamDecoder, StreamEncoder

logger = logging.getLogger(__name__)


def run_layers(
    layers: nn.ModuleList, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None
) -> Tensor:
    for layer in layers:
        x = layer(x, cache, opts) if not isinstance(layer, nn.SiLU) else layer(x)
    return x


@contextlib.contextmanager
def _cudnn_benchmark(enabled: bool) -> Iterator[None]:
    """cuDNN autotuning for the decode only: the global flag is restored afterwards (not thread-safe,
    like every `torch.backends` flag; the decode runs on the caller's thread)."""
    if not enabled:
        yield
        return
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous


class OutputHead(nn.ModuleList):
    """RMS_norm, SiLU, causal conv; indexed 0/1/2 like the reference's head Sequential."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__([RMSNorm(in_dim, 3), nn.SiLU(), CausalConv3d(in_dim, out_dim, 3, padding=1)])

    def forward(self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None) -> Tensor:
        if opts is not None and opts.fused:
            return self[2].forward_padded(norm_silu_padded(x, self[0], self[2], cache, opts), cache)
        return self[2](self[1](self[0](x)), cache)


class Encoder3d(nn.Module):
    """Pixels (B, 3, T, H, W) → 2·z_dim channels at (1 + (T−1)/4, H/8, W/8)."""

    def __init__(self, cfg: WanVAEConfig) -> None:
        super().__init__()
        dims = [cfg.dim * m for m in (1, *cfg.dim_mult)]
        self.conv1 = CausalConv3d(3, dims[0], 3, padding=1)
        layers: list[nn.Module] = []
        scale = 1.0
        for i, (in_dim, out_dim) in enumerate(itertools.pairwise(dims)):
            for _ in range(cfg.num_res_blocks):
                layers.append(ResidualBlock(in_dim, out_dim))
                if scale in cfg.attn_scales:
                    layers.append(AttentionBlock(out_dim))
                in_dim = out_dim
            if i < len(cfg.temporal_downsample):
                layers.append(Downsample(out_dim, temporal=cfg.temporal_downsample[i]))
                scale /= 2.0
        self.downsamples = nn.ModuleList(layers)
        self.middle = nn.ModuleList(
            [ResidualBlock(dims[-1], dims[-1]), AttentionBlock(dims[-1]), ResidualBlock(dims[-1], dims[-1])]
        )
        self.head = OutputHead(dims[-1], 2 * cfg.z_dim)

    def forward(self, x: Tensor, cache: CausalConvCache) -> Tensor:
        x = self.conv1(x, cache)
        x = run_layers(self.downsamples, x, cache)
        x = run_layers(self.middle, x, cache)
        return self.head(x, cache)


class Decoder3d(nn.Module):
    """z_dim channels (B, z, F, h, w) → pixels (B, 3, T, 8h, 8w); T = 1 + 4·(F − 1) for a fresh cache."""

    def __init__(self, cfg: WanVAEConfig) -> None:
        super().__init__()
        mults = cfg.dim_mult[::-1]
        dims = [cfg.dim * m for m in (mults[0], *mults)]
        temporal_upsample = cfg.temporal_downsample[::-1]
        self.conv1 = CausalConv3d(cfg.z_dim, dims[0], 3, padding=1)
        self.middle = nn.ModuleList(
            [ResidualBlock(dims[0], dims[0]), AttentionBlock(dims[0]), ResidualBlock(dims[0], dims[0])]
        )
        layers: list[nn.Module] = []
        scale = 1.0 / 2 ** (len(cfg.dim_mult) - 2)
        in_dim = dims[0]
        for i, out_dim in enumerate(dims[1:]):
            for _ in range(cfg.num_res_blocks + 1):
                layers.append(ResidualBlock(in_dim, out_dim))
                if scale in cfg.attn_scales:
                    layers.append(AttentionBlock(out_dim))
                in_dim = out_dim
            if i < len(temporal_upsample):
                layers.append(Upsample(out_dim, temporal=temporal_upsample[i]))
                in_dim = out_dim // 2  # the upsample's conv halves the channels
                scale *= 2.0
        self.upsamples = nn.ModuleList(layers)
        self.head = OutputHead(dims[-1], 3)
        # Where row bands start (`row_bands` > 1): the last two resolution stages (after the second-to-last
        # upsample), never before an attention block (it needs whole frames). Banding from the middle block
        # would need a halo of 13 latent rows (the low-resolution stages' convs, 104 px each side at 8×) and
        # keeps more alive than it saves; from the 4× stage the halo is 10 rows there (bench/count_decode_memory.py).
        ups = [i + 1 for i, layer in enumerate(layers) if isinstance(layer, Upsample)]
        attn = [i + 1 for i, layer in enumerate(layers) if isinstance(layer, AttentionBlock)]
        self.band_from = max([0, *ups[-2:-1], *attn[-1:]])

    def forward(
        self, x: Tensor, cache: CausalConvCache, opts: VAEDecodeOptions | None = None, row_bands: int = 1
    ) -> Tensor:
        """`row_bands` > 1 runs the stages after the middle block in that many row bands with a halo
        (vae/row_bands.py): the same pixels, a fraction of the full-resolution activations alive at once."""
        x = self.conv1(x, cache)
        x = run_layers(self.middle, x, cache, opts)
        if row_bands > 1:
            x = run_layers(self.upsamples[: self.band_from], x, cache, opts)
            return run_in_row_bands([*self.upsamples[self.band_from :], self.head], x, cache, opts, row_bands)
        x = run_layers(self.upsamples, x, cache, opts)
        return self.head(x, cache, opts)


class WanVAE(nn.Module):
    """Wan 2.1 VAE. `encode`/`decode` take and return normalised latents (B, z_dim, F, h, w)."""

    # Subclasses with a key layout of their own (`Wan22VAE`) enter here when defined, so `from_state_dict` picks
    # them from the weights without importing them (the package's __init__ imports every one).
    layouts: ClassVar[list[type[WanVAE]]] = []

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        WanVAE.layouts.append(cls)

    @classmethod
    def reads_state_dict(cls, sd: Mapping[str, Tensor]) -> bool:
        """Whether canonical weights `sd` are in a subclass's own key layout (the base class reads the rest)."""
        return False

    def __init__(self, config: WanVAEConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder3d(config)
        self.conv1 = CausalConv3d(2 * config.z_dim, 2 * config.z_dim, 1)  # mu ‖ log_var
        self.conv2 = CausalConv3d(config.z_dim, config.z_dim, 1)
        self.decoder = Decoder3d(config)
        assign_cache_keys(self)
        # What `stream_decoder()` and `decode()` use when no options are passed (None: the reference path).
        # One switch for every caller (api, session, bench) once the options are measured on the target GPU.
        self.decode_options: VAEDecodeOptions | None = None
        # How `stream_decoder()` splits blocks unless told otherwise; the loader (CUDA: one latent frame per call)
        # and the memory planner set it (exact either way).
        self.stream_slicing = DecodeSlicing()
        # fp32 buffers: normalisation stays exact whatever dtype the convs run in.
        self.register_buffer("latent_mean", torch.tensor(config.latent_mean, dtype=torch.float32), persistent=False)
        self.register_buffer("latent_std", torch.tensor(config.latent_std, dtype=torch.float32), persistent=False)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> WanVAE:
        """`.to(dtype)`/`.half()` would cast the latent statistics too; rebuild them in fp32 on the new device.

        They are 16 numbers, but rounding them to bf16 (std 2.8184 → 2.8125) added a second rounding to
        every denormalised latent before the decoder's own cast.
        """
        super()._apply(fn, recurse)
        for name, values in (("latent_mean", self.config.latent_mean), ("latent_std", self.config.latent_std)):
            buf = getattr(self, name)
            if buf.dtype != torch.float32:
                setattr(self, name, torch.tensor(values, dtype=torch.float32).to(buf.device))
        return self

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def config_from_state_dict(cls, sd: Mapping[str, Tensor], **overrides) -> WanVAEConfig:
        return WanVAEConfig.from_state_dict(sd, **overrides)

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Tensor], source: str = "state dict", **config_overrides) -> WanVAE:
        """Build from canonical (original Wan) keys; config inferred from names and shapes.

        Called on `WanVAE`, Wan 2.2 weights (told apart by their key layout) build a `Wan22VAE`.
        """
        if cls is WanVAE:
            for layout in WanVAE.layouts:
                if layout.reads_state_dict(sd):
                    return layout.from_state_dict(sd, source, **config_overrides)
        model = cls(cls.config_from_state_dict(sd, **config_overrides))
        expected = model.state_dict()
        missing = sorted(set(expected) - set(sd))
        unexpected = sorted(set(sd) - set(expected))
        wrong = [
            f"{k} {tuple(sd[k].shape)} (expected {tuple(v.shape)})"
            for k, v in expected.items()
            if k in sd and sd[k].shape != v.shape
        ]
        if missing or unexpected or wrong:
            raise CheckpointLayoutError(
                f"{source}: {cls.__name__} weights do not match the architecture inferred from them "
                f"({model.config}). Missing {missing[:5]} ({len(missing)}), unexpected {unexpected[:5]} "
                f"({len(unexpected)}), wrong shapes {wrong[:5]}."
            )
        model.load_state_dict({k: v.float() for k, v in sd.items()})
        return model

    @classmethod
    def from_file(
        cls, path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
    ) -> WanVAE:
        """Load ComfyUI `models/vae/wan_2.1_vae.safetensors` / `wan2.2_vae.safetensors`, `Wan2.1_VAE.pth` /
        `Wan2.2_VAE.pth`, diffusers (2.1) or fixture weights; the Wan version is read from the weights."""
        sd, layout = load_vae_state_dict(path)
        model = cls.from_state_dict(sd, source=str(path))
        logger.info(
            "loaded %s from %s (%s layout, dim %d, z_dim %d)",
            type(model).__name__,
            path,
            layout,
            model.config.dim,
            model.config.z_dim,
        )
        return model.to(device=device, dtype=dtype).eval()

    # ---- normalisation ------------------------------------------------------------------------
    def _stats(self, like: Tensor) -> tuple[Tensor, Tensor]:
        shape = (1, -1, 1, 1, 1)
        inv_std = 1.0 / self.latent_std  # float32 reciprocal, as the reference computes it
        return self.latent_mean.view(shape).to(like.device), inv_std.view(shape).to(like.device)

    def denormalise(self, z: Tensor) -> Tensor:
        """Normalised latents → VAE latents: z / (1/std) + mean, in float32 (the reference's order)."""
        mean, inv_std = self._stats(z)
        return z.float() / inv_std + mean

    def normalise(self, mu: Tensor) -> Tensor:
        """VAE latents → normalised: (mu − mean) · (1/std), in float32."""
        mean, inv_std = self._stats(mu)
        return (mu.float() - mean) * inv_std

    # ---- stepwise primitives (the streaming building blocks) ---------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self.conv2.weight.dtype

    def _check(self, x: Tensor, channels: int, what: str) -> None:
        if x.ndim != 5 or x.shape[1] != channels:
            raise ShapeMismatchError(f"{what} must be [B, {channels}, T, H, W], got {list(x.shape)}")

    def prepare_decode(self, options: VAEDecodeOptions) -> None:
        """Put the decoder's conv weights in the layout `options` runs in (once; a no-op when they are).

        Channels-last convs want channels-last weights, else cuDNN converts them on every call. The
        conversion is in place and only changes strides, never values.
        """
        if not options.channels_last or self.decoder.head[2].weight.is_contiguous(memory_format=torch.channels_last_3d):
            return
        for module in (self.conv2, *self.decoder.modules()):
            if isinstance(module, nn.Conv3d | nn.Conv2d):
                fmt = torch.channels_last_3d if module.weight.ndim == 5 else torch.channels_last
                module.weight.data = module.weight.data.contiguous(memory_format=fmt)

    @torch.no_grad()
    def decode_step(
        self,
        z: Tensor,
        cache: CausalConvCache,
        latent_frames_per_step: int | None = None,
        options: VAEDecodeOptions | None = None,
        in_place: bool = False,
        row_bands: int = 1,
    ) -> tuple[Tensor, CausalConvCache]:
        """Decode normalised latents (B, z_dim, f, h, w) given the cache of everything decoded before.

        Returns the new pixel frames (B, 3, T, 8h, 8w) in [-1, 1] (not clamped) and the advanced cache;
        the cache passed in is not modified. `latent_frames_per_step` bounds peak memory by decoding
        in slices; any slicing gives the same frames. `options` picks faster routes to the same frames
        (see `VAEDecodeOptions`; with `channels_last` the pixels come back NDHWC-strided). `in_place`
        advances `cache` itself, so each replaced entry can be freed at once (less memory; the cache passed
        in is then the advanced one). `row_bands` > 1 decodes each call's high-resolution stages in that many
        row bands (vae/row_bands.py; the same frames, less memory).
        """
        self._check(z, self.config.z_dim, "latents")
        opts = None if options is None or options.is_reference else options
        cache = cache if in_place else cache.fork()
        x = self.conv2(self.denormalise(z).to(self.dtype))
        if opts is not None and opts.channels_last:
            self.prepare_decode(opts)
            x = x.contiguous(memory_format=torch.channels_last_3d)
        step = latent_frames_per_step or x.shape[2]
        bands = () if row_bands == 1 else (row_bands,)
        if bands and not hasattr(self.decoder, "band_from"):
            raise ConfigError(f"row_bands={row_bands}: {type(self).__name__}'s decoder has no row-band decode; use 1")
        with _cudnn_benchmark(opts is not None and opts.cudnn_benchmark):
            outs = [self.decoder(x[:, :, i : i + step], cache, opts, *bands) for i in range(0, x.shape[2], step)]
        if len(outs) == 1:
            return outs[0], cache
        return torch.cat(outs, dim=2) if outs else x.new_zeros(x.shape[0], 3, 0, 1, 1), cache

    @torch.no_grad()
    def encode_step(self, video: Tensor, cache: CausalConvCache) -> tuple[Tensor, CausalConvCache]:
        """Encode pixel frames (B, 3, t, H, W) in [-1, 1] given the cache; returns normalised mu and the new cache.

        The first call must start with 1 frame and later calls should carry multiples of 4 (the
        temporal stride), as `StreamEncoder` arranges; then every call yields whole latent frames.
        """
        self._check(video, 3, "video")
        cache = cache.fork()
        h = self.encoder(video.to(self.dtype), cache)
        mu = self.conv1(h)[:, : self.config.z_dim]  # log_var (the other half) is not needed
        return self.normalise(mu), cache

    # ---- whole-sequence API -------------------------------------------------------------------
    def decode(
        self, z: Tensor, latent_frames_per_step: int | None = 1, options: VAEDecodeOptions | None = None
    ) -> Tensor:
        """Full causal decode of normalised latents (B, z_dim, F, h, w) → pixels (B, 3, 1 + 4(F−1), 8h, 8w)."""
        options = self.decode_options if options is None else options
        pixels, _ = self.decode_step(z, CausalConvCache(), latent_frames_per_step, options)
        return pixels

    def encode(self, video: Tensor, frames_per_step: int | None = None) -> Tensor:
        """Encode pixels (B, 3, 1 + 4k, H, W) in [-1, 1] → normalised mu (B, z_dim, 1 + k, H/8, W/8).

        Frame 0 goes alone, then `frames_per_step` frames at a time (a multiple of 4; default all),
        which bounds memory without changing the result.
        """
        self.config.num_latent_frames(video.shape[2])  # raises with the valid counts
        stride = self.config.temporal_compression
        step = frames_per_step or max(video.shape[2] - 1, stride)
        if step % stride:
            raise ShapeMismatchError(f"frames_per_step={frames_per_step} must be a multiple of {stride}")
        cache, outs = CausalConvCache(), []
        bounds = [0, 1, *range(1 + step, video.shape[2], step), video.shape[2]]
        for start, end in itertools.pairwise(bounds):
            if end > start:
                mu, cache = self.encode_step(video[:, :, start:end], cache)
                outs.append(mu)
        return torch.cat(outs, dim=2)

    def decode_working_set_bytes(self, latent_h: int, latent_w: int, latent_frames: int, batch: int = 1) -> int:
        """Device bytes a streamed decode of `latent_frames`-frame blocks needs beyond the weights, with this
        VAE's `decode_options` and `stream_slicing` on its own device (`vae.memory.wan_decode_memory`)."""
        return VAEMemory.for_vae(self, latent_h, latent_w, batch).decode(latent_frames).working_set_bytes

    def stream_decoder(self, **kwargs) -> StreamDecoder:
        """A `StreamDecoder` session (see streaming.py) whose outputs concatenate to `decode`.

        `options` defaults to `self.decode_options`, `latent_frames_per_step`, `release_previous_state` and
        `row_bands` to `self.stream_slicing`.
        """
        if kwargs.get("options") is None:
            kwargs["options"] = self.decode_options
        if kwargs.get("latent_frames_per_step") is None:
            kwargs["latent_frames_per_step"] = self.stream_slicing.latent_frames_per_step
        kwargs.setdefault("release_previous_state", self.stream_slicing.release_previous_state)
        kwargs.setdefault("row_bands", self.stream_slicing.row_bands)
        return StreamDecoder(self, **kwargs)

    def stream_encoder(self) -> StreamEncoder:
        """A `StreamEncoder` session: feed frames as they arrive, get latents as soon as they are whole."""
        return StreamEncoder(self)
