"""CLIP ViT-H/14 image tokens of a start image (Matrix-Game 2.0, Wan 2.1 I2V), through `transformers`.

The image-started causal Wan attends to 257 visual tokens of its start image instead of text: the
output of the **31st of 32** blocks of the CLIP ViT-H/14 vision tower, before the final LayerNorm
(Wan's `CLIPModel.encode_video` calls `visual(video, use_31_block=True)`). In `transformers`' terms that
is `hidden_states[-2]` of `CLIPVisionModel` (index 0 is the embeddings after `pre_layrnorm`), which is
also what ComfyUI's CLIP Vision Encode puts in `CLIP_VISION_OUTPUT.penultimate_hidden_states`.

Files: ComfyUI's `models/clip_vision/clip_vision_h.safetensors` (transformers key names,
`vision_model.*` plus `visual_projection.weight`), a Hugging Face CLIP (vision) folder, an open_clip
state dict (`visual.transformer.resblocks.*`), or Wan's own
`models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth` (`visual.transformer.N.attn.to_qkv`). Every
layout is renamed to transformers' names and run by `transformers.CLIPVisionModel`.

Preprocessing is the authors' (`wan/vae/wanx_vae_src/clip.py`, encode_video): the start image as the
model sees it ([-1, 1], 352×640) is resized to 224×224 by bicubic interpolation without antialiasing
and without keeping the aspect ratio (`F.interpolate(..., align_corners=False)`), mapped to [0, 1] and
normalised with the CLIP mean and std. ComfyUI's own CLIP Vision Encode crops and antialiases instead,
so its tokens differ a little from the authors'; both are accepted.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import CheckpointLayoutError, ConfigError, MissingFileError, ShapeMismatchError

log = logging.getLogger(__name__)

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# Heads are not visible in the weights: the standard CLIP towers by width (ViT-B, L, H, g, bigG).
HEADS_BY_WIDTH = {768: 12, 1024: 16, 1280: 16, 1408: 16, 1664: 16}


def clip_pixel_values(image: Tensor, image_size: int = 224) -> Tensor:
    """[B, 3, H, W] in [-1, 1] → CLIP pixel values [B, 3, S, S], as the authors' encode_video computes them."""
    if image.ndim != 4 or image.shape[1] != 3:
        raise ShapeMismatchError(f"the CLIP input must be [B, 3, H, W] in [-1, 1], got {list(image.shape)}")
    x = F.interpolate(image.float(), size=(image_size, image_size), mode="bicubic", align_corners=False)
    x = x.mul(0.5).add(0.5)
    mean = torch.tensor(CLIP_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD, device=x.device).view(1, 3, 1, 1)
    return x.sub(mean).div(std)  # torchvision Normalize: (x - mean) / std


# ---- key layouts → transformers names -----------------------------------------------------------
_OPEN_CLIP_BLOCK = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2",
                    "attn.out_proj": "self_attn.out_proj"}  # fmt: skip
_WAN_BLOCK = {"norm1": "layer_norm1", "norm2": "layer_norm2", "mlp.0": "mlp.fc1", "mlp.2": "mlp.fc2",
              "attn.proj": "self_attn.out_proj"}  # fmt: skip


def _split_qkv(out: dict[str, Tensor], layer: int, kind: str, fused: Tensor) -> None:
    q, k, v = fused.chunk(3, dim=0)
    for name, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
        out[f"vision_model.encoder.layers.{layer}.self_attn.{name}.{kind}"] = part


def _from_blocks(sd: Mapping[str, Tensor], pattern: str, table: Mapping[str, str], qkv: str) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for key, value in sd.items():
        m = re.fullmatch(pattern, key)
        if m is None:
            continue
        layer, rest = int(m.group(1)), m.group(2)
        sub, kind = rest.rsplit(".", 1)
        if sub == qkv:
            _split_qkv(out, layer, kind, value)
        elif sub in table:
            out[f"vision_model.encoder.layers.{layer}.{table[sub]}.{kind}"] = value
    return out


def to_transformers_keys(sd: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], str]:
    """Any supported CLIP vision layout → (`CLIPVisionModel` state dict, layout name)."""
    keys = list(sd)
    if any(k.startswith("vision_model.") for k in keys):  # ComfyUI / transformers (also a full CLIPModel)
        return {k[len("vision_model.") :]: v for k, v in sd.items() if k.startswith("vision_model.")}, "transformers"
    if "visual.transformer.resblocks.0.attn.in_proj_weight" in sd:  # open_clip
        out = _from_blocks(sd, r"visual\.transformer\.resblocks\.(\d+)\.(.+)", _OPEN_CLIP_BLOCK, "attn.in_proj")
        # open_clip names the fused projection in_proj_weight / in_proj_bias (no dot before the kind)
        for key, value in sd.items():
            m = re.fullmatch(r"visual\.transformer\.resblocks\.(\d+)\.attn\.in_proj_(weight|bias)", key)
            if m:
                _split_qkv(out, int(m.group(1)), m.group(2), value)
        out.update({
            "vision_model.embeddings.class_embedding": sd["visual.class_embedding"],
            "vision_model.embeddings.patch_embedding.weight": sd["visual.conv1.weight"],
            "vision_model.embeddings.position_embedding.weight": sd["visual.positional_embedding"],
        })  # fmt: skip
        for a, b in (("ln_pre", "pre_layrnorm"), ("ln_post", "post_layernorm")):
            for kind in ("weight", "bias"):
                out[f"vision_model.{b}.{kind}"] = sd[f"visual.{a}.{kind}"]
        return {k[len("vision_model.") :]: v for k, v in out.items()}, "open_clip"
    if "visual.transformer.0.attn.to_qkv.weight" in sd:  # Wan's XLM-RoBERTa CLIP (the authors' .pth)
        out = _from_blocks(sd, r"visual\.transformer\.(\d+)\.(.+)", _WAN_BLOCK, "attn.to_qkv")
        out.update({
            "vision_model.embeddings.class_embedding": sd["visual.cls_embedding"].reshape(-1),
            "vision_model.embeddings.patch_embedding.weight": sd["visual.patch_embedding.weight"],
            "vision_model.embeddings.position_embedding.weight": sd["visual.pos_embedding"].reshape(
                -1, sd["visual.pos_embedding"].shape[-1]
            ),
        })  # fmt: skip
        for a, b in (("pre_norm", "pre_layrnorm"), ("post_norm", "post_layernorm")):
            for kind in ("weight", "bias"):
                out[f"vision_model.{b}.{kind}"] = sd[f"visual.{a}.{kind}"]
        return {k[len("vision_model.") :]: v for k, v in out.items()}, "wan"
    raise CheckpointLayoutError(
        f"not a CLIP vision checkpoint (keys such as {keys[:3]}); expected ComfyUI's clip_vision_h.safetensors "
        "(vision_model.*), an open_clip or Wan CLIP state dict, or a Hugging Face CLIP folder"
    )


def config_from_state_dict(sd: Mapping[str, Tensor], **overrides: Any):
    """A `CLIPVisionConfig` read from the weights' shapes (heads and activation from the standard towers)."""
    from transformers import CLIPVisionConfig

    width = sd["embeddings.class_embedding"].shape[0]
    patch = sd["embeddings.patch_embedding.weight"].shape[-1]
    positions = sd["embeddings.position_embedding.weight"].shape[0]
    layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("encoder.layers."))
    grid = math.isqrt(positions - 1)
    if grid * grid != positions - 1:
        raise CheckpointLayoutError(f"CLIP position embedding has {positions} rows; expected 1 + a square grid")
    config = {
        "hidden_size": width,
        "intermediate_size": sd["encoder.layers.0.mlp.fc1.weight"].shape[0],
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS_BY_WIDTH.get(width, max(1, width // 64)),
        "patch_size": patch,
        "image_size": grid * patch,
        "hidden_act": "gelu",  # ViT-H/14 (LAION / Wan); OpenAI's ViT-B/L use quick_gelu: pass hidden_act
        "layer_norm_eps": 1e-5,
    }
    config.update(overrides)
    return CLIPVisionConfig(**config)


class CLIPVisionEncoder:
    """A `transformers.CLIPVisionModel` and the authors' preprocessing: start image → visual tokens.

    `encode(image)` takes [B, 3, H, W] in [-1, 1] (the start image as the world model sees it) and
    returns the penultimate hidden states [B, 1 + (S/P)², width] (ViT-H/14: [B, 257, 1280]) in float32.
    """

    def __init__(self, model: Any, source: str = ""):
        self.model = model.eval().requires_grad_(False)
        self.source = source

    @property
    def image_size(self) -> int:
        return int(self.model.config.image_size)

    @property
    def width(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def num_tokens(self) -> int:
        return 1 + (self.image_size // int(self.model.config.patch_size)) ** 2

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Tensor], source: str = "state dict", **config_overrides: Any):
        from transformers import CLIPVisionModel

        hf, layout = to_transformers_keys(sd)
        config = config_from_state_dict(hf, **config_overrides)
        with torch.device("meta"):
            model = CLIPVisionModel(config)
        tower = getattr(model, "vision_model", model)  # transformers 4 nests the tower; 5 does not
        expected = tower.state_dict()
        missing = sorted(set(expected) - set(hf))
        wrong = [k for k, v in expected.items() if k in hf and tuple(hf[k].shape) != tuple(v.shape)]
        if missing or wrong:
            raise CheckpointLayoutError(
                f"{source}: CLIP vision weights ({layout} layout) do not fit a {config.num_hidden_layers}-layer "
                f"width-{config.hidden_size} tower: missing {missing[:4]}, wrong shapes {wrong[:4]}"
            )
        model = model.to_empty(device="cpu")  # built on meta: no 600M-parameter random init
        tower.load_state_dict({k: hf[k].float() for k in expected}, strict=True)
        ids = getattr(tower.embeddings, "position_ids", None)  # a non-persistent buffer, not in the file
        if ids is not None:
            ids.copy_(torch.arange(ids.shape[-1]).expand_as(ids))
        log.info(
            "loaded CLIP vision from %s (%s layout, %d layers, width %d)",
            source,
            layout,
            config.num_hidden_layers,
            config.hidden_size,
        )
        return cls(model, f"{source} ({layout})")

    @classmethod
    def load(
        cls, path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, **overrides: Any
    ) -> CLIPVisionEncoder:
        """A `.safetensors` / `.pth` file in any supported layout, or a Hugging Face folder with config.json."""
        path = Path(path)
        if path.is_dir():
            from transformers import CLIPVisionModel

            if not (path / "config.json").is_file():
                raise MissingFileError(
                    f"'{path}' is a folder without config.json; give a CLIP vision file or HF folder"
                )
            encoder = cls(CLIPVisionModel.from_pretrained(str(path), torch_dtype=torch.float32), str(path))
        else:
            from ..tensors import read_state_dict  # safetensors, or torch.load(weights_only=True)

            encoder = cls.from_state_dict(read_state_dict(path), source=str(path), **overrides)
        encoder.model.to(device=device, dtype=dtype)
        return encoder

    @torch.no_grad()
    def encode(self, image: Tensor) -> Tensor:
        """[B, 3, H, W] in [-1, 1] → penultimate hidden states [B, tokens, width], float32."""
        pixels = clip_pixel_values(image, self.image_size).to(self.device, self.dtype)
        out = self.model(pixel_values=pixels, output_hidden_states=True)
        return out.hidden_states[-2].float()


def tokens_from_clip_vision_output(output: Any) -> Tensor:
    """The visual tokens in a ComfyUI `CLIP_VISION_OUTPUT`: its `penultimate_hidden_states` [B, 257, 1280]."""
    tokens = getattr(output, "penultimate_hidden_states", None)
    if tokens is None and isinstance(output, Mapping):
        tokens = output.get("penultimate_hidden_states")
    if not isinstance(tokens, Tensor) or tokens.ndim != 3:
        raise ConfigError(
            "this CLIP_VISION_OUTPUT has no penultimate_hidden_states [B, tokens, width]; encode the start image "
            "with CLIP Vision Encode on a ViT-H model (clip_vision_h.safetensors)"
        )
    return tokens.float()


__all__ = ["CLIPVisionEncoder", "clip_pixel_values", "to_transformers_keys", "tokens_from_clip_vision_output"]
