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
    before = _allocated_by_tensors()
    out = placed.encode(["a", "b"])
    assert out.device.type == "cuda" and placed.device.type == "cpu"
    torch.testing.assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-4)
    assert _allocated_by_tensors() - before <= out.nbytes + 2**20  # only the embedding stays


def _allocated_by_tensors() -> int:
    """Bytes allocated on the GPU by tensors, not by cuBLAS: the first GPU matmul makes cuBLAS(Lt) take a
    workspace from the caching allocator (32 MiB per handle and stream on Hopper) that stays for the process,
    which memory_allocated() counts. A warm-up matmul allocates it before the baseline, and the workspaces are
    released before each reading, so a real leak (weights or activations left behind) is all that remains."""
    a = torch.ones(64, 64, device="cuda")
    (a @ a).sum().item()  # the workspace exists before any reading, cleared or not
    del a
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    return torch.cuda.memory_allocated()
