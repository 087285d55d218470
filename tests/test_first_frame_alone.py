"""A run's first frame reaches the sinks on its own, before the rest of its block (issue #19: first frame).

The stream decoders' outputs concatenate to the same frames for any chunking, so decoding the first latent
frame alone changes when the viewer sees frame 0, not what it sees.
"""

from __future__ import annotations

import numpy as np
import torch

from inferix_core.api import decode_to_sinks, generate_video, pixels_to_uint8
from inferix_core.profiling import NullProfiler
from inferix_core.vae.tiny_ae import TinyAEConfig, TinyCausalAE
from tests.test_api import tiny_world


class RecordingSink:
    def __init__(self):
        self.writes: list[tuple[int, np.ndarray]] = []

    def write(self, frames, block_index):
        self.writes.append((block_index, np.asarray(frames).copy()))

    def close(self):
        pass


def _tiny_ae() -> TinyCausalAE:
    torch.manual_seed(3)
    return TinyCausalAE(TinyAEConfig(latent_channels=16, num_res_blocks=1, pixel_channels=(8, 8))).eval()


def test_first_latent_frame_goes_to_the_sinks_alone_and_frames_are_unchanged():
    ae = _tiny_ae()
    latents = torch.randn(1, 3, 16, 3, 5)  # (B, n, C, h, w), a pipeline block
    whole = pixels_to_uint8(ae.stream_decoder().decode(latents.permute(0, 2, 1, 3, 4)))
    sink = RecordingSink()
    got = decode_to_sinks(ae.stream_decoder(), latents, 0, [sink], NullProfiler(), first_frame_alone=True)
    assert [len(f) for _, f in sink.writes] == [1, len(whole) - 1]  # frame 0 first, alone
    assert [i for i, _ in sink.writes] == [0, 0]
    assert got.frames.shape == whole.shape
    assert np.abs(got.frames.astype(int) - whole.astype(int)).max() <= 1  # rounding of equal floats

    later = RecordingSink()
    decode_to_sinks(ae.stream_decoder(), latents, 0, [later], NullProfiler())  # not a run's first block
    assert [len(f) for _, f in later.writes] == [len(whole)]


def test_generate_video_shows_the_first_frame_before_the_rest_of_block_0():
    wm = tiny_world()
    sink = RecordingSink()
    res = generate_video(wm, "", num_blocks=2, width=48, height=32, seed=4, sinks=[sink])
    sizes = [(i, len(f)) for i, f in sink.writes]
    assert sizes == [(0, 1), (0, 4), (1, 8)]  # block 0 (2 latent frames): 1, then 4; block 1: 8 in one write
    full = pixels_to_uint8(wm.vae.decode(res.latents.permute(0, 2, 1, 3, 4)))
    assert np.abs(np.concatenate([f for _, f in sink.writes]).astype(int) - full.astype(int)).max() <= 1


def test_interactive_session_shows_its_first_frame_alone():
    from inferix_core.clients.session import InteractiveSession

    sink = RecordingSink()
    session = InteractiveSession(tiny_world(), width=48, height=32, seed=5, sinks=[sink])
    try:
        session.step()
        session.step()
    finally:
        session.close()
    assert [(i, len(f)) for i, f in sink.writes] == [(0, 1), (0, 4), (1, 8)]


def test_a_stream_that_goes_on_decodes_its_block_whole():
    """A resumed world's decoder has decoded before: its first block is not split, so its frames are bitwise
    those of the uninterrupted run."""
    ae = _tiny_ae()
    stream = ae.stream_decoder()
    stream.decode(torch.randn(1, 16, 3, 3, 5))  # the saved past
    sink = RecordingSink()
    decode_to_sinks(stream, torch.randn(1, 3, 16, 3, 5), 1, [sink], NullProfiler(), first_frame_alone=True)
    assert [len(f) for _, f in sink.writes] == [12]
