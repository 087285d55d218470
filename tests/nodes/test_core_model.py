"""nodes/core_model.refusals: what a core MODEL may carry besides weights. (Conversion: tests/integration.)

The MODEL here is a plain object with a ModelPatcher's attribute names, standing in for ComfyUI's patcher
in these pure-logic checks only; the real ModelPatcher runs in tests/integration/test_core_types.py.
"""

from __future__ import annotations

import pytest
from inferix_nodes.core_model import check_honourable, flow_shift, refusals

from inferix_core.errors import ConfigError


class WAN21_CausalAR:  # noqa: N801 - the class name is what refusals() reads
    diffusion_model = object()


class Patcher:
    def __init__(self, model=None, **attrs):
        self.model = model if model is not None else WAN21_CausalAR()
        self.model_options = {"transformer_options": {}}
        self.object_patches = {}
        self.wrappers = {"apply_model": {}}
        self.weight_wrapper_patches = {}
        self.hook_patches = {}
        self.injections = {}
        self.patches = {"diffusion_model.blocks.0.self_attn.q.weight": [("lora",)]}  # weight patches are fine
        self.__dict__.update(attrs)


def test_a_weights_only_model_is_accepted():
    assert refusals(Patcher()) == []
    check_honourable(Patcher())


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        ({"model_options": {"transformer_options": {"patches": {"attn1_patch": [print]}}}}, "change the forward"),
        ({"model_options": {"transformer_options": {"ar_config": {"initial_latent": 1}}}}, "start_frames"),
        ({"model_options": {"transformer_options": {}, "sampler_cfg_function": print}}, "sampler_cfg_function"),
        ({"object_patches": {"diffusion_model": object()}}, "object patch on 'diffusion_model'"),
        ({"wrappers": {"apply_model": {"compile": [print]}}}, "wrappers"),
        ({"hook_patches": {"hook": {"k": [1]}}}, "hook"),
    ],
)
def test_what_changes_the_forward_is_refused_with_its_name(attrs, reason):
    with pytest.raises(ConfigError, match="cannot run on the Inferix engine") as info:
        check_honourable(Patcher(**attrs))
    assert reason in str(info.value)


def test_other_model_classes_are_refused():
    class SDXL:
        diffusion_model = object()

    assert "not a Wan 2.1" in refusals(Patcher(model=SDXL()))[0]


def test_a_model_sampling_patch_gives_its_shift():
    class Flow:
        shift = 3.0

    assert flow_shift(Patcher(object_patches={"model_sampling": Flow()})) == 3.0
    assert refusals(Patcher(object_patches={"model_sampling": Flow()})) == []
    assert flow_shift(Patcher()) is None
    with pytest.raises(ConfigError, match="no flow shift"):
        flow_shift(Patcher(object_patches={"model_sampling": object()}))
