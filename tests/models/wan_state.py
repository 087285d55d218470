"""Random canonical Wan 2.1 state dicts for tests, written from the key table of fixtures README §1.2.

Deliberately independent of `expected_wan_shapes` in checkpoint.py, so each checks the other.
"""

from __future__ import annotations

import torch

from inferix_core.models.wan.config import WanConfig


def random_wan_state_dict(config: WanConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every transformer tensor of `config` (plus `action_embedding.*` when action_dim > 0), float32.

    Initialised like the fixtures: weights N(0, 1/fan_in), biases N(0, 0.1²), norm weights 1 + N(0, 0.2²),
    modulations N(0, 0.2²), so no tensor is zero or an identity and a mix-up of two keys shows.
    """
    g = torch.Generator().manual_seed(seed)
    d, f = config.dim, config.ffn_dim
    pt, ph, pw = config.patch_size
    sd: dict[str, torch.Tensor] = {}

    def linear(name: str, out_f: int, in_f: int) -> None:
        sd[f"{name}.weight"] = torch.randn(out_f, in_f, generator=g) / in_f**0.5
        sd[f"{name}.bias"] = torch.randn(out_f, generator=g) * 0.1

    def norm(name: str, bias: bool = False) -> None:
        sd[f"{name}.weight"] = 1 + torch.randn(d, generator=g) * 0.2
        if bias:
            sd[f"{name}.bias"] = torch.randn(d, generator=g) * 0.1

    fan_in = config.in_dim * pt * ph * pw
    sd["patch_embedding.weight"] = torch.randn(d, config.in_dim, pt, ph, pw, generator=g) / fan_in**0.5
    sd["patch_embedding.bias"] = torch.randn(d, generator=g) * 0.1
    linear("text_embedding.0", d, config.text_dim)
    linear("text_embedding.2", d, d)
    linear("time_embedding.0", d, config.freq_dim)
    linear("time_embedding.2", d, d)
    linear("time_projection.1", 6 * d, d)
    for i in range(config.num_layers):
        b = f"blocks.{i}"
        sd[f"{b}.modulation"] = torch.randn(1, 6, d, generator=g) * 0.2
        for attn in ("self_attn", "cross_attn"):
            for p in ("q", "k", "v", "o"):
                linear(f"{b}.{attn}.{p}", d, d)
            if config.qk_norm:
                norm(f"{b}.{attn}.norm_q")
                norm(f"{b}.{attn}.norm_k")
        if config.cross_attn_norm:
            norm(f"{b}.norm3", bias=True)
        linear(f"{b}.ffn.0", f, d)
        linear(f"{b}.ffn.2", d, f)
    sd["head.modulation"] = torch.randn(1, 2, d, generator=g) * 0.2
    linear("head.head", pt * ph * pw * config.out_dim, d)
    if config.action_dim:
        linear("action_embedding.0", d, config.action_dim)
        linear("action_embedding.2", d, d)
    return sd
