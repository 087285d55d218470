"""Text encoder placement on a GPU: 'offload' encodes on the device and leaves nothing resident there."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda
transformers = pytest.importorskip("transformers")


def test_offload_encodes_on_the_gpu_and_moves_back():
    from inferix_core.text import PlacedTextEncoder

    config = transformers.UMT5Config(vocab_size=64, d_model=256, d_kv=32, d_ff=512, num_layers=2, num_heads=8,
                                     feed_forward_proj="gated-gelu", is_encoder_decoder=False, use_cache=False)  # fmt: skip
    model = transformers.UMT5EncoderModel(config).eval()

    class Encoder:
        def __init__(self, m):
            self.model = m

        @property
        def device(self):
            return self.model.shared.weight.device

        def encode(self, prompts):
            ids = torch.arange(len(prompts) * 8, device=self.device).reshape(len(prompts), 8) % 64
            return self.model(input_ids=ids).last_hidden_state

    expected = Encoder(model).encode(["a", "b"])
    placed = PlacedTextEncoder(Encoder(model), "offload", "cuda")
    before = torch.cuda.memory_allocated()
    out = placed.encode(["a", "b"])
    assert out.device.type == "cuda" and placed.device.type == "cpu"
    torch.testing.assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-4)
    assert torch.cuda.memory_allocated() - before <= out.nbytes + 2**20  # only the embedding stays
