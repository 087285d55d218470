"""The tensors a WanConfig implies, and the WanConfig that a set of tensor shapes implies.

Pure shape bookkeeping (no file access, no tensors): checkpoint.py uses it to read the config from
weights and to list missing/unexpected tensors; tests and the registry can use it without loading.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from ...errors import CheckpointLayoutError, ConfigError
from .action_module import expected_action_shapes, infer_action_config
from .config import WanConfig

WAN_HEAD_DIM = 128  # every released Wan 2.1/2.2 transformer uses 128-dim heads (1.3B: 12 heads, 14B: 40)
_BLOCK_INDEX = re.compile(r"^blocks\.(\d+)\.")


def infer_wan_config(
    shapes: Mapping[str, Sequence[int]],
    num_heads: int | None = None,
    text_len: int = 512,
    eps: float = 1e-6,
) -> WanConfig:
    """Read a WanConfig from the canonical tensor shapes, the way comfy/model_detection.py reads Wan.

    num_heads cannot be recovered from shapes (q/k/v are [dim, dim] whatever the split), so it is the
    caller's `num_heads` if given, else dim / 128 (the Wan head size); a dim that is not a multiple of
    128 needs an explicit num_heads. text_len is not in the weights either (512 for umT5).
    """
    if "patch_embedding.weight" not in shapes:
        raise CheckpointLayoutError("no 'patch_embedding.weight' among the canonical keys")
    dim, in_dim, *patch = (int(s) for s in shapes["patch_embedding.weight"])
    if num_heads is None:
        if dim % WAN_HEAD_DIM:
            raise ConfigError(
                f"num_heads can't be read from the weights and dim={dim} is not a multiple of the Wan head "
                f"size {WAN_HEAD_DIM}; pass num_heads (or put the model's config.json next to the file)."
            )
        num_heads = dim // WAN_HEAD_DIM
    layers = {int(m.group(1)) for k in shapes if (m := _BLOCK_INDEX.match(k))}
    if layers != set(range(len(layers))):
        raise CheckpointLayoutError(f"transformer blocks are not numbered 0..N-1: found {sorted(layers)}")
    has_image = "img_emb.proj.0.weight" in shapes
    action = shapes.get("action_embedding.0.weight")
    game = infer_action_config(shapes, dim)  # Matrix-Game 2.0: image-only context + action modules
    try:
        return WanConfig(
            model_type=("flf2v" if "img_emb.emb_pos" in shapes else "i2v") if has_image else _t2v_kind(in_dim),
            patch_size=tuple(patch),
            text_len=text_len,
            in_dim=in_dim,
            dim=dim,
            ffn_dim=int(shapes["blocks.0.ffn.0.weight"][0]),
            freq_dim=int(shapes["time_embedding.0.weight"][1]),
            text_dim=int(shapes["text_embedding.0.weight"][1]) if game is None else 4096,  # unused by Matrix-Game
            out_dim=int(shapes["head.head.weight"][0]) // math.prod(patch),
            num_heads=num_heads,
            num_layers=len(layers),
            qk_norm="blocks.0.self_attn.norm_q.weight" in shapes,
            cross_attn_norm="blocks.0.norm3.weight" in shapes,
            eps=eps,
            action_dim=int(action[1]) if action is not None else 0,
            has_image_input=has_image and game is None,
            action_config=game,
            clip_dim=int(shapes["img_emb.proj.0.weight"][0]) if has_image else 1280,
        )
    except KeyError as e:
        raise CheckpointLayoutError(f"cannot read the config: tensor {e} is missing") from None


WAN22_LATENT_CHANNELS = 48  # the Wan 2.2 VAE's latent space (TI2V-5B); Wan 2.1 models take 16


def _t2v_kind(in_dim: int) -> str:
    """'ti2v' for a text model on Wan 2.2 latents (TI2V-5B: image start by a clean first latent), else 't2v'."""
    return "ti2v" if in_dim == WAN22_LATENT_CHANNELS else "t2v"


def expected_wan_shapes(config: WanConfig, clip_dim: int = 1280) -> dict[str, tuple[int, ...]]:
    """Every canonical tensor a model of `config` has, with its shape (fixtures README §1.2)."""
    d, f = config.dim, config.ffn_dim
    out = config.out_dim * math.prod(config.patch_size)
    lin = lambda name, o, i: {f"{name}.weight": (o, i), f"{name}.bias": (o,)}  # noqa: E731  [out, in]
    s: dict[str, tuple[int, ...]] = {
        "patch_embedding.weight": (d, config.in_dim, *config.patch_size),
        "patch_embedding.bias": (d,),
        **lin("time_embedding.0", d, config.freq_dim), **lin("time_embedding.2", d, d),
        **lin("time_projection.1", 6 * d, d),
        "head.modulation": (1, 2, d), **lin("head.head", out, d),
    }  # fmt: skip
    if not config.image_context:
        s.update(lin("text_embedding.0", d, config.text_dim) | lin("text_embedding.2", d, d))
    for i in range(config.num_layers):
        b = f"blocks.{i}"
        s[f"{b}.modulation"] = (1, 6, d)
        for attn in ("self_attn", "cross_attn"):
            for p in "qkvo":
                s.update(lin(f"{b}.{attn}.{p}", d, d))
            if config.qk_norm:
                s[f"{b}.{attn}.norm_q.weight"] = s[f"{b}.{attn}.norm_k.weight"] = (d,)
        if config.cross_attn_norm:
            s[f"{b}.norm3.weight"] = s[f"{b}.norm3.bias"] = (d,)
        s.update(lin(f"{b}.ffn.0", f, d) | lin(f"{b}.ffn.2", d, f))
        if config.has_image_input:
            s.update(lin(f"{b}.cross_attn.k_img", d, d) | lin(f"{b}.cross_attn.v_img", d, d))
            if config.qk_norm:
                s[f"{b}.cross_attn.norm_k_img.weight"] = (d,)
    if config.action_dim:
        s.update(lin("action_embedding.0", d, config.action_dim) | lin("action_embedding.2", d, d))
    if config.action_config is not None:
        for i in config.action_config.blocks:
            s.update(
                {f"blocks.{i}.action_model.{k}": v for k, v in expected_action_shapes(config.action_config, d).items()}
            )
    if config.has_image_input or config.image_context:
        s.update({"img_emb.proj.0.weight": (clip_dim,), "img_emb.proj.0.bias": (clip_dim,)})
        s.update(lin("img_emb.proj.1", clip_dim, clip_dim) | lin("img_emb.proj.3", d, clip_dim))
        s.update({"img_emb.proj.4.weight": (d,), "img_emb.proj.4.bias": (d,)})
        if config.model_type == "flf2v":
            s["img_emb.emb_pos"] = (1, 514, clip_dim)  # 2 images × 257 CLIP tokens
    return s


def check_wan_shapes(shapes: Mapping[str, Sequence[int]], config: WanConfig, source: str) -> None:
    """Raise CheckpointLayoutError listing missing, unexpected and wrongly shaped tensors."""
    clip = shapes.get("img_emb.proj.0.weight", (1280,))[0]
    expected = expected_wan_shapes(config, clip_dim=int(clip))
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = [f"{k} {list(shapes[k])} (expected {list(v)})" for k, v in expected.items()
             if k in shapes and tuple(shapes[k]) != v]  # fmt: skip
    if not (missing or unexpected or wrong):
        return
    parts = [f"{source} does not match the config read from it (dim={config.dim}, layers={config.num_layers})"]
    for label, items in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)):
        if items:
            parts.append(f"{label} ({len(items)}): " + ", ".join(items[:8]) + (", …" if len(items) > 8 else ""))
    raise CheckpointLayoutError("; ".join(parts) + ".")
