"""validate_inputs turns bad constants into messages that say what to change."""

from __future__ import annotations

import pytest


def validate(node_classes, node_id, **inputs):
    return node_classes[node_id].VALIDATE_INPUTS(**inputs)


def test_resolution_must_divide_by_16(node_classes):
    # checked when the node runs (a validator names one input: ComfyUI repeats its message on each it names)
    from inferix_nodes.block_denoise import size_problem

    msg = size_problem(830, 480)
    assert "width must be a multiple of 16" in msg and "832" in msg
    assert "height" in size_problem(832, 8)
    assert size_problem(832, 480) is None
    sizes = node_classes["InferixBlockDenoise"].INPUT_TYPES()["required"]
    assert (sizes["width"][1]["min"], sizes["width"][1]["max"]) == (16, 4096)  # ComfyUI's own check, on the input


def test_blocks_out_of_range(node_classes):
    from inferix_nodes.block_denoise import MAX_BLOCKS, size_problem

    assert "num_blocks must be between 1 and" in size_problem(832, 480, num_blocks=0)
    assert "num_blocks" in size_problem(832, 480, num_blocks=100000)
    spec = node_classes["InferixBlockDenoise"].INPUT_TYPES()["required"]["num_blocks"][1]
    assert (spec["min"], spec["max"]) == (1, MAX_BLOCKS)


def test_denoising_steps_text(node_classes):
    assert "comma-separated integers" in validate(node_classes, "InferixBlockDenoise", denoising_steps="1000,abc")
    assert "decrease" in validate(node_classes, "InferixBlockDenoise", denoising_steps="250,500")
    assert "1..1000" in validate(node_classes, "InferixBlockDenoise", denoising_steps="2000,750")
    assert validate(node_classes, "InferixBlockDenoise", denoising_steps="") is True


def test_linked_inputs_arrive_as_none_and_pass(node_classes):
    """ComfyUI passes None for inputs that are links at validation time."""
    for node_id, cls in node_classes.items():
        if hasattr(cls, "VALIDATE_INPUTS"):
            assert cls.VALIDATE_INPUTS() is True, node_id


def test_missing_model_file(node_classes, models_dir):
    from inferix_nodes.load_world_model import missing_files

    msg = missing_files(model="nope.safetensors")
    assert "model 'nope.safetensors' (models/diffusion_models/)" in msg
    assert missing_files(model="causal_wan_tiny.safetensors", vae="wan_vae_tiny.safetensors") is None
    assert "causal_wan_tiny.safetensors" in node_classes["InferixLoadWorldModel"].INPUT_TYPES()["required"]["model"][0]


def test_cache_sink_must_fit_window(node_classes):
    from inferix_core.errors import ConfigError

    cls = node_classes["InferixKVCacheConfig"]
    with pytest.raises(ConfigError, match=r"sink_frames \(6\) must be smaller than window_frames \(6\)"):
        cls.execute(
            window_frames=6, sink_frames=6, page_frames=0, offload="off", gpu_budget_gb=0.0, quantization="none"
        )
    assert "window_frames must be -1" in validate(node_classes, "InferixKVCacheConfig", window_frames=0)


def test_prompt_schedule_text(node_classes):
    check = node_classes["InferixPromptSchedule"].VALIDATE_INPUTS
    assert check(schedule="0 | a red car\n00:05 | a blue car") is True
    assert "not after the previous line" in check(schedule="0 | a\n5 | b\n3 | c")
    assert "must start at 0" in check(schedule="2 | a")
    assert "line 2" in check(schedule="0 | a\nno time here")


def test_stream_out_prefix_stays_in_output(node_classes, output_dir):
    assert "outside the output folder" in validate(node_classes, "InferixStreamOut", filename_prefix="../../etc/x")
    assert validate(node_classes, "InferixStreamOut", filename_prefix="inferix/video") is True
    assert "outside the output folder" in validate(node_classes, "InferixStreamSettings", filename_prefix="../x")
    assert "empty" in validate(node_classes, "InferixStreamSettings", filename_prefix=" ")
    assert validate(node_classes, "InferixStreamSettings", filename_prefix="inferix/video") is True
