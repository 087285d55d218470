"""Block Denoise's start-image inputs: a core CLIP_VISION becomes the transformers encoder; other models refuse an image."""

from __future__ import annotations

import pytest
import torch

from tests.fixture_utils import tiny_loader_inputs


class CoreClipVisionStandIn:
    """What ComfyUI's Load CLIP Vision hands over, as far as we use it: `get_sd()` in transformers names."""

    def __init__(self, model):
        self._sd = model.state_dict()

    def get_sd(self):
        return dict(self._sd)


def test_core_clip_vision_runs_through_transformers_with_the_authors_preprocessing():
    from inferix_nodes.block_denoise import image_clip_vision
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    from inferix_core.vision import CLIPVisionEncoder, clip_pixel_values

    torch.manual_seed(0)
    config = CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=1,
                              image_size=28, patch_size=14, projection_dim=8, hidden_act="gelu")  # fmt: skip
    hf = CLIPVisionModelWithProjection(config).eval()
    encoder = image_clip_vision(CoreClipVisionStandIn(hf), None)
    assert isinstance(encoder, CLIPVisionEncoder)
    image = torch.rand(1, 3, 22, 40) * 2 - 1
    with torch.no_grad():
        expected = hf(pixel_values=clip_pixel_values(image, 28), output_hidden_states=True).hidden_states[-2]
    torch.testing.assert_close(encoder.encode(image), expected, atol=1e-5, rtol=1e-5)
    output = type("Output", (), {"penultimate_hidden_states": torch.ones(1, 5, 64)})()
    assert image_clip_vision(CoreClipVisionStandIn(hf), output) is output  # CLIP_VISION_OUTPUT wins


def test_block_denoise_refuses_an_image_for_a_text_model(node_classes, models_dir, output_dir):
    from inferix_core.errors import InferixError
    from inferix_core.workflow import execute

    workflow = {
        "1": {"class_type": "InferixLoadWorldModel", "inputs": tiny_loader_inputs()},
        "2": {"class_type": "InferixBlockDenoise", "inputs": {
            "world_model": ["1", 0], "prompt": "", "num_blocks": 1, "seconds": 0.0, "width": 48, "height": 32,
            "denoising_steps": "", "seed": 0, "start_image": ["3", 0]}},
        "3": {"class_type": "TestImage", "inputs": {}},
        "4": {"class_type": "InferixStreamOut", "inputs": {"video": ["2", 2], "fps": 16.0,
              "filename_prefix": "inferix/x", "save_frames": "none", "crf": 18}},
    }  # fmt: skip

    class TestImage:
        RETURN_TYPES = ("IMAGE",)
        FUNCTION = "run"

        @classmethod
        def INPUT_TYPES(cls):  # noqa: N802
            return {"required": {}}

        def run(self):
            return (torch.rand(1, 32, 48, 3),)

    with pytest.raises(InferixError, match="this model takes no image"):
        execute(workflow, {**node_classes, "TestImage": TestImage}, output_dir=output_dir, progress=False)
