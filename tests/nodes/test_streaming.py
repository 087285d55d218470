"""Block Denoise streams its mp4 while generating: an interrupt keeps a playable file; budgets fail early."""

from __future__ import annotations

import av
import pytest
import torch

from inferix_core.errors import GenerationInterruptedError
from tests.fixture_utils import tiny_conditioning, tiny_loader_inputs

LOADER = tiny_loader_inputs()


@pytest.fixture
def world_model(node_classes, models_dir):
    (model,) = node_classes["InferixLoadWorldModel"]().EXECUTE_NORMALIZED(**LOADER)["result"]
    return model


def denoise_args(world_model, **extra):
    cond = [[tiny_conditioning(0), {}]]
    args = dict(
        world_model=world_model,
        prompt="",
        num_blocks=3,
        seconds=0.0,
        width=96,
        height=64,
        denoising_steps="1000",
        seed=1,
        conditioning=cond,
    )
    return {**args, **extra}


def stream_settings(node_classes, prefix="inferix/live"):
    (settings,) = node_classes["InferixStreamSettings"]().EXECUTE_NORMALIZED(
        filename_prefix=prefix, fps=0.0, crf=18, save_frames="none"
    )  # no ui: the V1 shim returns the tuple
    return settings


def decoded_frames(path) -> int:
    with av.open(str(path)) as f:
        return sum(1 for _ in f.decode(video=0))


def test_interrupt_keeps_a_playable_file_of_the_blocks_so_far(node_classes, world_model, output_dir):
    from inferix_nodes import comfy_runtime

    from inferix_core.workflow import progress

    def stop_after_first_block(name, data):
        if name == comfy_runtime.BLOCK_EVENT and data["block"] == 0:
            comfy_runtime.request_interrupt()

    remove = comfy_runtime.add_event_listener(stop_after_first_block)
    try:
        with pytest.raises(GenerationInterruptedError, match="interrupt"):
            node_classes["InferixBlockDenoise"]().EXECUTE_NORMALIZED(
                **denoise_args(world_model, stream=stream_settings(node_classes))
            )
    finally:
        remove()
        progress.clear_interrupt()
    [mp4] = output_dir.rglob("*.mp4")
    assert mp4.name == "live_00001.mp4" and ".partial" not in mp4.name
    block_frames = world_model.sampling.block_frames
    assert decoded_frames(mp4) == 1 + 4 * (block_frames - 1)  # block 0 only, and playable


def test_streamed_file_is_shown_by_stream_out_and_never_overwritten(node_classes, world_model, output_dir):
    stream = stream_settings(node_classes)
    video = node_classes["InferixBlockDenoise"]().EXECUTE_NORMALIZED(
        **denoise_args(world_model, num_blocks=1, stream=stream)
    )["result"][2]
    again = node_classes["InferixBlockDenoise"]().EXECUTE_NORMALIZED(
        **denoise_args(world_model, num_blocks=1, stream=stream)
    )["result"][2]
    names = sorted(p.name for p in output_dir.rglob("*.mp4"))
    assert names == ["live_00001.mp4", "live_00002.mp4"] and video.files != again.files
    out = node_classes["InferixStreamOut"]().EXECUTE_NORMALIZED(
        video=video, fps=16.0, filename_prefix="inferix/ignored", save_frames="none", crf=18
    )
    assert out["ui"]["images"] == [{"filename": "live_00001.mp4", "subfolder": "inferix", "type": "output"}]
    assert sorted(p.name for p in output_dir.rglob("*.mp4")) == names  # published as is, nothing encoded


def test_stream_out_encodes_plain_images(node_classes, output_dir):
    images = torch.rand(5, 32, 48, 3, generator=torch.Generator().manual_seed(0))
    out = node_classes["InferixStreamOut"]().EXECUTE_NORMALIZED(
        images=images, fps=8.0, filename_prefix="clips/img", save_frames="png", crf=18
    )
    [entry] = out["ui"]["images"]
    path = output_dir / entry["subfolder"] / entry["filename"]
    assert entry["filename"] == "img_00001.mp4" and decoded_frames(path) == 5
    assert len(list((output_dir / "clips" / "img_00001").glob("*.png"))) == 5


def test_over_budget_cache_fails_before_generating(node_classes, world_model, output_dir):
    from inferix_core.errors import CacheBudgetError

    (kv,) = node_classes["InferixKVCacheConfig"]().EXECUTE_NORMALIZED(
        window_frames=6, sink_frames=1, page_frames=0, offload="off", gpu_budget_gb=1e-6, quantization="none"
    )["result"]
    with pytest.raises(CacheBudgetError, match=r"KV cache needs .* but the budget"):
        node_classes["InferixBlockDenoise"]().EXECUTE_NORMALIZED(
            **denoise_args(world_model, kv_cache=kv, stream=stream_settings(node_classes))
        )
    assert not list(output_dir.rglob("*.mp4*"))  # refused before a sink was opened


def test_kv_cache_config_shows_the_memory_plan(node_classes, world_model):
    node = node_classes["InferixKVCacheConfig"]()
    args = dict(window_frames=6, sink_frames=1, page_frames=0, offload="off", quantization="none")
    text = node.EXECUTE_NORMALIZED(**args, gpu_budget_gb=0.0, world_model=world_model)["ui"]["text"][0]
    assert "Memory plan" in text and "fits its budget" in text and "832x480" in text
    tight = node.EXECUTE_NORMALIZED(**args, gpu_budget_gb=1e-6, world_model=world_model)["ui"]["text"][0]
    assert "does NOT fit" in tight and "KV cache needs" in tight
    alone = node.EXECUTE_NORMALIZED(**args, gpu_budget_gb=0.0)["ui"]["text"][0]
    assert "Memory plan" not in alone and "window: 6 latent frames" in alone


def test_vae_decode_node_equals_block_denoise_frames(node_classes, world_model, output_dir):
    latent, image, _, _, _ = node_classes["InferixBlockDenoise"]().EXECUTE_NORMALIZED(
        **denoise_args(world_model, num_blocks=2)
    )["result"]
    (decoded,) = node_classes["InferixVAEDecode"]().EXECUTE_NORMALIZED(
        world_model=world_model, latent=latent, block_frames=1, use_preview_decoder=False
    )
    assert decoded.shape == image.shape and (decoded - image).abs().max() <= 1 / 255 + 1e-6
