"""The overlapped decoder returns the sequential streaming decode, block by block, in order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inferix_core.vae.overlap import OverlappedDecoder, to_uint8_frames
from tests.test_api import tiny_world


def _check(device: str):
    vae = tiny_world().vae.to(device)
    g = torch.Generator().manual_seed(5)
    blocks = [torch.randn(1, 16, n, 4, 6, generator=g).to(device) for n in (3, 2, 1, 3)]
    reference = vae.stream_decoder()
    expected = [to_uint8_frames(reference.decode(b)).cpu().numpy() for b in blocks]
    overlapped = OverlappedDecoder(vae.stream_decoder(), device)
    got = []
    for i, b in enumerate(blocks):
        overlapped.submit(i, b)
        got += overlapped.ready()
    got += overlapped.flush()
    assert [d.index for d in got] == [0, 1, 2, 3] and len(overlapped) == 0
    for d, e in zip(got, expected):
        assert d.frames.dtype == np.uint8 and d.frames.shape == e.shape and d.seconds >= 0
        assert np.array_equal(d.frames, e)


def test_cpu_overlap_equals_sequential_decode():
    _check("cpu")


@pytest.mark.cuda
def test_cuda_overlap_equals_sequential_decode():
    _check("cuda")
