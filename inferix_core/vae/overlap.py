"""Decode block n on a side CUDA stream while block n+1 denoises.

The streaming decoder keeps its causal cache between blocks, so blocks must be decoded in order; they
need not be decoded on the denoising stream. `OverlappedDecoder.submit` queues a block's decode (and the
uint8 conversion and a pinned device→host copy) on a side stream and returns at once; `ready()` hands
back the blocks whose frames have arrived, in order. On the CPU there are no streams and a block is
decoded when it is submitted, so results are identical either way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class DecodedBlock:
    index: int
    frames: np.ndarray  # (T, H, W, 3) uint8 of batch item 0
    seconds: float  # decode time (CUDA events on GPU, wall clock on CPU)


def to_uint8_frames(pixels: torch.Tensor) -> torch.Tensor:
    """(B, 3, T, H, W) in [-1, 1] → (T, H, W, 3) uint8 of batch item 0, on the pixels' device."""
    x = ((pixels[0].float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.permute(1, 2, 3, 0).contiguous()


class OverlappedDecoder:
    """Wraps a stream decoder (`decode(latents (B, C, f, h, w)) -> pixels (B, 3, T, H, W)`)."""

    def __init__(self, stream_decoder, device: torch.device | str):
        self.decoder = stream_decoder
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self._pending: deque = deque()

    def submit(self, index: int, latents: torch.Tensor) -> None:
        """Queue the decode of one block (latents (B, C, f, h, w)); returns without waiting on the GPU."""
        if not self.cuda:
            import time

            t0 = time.perf_counter()
            frames = to_uint8_frames(self.decoder.decode(latents)).numpy()
            self._pending.append((index, frames, None, None, time.perf_counter() - t0))
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.device))  # the block's latents are written
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record()
            frames = to_uint8_frames(self.decoder.decode(latents))
            host = torch.empty(frames.shape, dtype=torch.uint8, pin_memory=True)
            host.copy_(frames, non_blocking=True)
            end.record()
        latents.record_stream(self.stream)  # the allocator must not reuse it before the side stream is done
        self._pending.append((index, host, start, end, None))

    def ready(self, wait: bool = False) -> list[DecodedBlock]:
        """Blocks whose frames are on the host, oldest first; `wait=True` waits for all of them."""
        out = []
        while self._pending:
            index, frames, start, end, seconds = self._pending[0]
            if end is not None:
                if not wait and not end.query():
                    break
                end.synchronize()
                frames, seconds = frames.numpy(), start.elapsed_time(end) / 1000
            out.append(DecodedBlock(index, frames, seconds))
            self._pending.popleft()
        return out

    def flush(self) -> list[DecodedBlock]:
        return self.ready(wait=True)

    def __len__(self) -> int:
        return len(self._pending)
