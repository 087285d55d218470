"""WanConfig: the architecture of a Wan 2.1 style transformer.

Read from the weights (see checkpoint.py), never from constants in the code. Derived sizes are
properties. Geometry of a run (latent height/width) is not part of the model config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...errors import ConfigError
from .action_module import ActionConfig


@dataclass(frozen=True)
class WanConfig:
    model_type: str = "t2v"  # "t2v"; "ti2v" (Wan 2.2 TI2V-5B: 48 latent channels, no extra weights);
    # "i2v"/"flf2v" variants carry image-conditioning weights
    patch_size: tuple[int, int, int] = (1, 2, 2)  # (t, h, w) patch of the Conv3d embedding
    text_len: int = 512  # text context rows (umT5 pads to 512)
    in_dim: int = 16  # latent channels in
    dim: int = 1536  # hidden size
    ffn_dim: int = 8960
    freq_dim: int = 256  # sinusoidal timestep features
    text_dim: int = 4096  # umT5-XXL hidden size
    out_dim: int = 16  # latent channels out
    num_heads: int = 12
    num_layers: int = 30
    qk_norm: bool = True
    cross_attn_norm: bool = True
    eps: float = 1e-6
    # Action conditioning (Matrix-Game style world models, and the bundled model): an MLP of the
    # per-frame action vector whose output is added to the timestep embedding, so it modulates every
    # block. 0 = no action input.
    action_dim: int = 0
    # Wan 2.1 I2V: the projected CLIP tokens of the start image (`img_emb`, input width clip_dim) beside the
    # text, attended with their own K/V (`cross_attn.k_img/v_img/norm_k_img`), and in_dim 36 (noise +
    # cond_concat). model_type "i2v"; "flf2v" (two images, `img_emb.emb_pos`) is refused by the loader.
    has_image_input: bool = False
    # Matrix-Game 2.0 (image-started, action-driven): the projected CLIP tokens (`img_emb`, input width
    # clip_dim) are the whole cross-attention context (no text embedding, no k_img/v_img), and the blocks
    # in action_config.blocks carry an ActionModule. None for every other family.
    action_config: ActionConfig | None = None
    clip_dim: int = 1280
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.dim % self.num_heads:
            raise ConfigError(f"dim={self.dim} is not divisible by num_heads={self.num_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"head_dim={self.head_dim} must be even for RoPE")
        if len(self.patch_size) != 3:
            raise ConfigError(f"patch_size must be (t, h, w), got {self.patch_size}")
        object.__setattr__(self, "patch_size", tuple(int(p) for p in self.patch_size))
        if isinstance(self.action_config, dict):
            object.__setattr__(self, "action_config", ActionConfig.from_dict(self.action_config))

    @property
    def image_context(self) -> bool:
        """True when the cross-attention context is CLIP image tokens only (Matrix-Game 2.0), not text."""
        return self.action_config is not None

    @property
    def context_dim(self) -> int:
        """Feature width of the context the pipeline passes: clip_dim for image context, else text_dim."""
        return self.clip_dim if self.image_context else self.text_dim

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Complex pairs per head for the (t, h, w) axes: 22/21/21 for head_dim 128, 4/2/2 for 16."""
        c = self.head_dim // 2
        return (c - 2 * (c // 3), c // 3, c // 3)

    def frame_tokens(self, latent_height: int, latent_width: int) -> int:
        """Tokens per latent frame after patchify (1560 for 60x104 latents with patch (1, 2, 2))."""
        _, ph, pw = self.patch_size
        if latent_height % ph or latent_width % pw:
            raise ConfigError(
                f"latent size {latent_height}x{latent_width} is not divisible by the patch {ph}x{pw}; "
                f"pixel height/width must be multiples of {8 * ph}x{8 * pw}"
            )
        return (latent_height // ph) * (latent_width // pw)

    def block_parameters(self) -> int:
        """Parameter count of one attention block (what block swap streams)."""
        d, f = self.dim, self.ffn_dim
        attn = 4 * (d * d + d) + (2 * d if self.qk_norm else 0)  # q k v o + qk norms
        norm3 = 2 * d if self.cross_attn_norm else 0
        image = 2 * (d * d + d) + (d if self.qk_norm else 0) if self.has_image_input else 0  # I2V k_img, v_img
        return 2 * attn + image + norm3 + (d * f + f + f * d + d) + 6 * d  # self, cross, norm3, ffn, modulation

    def num_parameters(self) -> int:
        """Parameter count of the transformer (no action branches; Wan I2V's image branch included)."""
        d, L = self.dim, self.num_layers
        pt, ph, pw = self.patch_size
        block = self.block_parameters()
        embed = self.in_dim * pt * ph * pw * d + d
        text = 0 if self.image_context else self.text_dim * d + d + d * d + d
        time = self.freq_dim * d + d + d * d + d + d * 6 * d + 6 * d
        head = d * pt * ph * pw * self.out_dim + pt * ph * pw * self.out_dim + 2 * d
        c = self.clip_dim
        image = 2 * c + c * c + c + c * d + d + 2 * d if self.has_image_input else 0  # img_emb of Wan I2V
        return L * block + embed + text + time + head + image

    def cost_row(self, spec, cache_config, elem_bytes: int, resident=(None,), fp8_block_weights: bool = False):
        """This transformer's row of the memory plan (models/cost.py `TransformerCost`): the planner, a layer
        below (cache/planner.py), asks the config it is given instead of importing the row."""
        from ..cost import TransformerCost  # the row reads the cache's formulas: no cache import at config load

        return TransformerCost(self, spec, cache_config, elem_bytes, tuple(resident), fp8_block_weights)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["patch_size"] = list(self.patch_size)
        if self.action_config is None:  # only Matrix-Game configs carry these two (I2V: clip_dim too)
            del d["action_config"]
            if not self.has_image_input:
                del d["clip_dim"]
        else:
            d["action_config"] = self.action_config.to_dict()
        return {**d.pop("extra"), **d}  # extra keys flat, so from_dict(to_dict(c)) == c

    @classmethod
    def from_dict(cls, d: dict) -> WanConfig:
        """Build from a dict such as a fixture's `config`; unknown keys go to `extra`."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names}
        if "patch_size" in known:
            known["patch_size"] = tuple(known["patch_size"])
        return cls(**known, extra=extra)
