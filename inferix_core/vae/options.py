"""How the Wan VAE decoder runs (`VAEDecodeOptions`) and how a streamed decode splits a block (`DecodeSlicing`).

The lowest module of `vae/`: the decoder's layers, its memory count and the planner read these; it imports no
other module of the package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VAEDecodeOptions:
    """How the Wan VAE decoder runs; every option gives the reference decode up to floating-point rounding.

    All off is the reference code path (the baseline of bench/bench_vae_speed.py). Each option is
    checked against it on CPU in fp32 to 1e-5 and on CUDA in bf16 (tests/vae/test_decode_options.py);
    none changes the model, the cache semantics or the frames returned, only speed and rounding.

    Attributes:
        channels_last: activations in `torch.channels_last_3d` (NDHWC), the layout cuDNN's tensor-core
            kernels use natively; the decoder's conv weights are converted in place on first use (the
            module's parameters then stay NDHWC; `state_dict()` tensors need `.contiguous()` to be saved).
        cudnn_benchmark: autotune the cuDNN conv algorithms; set only for the duration of each decode
            and restored afterwards (the transformer's own convs/attention are not affected).
        fused_cache: norm + SiLU are written straight into the causal conv's padded input buffer
            (cached frames in front) instead of norm → SiLU → `torch.cat`; the residual add is in place
            and the temporal upsample interleaves frames with one copy. Saves ~2 full-activation passes
            per conv.
        subpixel_upsample: nearest 2x upsample + 3x3 conv computed as one 2x2 conv with 4x the output
            channels on the low-resolution input, then a pixel shuffle: 16 instead of 36 MACs per output
            pixel and channel, and the 4x upsampled input is never materialised. The 2x2 weights are sums
            of the 3x3 ones (computed in fp32, rounded once to the weight dtype).
        compile: `torch.compile` the norm + SiLU + padding step (one fused kernel instead of several
            passes); implies the buffer layout of `fused_cache`. First calls compile (seconds).
    """

    channels_last: bool = False
    cudnn_benchmark: bool = False
    fused_cache: bool = False
    subpixel_upsample: bool = False
    compile: bool = False

    @classmethod
    def fast(cls, compile: bool = False) -> VAEDecodeOptions:
        """Every option that needs no compiler (plus `compile` when asked)."""
        return cls(channels_last=True, cudnn_benchmark=True, fused_cache=True, subpixel_upsample=True, compile=compile)

    @property
    def fused(self) -> bool:
        """Whether the pre-conv norm + SiLU write into the padded conv buffer (eager or compiled)."""
        return self.fused_cache or self.compile

    @property
    def is_reference(self) -> bool:
        return self == VAEDecodeOptions()


@dataclass(frozen=True)
class DecodeSlicing:
    """How a streamed decode splits a block; every choice gives the same frames (the causal caches).

    Attributes:
        latent_frames_per_step: latent frames per decoder call; None = the whole block in one call.
        release_previous_state: advance the stream's causal caches in place, so each layer's previous
            entry is freed as soon as its replacement exists, instead of keeping the whole previous
            state until the block is done (which lets a failed decode leave the stream untouched).
        row_bands: each decoder call's stages after the middle block run in this many row bands with a
            halo (vae/row_bands.py); 1 = whole frames.
    """

    latent_frames_per_step: int | None = None
    release_previous_state: bool = False
    row_bands: int = 1

    def frames_per_call(self, block_frames: int) -> int:
        step = self.latent_frames_per_step
        return block_frames if step is None else max(1, min(block_frames, step))

    def describe(self, block_frames: int) -> str:
        f = self.frames_per_call(block_frames)
        calls = "whole block per decoder call" if f == block_frames else f"{f} latent frame{'s' * (f > 1)} per call"
        bands = f", {self.row_bands} row bands" if self.row_bands > 1 else ""
        return calls + bands + (", previous state released" if self.release_previous_state else "")


# Fastest first; the planner takes the first whose working set fits. Releasing the previous state costs
# nothing; one latent frame per call costs ~7 % of the decode time on an H200 (docs/performance.md); row
# bands recompute their halos (at 480×832, 2 / 4 / 8 bands: 1.08 / 1.25 / 1.58 × the rows of the banded stages).
ROW_BANDS: tuple[int, ...] = (2, 4, 8)
# What the loader gives a Wan 2.1 VAE on CUDA (`models.registry.loader_vae_stream_slicing`): one latent frame per decoder call, the
# previous state released. Measured end to end (H200, 81 frames at 480×832, compiled, commit 7c93f16): 3.098 s
# and a 11.88 GiB peak, against 3.069 s and 15.63 GiB whole blocks; the reference pipeline peaks at 13.12.
CUDA_STREAM_SLICING = DecodeSlicing(1, release_previous_state=True)
# On CUDA without channels_last (cuDNN's NDHWC copies; not the loader's default there) the peak leaves the banded
# stages after 4 bands: 8 measured 2.75 GiB against 2.80 at 4 (H200, 480×832, bf16), so 8 bands are not offered.
NDHWC_COPY_MAX_ROW_BANDS = 4
DECODE_SLICINGS: tuple[DecodeSlicing, ...] = (
    DecodeSlicing(),
    DecodeSlicing(release_previous_state=True),
    DecodeSlicing(1, release_previous_state=True),
    *(DecodeSlicing(1, release_previous_state=True, row_bands=n) for n in ROW_BANDS),
)
