"""WanVAEConfig: the architecture of a Wan 2.1 causal 3D VAE, read from its weights.

The config is inferred from key names and tensor shapes (as comfy/model_detection.py does for the
transformer), never from a table of known sizes. It does not load files; see checkpoint.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..errors import CheckpointLayoutError, ConfigError
from .options import VAEDecodeOptions

__all__ = ["VAEDecodeOptions"]  # re-exported: it lived here before vae/options.py

# Per-channel statistics of the Wan 2.1 latent space (Wan2.1 wan/modules/vae.py, WanVAE.__init__).
# Diffusion models work on (z - mean) / std; the VAE decodes z.
WAN21_LATENT_MEAN: tuple[float, ...] = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)  # fmt: skip
WAN21_LATENT_STD: tuple[float, ...] = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)  # fmt: skip

_BLOCK_KEY = re.compile(r"^encoder\.downsamples\.(\d+)\.(.+)$")


def check_down_stages(dim_mult: tuple[int, ...], temporal_downsample: tuple[bool, ...]) -> None:
    """One temporal-downsample flag per encoder down stage (Wan 2.1 and 2.2 VAE configs)."""
    if len(temporal_downsample) != len(dim_mult) - 1:
        raise ConfigError(
            f"temporal_downsample has {len(temporal_downsample)} entries but dim_mult "
            f"{dim_mult} has {len(dim_mult) - 1} down stages; they must match"
        )


def check_latent_stats(mean: tuple[float, ...], std: tuple[float, ...], z_dim: int) -> None:
    """Latent normalisation constants need one mean and one std per latent channel."""
    if len(mean) != z_dim or len(std) != z_dim:
        raise ConfigError(f"latent_mean/latent_std have {len(mean)}/{len(std)} entries, expected z_dim={z_dim}")


@dataclass(frozen=True)
class WanVAEConfig:
    dim: int = 96  # base channel count; stage channels are dim * dim_mult[i]
    z_dim: int = 16  # latent channels
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2  # per encoder stage; decoder stages have one more
    attn_scales: tuple[float, ...] = ()  # spatial scales (1, 1/2, ...) with an attention block; none in Wan 2.1
    temporal_downsample: tuple[bool, ...] = (False, True, True)  # per encoder down stage; decoder mirrors it
    latent_mean: tuple[float, ...] = WAN21_LATENT_MEAN
    latent_std: tuple[float, ...] = WAN21_LATENT_STD

    def __post_init__(self) -> None:
        object.__setattr__(self, "dim_mult", tuple(int(m) for m in self.dim_mult))
        object.__setattr__(self, "attn_scales", tuple(float(s) for s in self.attn_scales))
        object.__setattr__(self, "temporal_downsample", tuple(bool(t) for t in self.temporal_downsample))
        check_down_stages(self.dim_mult, self.temporal_downsample)
        check_latent_stats(self.latent_mean, self.latent_std, self.z_dim)

    @property
    def latent_channels(self) -> int:
        return self.z_dim

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent along H and W (8 for Wan 2.1)."""
        return 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_compression(self) -> int:
        """Pixel frames per latent frame after the first (4 for Wan 2.1)."""
        return 2 ** sum(self.temporal_downsample)

    def num_frames(self, num_latent_frames: int) -> int:
        """Pixel frames decoded from F latent frames: the causal rule 1 + 4·(F − 1)."""
        return 1 + self.temporal_compression * (num_latent_frames - 1) if num_latent_frames else 0

    def num_latent_frames(self, num_frames: int) -> int:
        """Latent frames encoded from T pixel frames; T must be 1 + 4·k."""
        k, rem = divmod(num_frames - 1, self.temporal_compression)
        if num_frames < 1 or rem:
            raise ConfigError(
                f"{num_frames} frames cannot be encoded: the causal VAE needs 1 + "
                f"{self.temporal_compression}·k frames (e.g. {1 + self.temporal_compression * max(k, 0)} or "
                f"{1 + self.temporal_compression * (max(k, 0) + 1)})"
            )
        return 1 + k

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], **overrides) -> WanVAEConfig:
        """Infer the architecture from canonical (original Wan) key names and shapes.

        The encoder's flat `downsamples` list is walked in order: residual blocks (`residual.2`),
        attention blocks (`to_qkv`) and resamples (`resample.1`, plus `time_conv` when temporal)
        give the stage layout, from which dim_mult, num_res_blocks and attn_scales follow.
        """
        for probe in ("encoder.conv1.weight", "conv2.weight", "decoder.conv1.weight"):
            if probe not in sd:
                raise CheckpointLayoutError(f"VAE state dict has no '{probe}'; cannot infer the Wan VAE config")
        dim = int(sd["encoder.conv1.weight"].shape[0])
        z_dim = int(sd["conv2.weight"].shape[0])
        kinds: dict[int, str] = {}
        for key in sd:
            m = _BLOCK_KEY.match(key)
            if m is None:
                continue
            idx, rest = int(m.group(1)), m.group(2)
            kind = (
                "res"
                if rest.startswith(("residual.", "shortcut."))
                else "attn"
                if rest.startswith(("to_qkv.", "proj.", "norm."))
                else "resample"
            )
            kinds[idx] = kind
        if sorted(kinds) != list(range(len(kinds))) or not kinds:
            raise CheckpointLayoutError(f"encoder.downsamples indices are not contiguous: {sorted(kinds)}")
        stages: list[list[int]] = [[]]  # residual block indices per stage
        stage_attn: list[bool] = [False]
        temporal: list[bool] = []
        for idx in range(len(kinds)):
            if kinds[idx] == "res":
                stages[-1].append(idx)
            elif kinds[idx] == "attn":
                stage_attn[-1] = True
            else:
                temporal.append(f"encoder.downsamples.{idx}.time_conv.weight" in sd)
                stages.append([])
                stage_attn.append(False)
        num_res = {len(s) for s in stages}
        if len(num_res) != 1:
            raise CheckpointLayoutError(
                f"encoder stages have different residual block counts: {[len(s) for s in stages]}"
            )
        dim_mult = tuple(int(sd[f"encoder.downsamples.{s[-1]}.residual.6.weight"].shape[0]) // dim for s in stages)
        attn_scales = tuple(1.0 / 2**i for i, has in enumerate(stage_attn) if has)
        return cls(
            dim=dim,
            z_dim=z_dim,
            dim_mult=dim_mult,
            num_res_blocks=num_res.pop(),
            attn_scales=attn_scales,
            temporal_downsample=tuple(temporal),
            **overrides,
        )


# Per-channel statistics of the Wan 2.2 latent space (Wan2.2 wan/modules/vae2_2.py, Wan2_2_VAE.__init__).
WAN22_LATENT_MEAN: tuple[float, ...] = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
)  # fmt: skip
WAN22_LATENT_STD: tuple[float, ...] = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
)  # fmt: skip

# A key only the Wan 2.2 VAE has: its decoder stages are Up_ResidualBlocks with their own `upsamples`
# list (ComfyUI's comfy/sd.py tells the two VAEs apart by the same key).
WAN22_PROBE = "decoder.upsamples.0.upsamples.0.residual.2.weight"
_STAGE_BLOCK = re.compile(r"^encoder\.downsamples\.(\d+)\.downsamples\.(\d+)\.(\w+)\.")


def is_wan22_state_dict(sd: Mapping[str, torch.Tensor]) -> bool:
    """Whether canonical VAE keys are the Wan 2.2 layout (stages of residual blocks with avg shortcuts)."""
    return WAN22_PROBE in sd


@dataclass(frozen=True)
class Wan22VAEConfig:
    """The Wan 2.2 VAE (TI2V-5B): 2x2 patchify on top of an 8x causal VAE, so 16x16 pixels per latent.

    Encoder and decoder have different base widths (160 and 256 in the released weights); each stage is
    a group of residual blocks with a parameter-free averaging (encoder) or duplicating (decoder)
    shortcut around it.
    """

    dim: int = 160  # encoder base channels
    dec_dim: int = 256  # decoder base channels
    z_dim: int = 48
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2  # per encoder stage; decoder stages have one more
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    patch_size: int = 2  # pixels folded into channels before the encoder (and unfolded after the decoder)
    latent_mean: tuple[float, ...] = WAN22_LATENT_MEAN
    latent_std: tuple[float, ...] = WAN22_LATENT_STD

    def __post_init__(self) -> None:
        object.__setattr__(self, "dim_mult", tuple(int(m) for m in self.dim_mult))
        object.__setattr__(self, "temporal_downsample", tuple(bool(t) for t in self.temporal_downsample))
        check_down_stages(self.dim_mult, self.temporal_downsample)
        check_latent_stats(self.latent_mean, self.latent_std, self.z_dim)

    @property
    def latent_channels(self) -> int:
        return self.z_dim

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent along H and W (16 for Wan 2.2: 2x patchify, then 3 stride-2 stages)."""
        return self.patch_size * 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_compression(self) -> int:
        return 2 ** sum(self.temporal_downsample)

    num_frames = WanVAEConfig.num_frames
    num_latent_frames = WanVAEConfig.num_latent_frames

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], **overrides) -> Wan22VAEConfig:
        """Infer the architecture from canonical (original Wan 2.2 / ComfyUI) key names and shapes."""
        for probe in ("encoder.conv1.weight", "conv2.weight", "decoder.conv1.weight", "decoder.head.2.weight"):
            if probe not in sd:
                raise CheckpointLayoutError(f"VAE state dict has no '{probe}'; cannot infer the Wan 2.2 VAE config")
        conv_in = sd["encoder.conv1.weight"]
        dim, in_ch = int(conv_in.shape[0]), int(conv_in.shape[1])
        patch = round((in_ch / 3) ** 0.5)
        if 3 * patch * patch != in_ch:
            raise CheckpointLayoutError(f"encoder.conv1 takes {in_ch} channels, not 3·p² for a patch size p")
        blocks: dict[int, dict[int, str]] = {}
        for key in sd:
            if m := _STAGE_BLOCK.match(key):
                blocks.setdefault(int(m[1]), {})[int(m[2])] = "res" if m[3] in ("residual", "shortcut") else "resample"
        if not blocks or sorted(blocks) != list(range(len(blocks))):
            raise CheckpointLayoutError(f"encoder.downsamples stages are not contiguous: {sorted(blocks)}")
        num_res = {sum(k == "res" for k in b.values()) for b in blocks.values()}
        if len(num_res) != 1:
            raise CheckpointLayoutError(f"encoder stages have different residual block counts: {sorted(num_res)}")
        n = num_res.pop()
        dim_mult = tuple(
            int(sd[f"encoder.downsamples.{i}.downsamples.{n - 1}.residual.6.weight"].shape[0]) // dim
            for i in range(len(blocks))
        )
        temporal = tuple(
            f"encoder.downsamples.{i}.downsamples.{n}.time_conv.weight" in sd for i in range(len(blocks) - 1)
        )
        dec_dim = int(sd["decoder.head.2.weight"].shape[1]) // dim_mult[0]
        return cls(
            dim=dim,
            dec_dim=dec_dim,
            z_dim=int(sd["conv2.weight"].shape[0]),
            dim_mult=dim_mult,
            num_res_blocks=n,
            temporal_downsample=temporal,
            patch_size=patch,
            **overrides,
        )


WAN22_VAE_PARAMETERS = 704_688_668  # Wan2.2_VAE.pth (encoder 160 wide, decoder 256): 2.82 GB in fp32
