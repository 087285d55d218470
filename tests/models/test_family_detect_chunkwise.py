"""A chunk-wise config beside the weights is no evidence of a frame-wise family (issue #43, section 7).

Causal-Forcing's frame-wise families are told by `num_frame_per_block: 1`; a Self-Forcing-style config with
3-frame blocks and a 2-step list must not be read as one, with or without `denoising_step_list_first_chunk`.
This kills the surviving mutation `num_frame_per_block == 1` -> `>= 1` in `family_detect`: the mutant names
`causal_forcing_framewise_2step` for the file with the first-chunk list.
"""

from __future__ import annotations

import pytest
import torch

from inferix_core.models.registry import load_world_model
from inferix_core.models.wan.config import WanConfig
from tests.models.wan_state import random_wan_state_dict

CFG = WanConfig(
    dim=128, ffn_dim=64, freq_dim=16, text_dim=8, num_heads=1, num_layers=2
)  # .pt files carry no head count: dim/128


@pytest.mark.parametrize("first_chunk", [False, True], ids=["plain", "with_first_chunk"])
def test_a_chunkwise_config_is_no_framewise_evidence(tmp_path, first_chunk):
    d = tmp_path / "downloads" / "files"  # no family word in any path the rules can see
    d.mkdir(parents=True)
    torch.save(
        {name: {"model." + k: v for k, v in random_wan_state_dict(CFG, seed=i + 1).items()}
         for i, name in enumerate(("generator", "critic", "generator_ema"))},
        d / "model.pt",
    )  # fmt: skip
    text = "denoising_step_list: [1000, 500]\nnum_frame_per_block: 3\n"
    if first_chunk:
        text += "denoising_step_list_first_chunk: [1000, 750, 500, 250]\n"
    (d / "inference.yaml").write_text(text)
    wm = load_world_model(str(d / "model.pt"), device="cpu")
    assert wm.family == "self_forcing", wm.family_reason
    assert wm.sampling.block_frames == 3
