"""nodes/comfy_runtime's memory and device functions headless: no ComfyUI, so no-ops and the registry's device."""

from __future__ import annotations

from inferix_nodes import comfy_runtime as rt

from tests.fixture_utils import tiny_loader_inputs


def test_headless_memory_calls_are_no_ops_and_auto_stays_auto():
    assert rt.comfy_mm is None
    assert rt.device_choice("auto") == "auto" and rt.device_choice("cpu") == "cpu"
    rt.make_room(2**30, "auto")  # a loader's 'auto' device headless: nothing to free, no error
    rt.make_room(2**30, "cpu")


def test_headless_world_models_are_not_wrapped(node_classes, models_dir):
    (model,) = node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**tiny_loader_inputs(device="auto"))["result"]
    assert rt.model_patcher(model) is None
    rt.ensure_loaded(model, 2**30)  # no ComfyUI: nothing to load through
    assert rt.estimate_file_bytes(str(models_dir / "diffusion_models" / "causal_wan_tiny.safetensors"), None) > 0


def test_comfyui_lists_our_model_by_family_and_size_not_as_modulelist():
    """ComfyUI names a loaded model by its class (`/free`, the memory log): the container says what it is."""
    import torch

    from inferix_core.models.registry import load_world_model

    world = load_world_model("bundled", device="cpu")
    container = rt.model_container(world)
    name = type(container).__name__
    assert name != "ModuleList" and name.startswith(f"Inferix {world.family} ") and name[-1] in "MB", name
    assert isinstance(container, torch.nn.ModuleList) and len(container) >= 1
