"""Nodes run headless through the compat layer: a whole workflow on the tiny fixture model, on CPU."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from tests.fixture_utils import tiny_conditioning, tiny_loader_inputs

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows" / "api"
QUICKSTART_UI = next((WORKFLOWS.parents[1] / "example_workflows").glob("Inferix Quickstart*.json"))


class FixtureConditioning:
    """A V1 test node: a seeded random CONDITIONING for the tiny model (its text_dim from the fixture, 16 tokens)."""

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "run"
    CATEGORY = "test"

    @classmethod
    def INPUT_TYPES(cls):  # noqa: N802
        return {"required": {"seed": ("INT", {"default": 0, "min": 0, "max": 100})}}

    def run(self, seed):
        return ([[tiny_conditioning(seed), {}]],)


def tiny_workflow() -> dict:
    return {
        "1": {
            "class_type": "InferixLoadWorldModel",
            "inputs": tiny_loader_inputs(),
        },
        "2": {"class_type": "FixtureConditioning", "inputs": {"seed": 3}},
        "3": {
            "class_type": "InferixKVCacheConfig",
            "inputs": {
                "window_frames": 6,
                "sink_frames": 1,
                "page_frames": 0,
                "offload": "off",
                "gpu_budget_gb": 0.0,
                "quantization": "none",
            },
        },
        "4": {
            "class_type": "InferixBlockDenoise",
            "inputs": {
                "world_model": ["1", 0],
                "conditioning": ["2", 0],
                "kv_cache": ["3", 0],
                "prompt": "",
                "num_blocks": 3,
                "seconds": 0.0,
                "width": 96,
                "height": 64,
                "denoising_steps": "1000,750,500,250",
                "seed": 7,
                "stream": ["7", 0],
            },
        },
        "5": {
            "class_type": "InferixStreamOut",
            "inputs": {
                "video": ["4", 2],
                "fps": 16.0,
                "filename_prefix": "inferix/other",
                "save_frames": "none",
                "crf": 18,
            },
        },
        "6": {"class_type": "InferixProfileReport", "inputs": {"video": ["4", 2]}},
        "7": {
            "class_type": "InferixStreamSettings",
            "inputs": {"filename_prefix": "inferix/tiny", "fps": 0.0, "crf": 18, "save_frames": "png"},
        },
    }


def test_tiny_workflow_runs_headless(node_classes, models_dir, output_dir):
    from inferix_core.workflow import execute

    events = []
    from inferix_nodes import comfy_runtime

    remove = comfy_runtime.add_event_listener(lambda name, data: events.append((name, data)))
    try:
        result = execute(
            tiny_workflow(),
            {**node_classes, "FixtureConditioning": FixtureConditioning},
            output_dir=output_dir,
            progress=False,
        )
    finally:
        remove()
    latent, image, video, core, world = result.outputs["4"]
    assert world is None  # nothing reads the world_state output: not captured
    assert latent["samples"].shape == (1, 16, 9, 8, 12)  # [B, C, F, h, w]
    assert image.dtype == torch.float32 and image.shape[1:] == (64, 96, 3) and 0 <= image.min() <= image.max() <= 1
    assert len(video.frames) == image.shape[0]
    # the core VIDEO (last output) carries exactly these frames at the model's rate
    assert torch.equal(core.get_components().images, image) and core.get_components().frame_rate == video.fps
    assert core.get_dimensions() == (96, 64)
    mp4 = output_dir / "inferix" / "tiny_00001.mp4"
    assert video.files == (str(mp4.resolve()),)  # written by Block Denoise while it generated
    assert mp4.is_file() and not list(output_dir.rglob("*.partial*"))
    assert [p.name for p in output_dir.rglob("*.mp4")] == [mp4.name]  # Stream Out showed it, no re-encode
    assert "streamed to" in result.ui["4"]["text"][0] and "Memory plan" in result.ui["4"]["text"][0]
    assert result.ui["5"] == {
        "images": [{"filename": "tiny_00001.mp4", "subfolder": "inferix", "type": "output"}],
        "animated": [True],
    }
    assert len(list((output_dir / "inferix" / "tiny_00001").glob("*.png"))) == image.shape[0]
    assert "frames in" in result.outputs["6"][0]
    blocks = [d for name, d in events if name == "inferix.block"]
    assert [d["block"] for d in blocks] == [0, 1, 2] and blocks[0]["node"] == "4" and blocks[0]["preview"]
    # a second run never overwrites the first file
    execute(
        tiny_workflow(),
        {**node_classes, "FixtureConditioning": FixtureConditioning},
        output_dir=output_dir,
        progress=False,
    )
    assert (output_dir / "inferix" / "tiny_00002.mp4").is_file()


def test_block_denoise_never_mutates_inputs_and_repeats(node_classes, models_dir, output_dir):
    load = node_classes["InferixLoadWorldModel"]
    denoise = node_classes["InferixBlockDenoise"]
    (world_model,) = load().EXECUTE_NORMALIZED(**tiny_loader_inputs())["result"]
    cond = [[tiny_conditioning(1), {"keep": 1}]]
    kv = node_classes["InferixKVCacheConfig"]().EXECUTE_NORMALIZED(
        window_frames=6, sink_frames=1, page_frames=0, offload="off", gpu_budget_gb=0.0, quantization="none"
    )["result"][0]
    before = (
        copy.deepcopy(cond),
        kv,
        {k: v.clone() for k, v in world_model.transformer.state_dict().items()},
        world_model.sampling,
    )
    kwargs = dict(
        world_model=world_model,
        prompt="",
        num_blocks=2,
        seconds=0.0,
        width=96,
        height=64,
        denoising_steps="1000,500",
        seed=5,
        kv_cache=kv,
        conditioning=cond,
    )
    first = denoise().EXECUTE_NORMALIZED(**kwargs)["result"]
    second = denoise().EXECUTE_NORMALIZED(**kwargs)["result"]
    assert torch.equal(first[0]["samples"], second[0]["samples"])  # fresh cache every run
    assert torch.equal(cond[0][0], before[0][0][0]) and cond[0][1] == before[0][0][1]
    assert kv == before[1] and world_model.sampling == before[3]
    assert all(torch.equal(v, before[2][k]) for k, v in world_model.transformer.state_dict().items())


def test_prompt_schedule_past_the_end_fails_clearly(node_classes, models_dir, output_dir):
    from inferix_core.errors import ConfigError

    (world_model,) = node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**tiny_loader_inputs())["result"]
    (schedule,) = node_classes["InferixPromptSchedule"]().EXECUTE_NORMALIZED(schedule="0 | a\n60 | b")
    cond = tiny_conditioning(7)
    with pytest.raises(ConfigError, match="starts after the video ends"):
        node_classes["InferixBlockDenoise"]().EXECUTE_NORMALIZED(
            world_model=world_model,
            prompt="",
            num_blocks=1,
            seconds=0.0,
            width=96,
            height=64,
            denoising_steps="1000",
            seed=0,
            conditioning=[[cond, {}]],
            prompt_schedule=schedule,
        )


def test_quickstart_workflow_runs_headless(node_classes, output_dir):
    """The shipped quickstart, on the bundled model (its weights are in git: a missing file fails the test)."""
    from inferix_core.workflow import execute

    workflow = json.loads((WORKFLOWS / "quickstart_api.json").read_text())
    workflow["1"]["inputs"]["device"] = "cpu"
    result = execute(workflow, node_classes, output_dir=output_dir, progress=False)
    assert list(output_dir.rglob("quickstart_*.mp4"))
    assert result.outputs["3"][1].shape[0] > 0


@pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)  # torch._dynamo's import
def test_speed_options_reach_the_loaded_model(node_classes, models_dir):
    """fp8 swaps the block linears for FP8Linear, compile wraps each block; both default off when not given."""
    from inferix_core.models.fp8 import count_fp8_linears

    load = node_classes["InferixLoadWorldModel"]
    files = tiny_loader_inputs()
    plain = load().EXECUTE_NORMALIZED(**files)
    (model,) = plain["result"]
    assert count_fp8_linears(model.transformer) == 0
    assert all(block._compiled_call_impl is None for block in model.transformer.blocks)
    fast = load().EXECUTE_NORMALIZED(**files, fp8=True, compile=True)
    (model,) = fast["result"]
    assert count_fp8_linears(model.transformer) > 0 and "fp8:" in fast["ui"]["text"][0]
    # torch.compile is lazy: the blocks are wrapped here and compile on their first call
    assert all(block._compiled_call_impl is not None for block in model.transformer.blocks)


def test_workflow_saved_before_the_speed_options_still_runs(node_classes, output_dir, monkeypatch):
    """A quickstart saved without fp8/compile/family/weights/cuda_graphs (API and UI format) validates and runs
    with the defaults: fp8, compile and CUDA graphs off, family and weights auto."""
    from inferix_core.models import registry
    from inferix_core.workflow import execute, load_workflow, validate

    api = json.loads((WORKFLOWS / "quickstart_api.json").read_text())
    loader = api["1"]["inputs"]
    assert (loader.pop("weights"), loader.pop("family"), loader.pop("cuda_graphs")) == ("auto", "auto", False)
    assert (loader.pop("fp8"), loader.pop("compile")) == (False, False)
    ui = json.loads(QUICKSTART_UI.read_text())
    (ui_loader,) = [n for n in ui["nodes"] if n["type"] == "InferixLoadWorldModel"]
    # appended last: an old file is a prefix
    assert ui_loader["widgets_values"][-5:] == [False, False, "auto", "auto", False]
    ui_loader["widgets_values"] = ui_loader["widgets_values"][:-5]
    old_ui = load_workflow(ui, node_classes)
    assert {k: (v["class_type"], v["inputs"]) for k, v in old_ui.items()} == {
        k: (v["class_type"], v["inputs"]) for k, v in api.items()
    }
    validate(api, node_classes)

    calls = []
    real = registry.load_world_model
    monkeypatch.setattr(
        registry, "load_world_model", lambda path, options: calls.append(vars(options)) or real(path, options)
    )
    loader["device"] = "cpu"
    result = execute(api, node_classes, output_dir=output_dir, progress=False)
    assert [(kw["fp8"], kw["compile"], kw["family"], kw["weights"], kw["cuda_graphs"]) for kw in calls] == [
        (False, False, "auto", "auto", False)
    ]
    assert list(output_dir.rglob("quickstart_*.mp4")) and result.outputs["3"][1].shape[0] > 0
