"""bench/profile_vae_decode.py's conv accounting and its stacked-taps conv, on the CPU.

The decode profile rates each conv shape against its measured peak; its FLOPs come from the shapes the
`ConvRecorder` sees, so they must equal what torch's FlopCounterMode counts over the same decode (the
sub-pixel upsample's direct `F.conv2d` included), and every recorded output shape must be the one the conv
really returns. The stacked-taps formulation it measures must be conv3d's math (float64 closed check).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from bench.profile_vae_decode import ConvRecorder, stacked_time_taps_conv
from inferix_core.vae import VAEDecodeOptions, WanVAE, WanVAEConfig


def _decode_twice(vae: WanVAE, z: torch.Tensor) -> None:
    decoder = vae.stream_decoder()
    decoder.decode(z)
    decoder.decode(z.flip(2))


def test_recorded_conv_flops_equal_flop_counter():
    torch.manual_seed(0)
    vae = WanVAE(WanVAEConfig(dim=8)).double().eval()
    vae.decode_options = VAEDecodeOptions.fast()
    z = torch.randn(1, 16, 3, 4, 6, dtype=torch.float64)
    recorder = ConvRecorder()
    with torch.no_grad(), recorder:
        _decode_twice(vae, z)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        _decode_twice(vae, z)
    counted = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    assert recorder.calls, "no convolution recorded"
    assert sum(c.flops for c in recorder.calls) == counted["aten.convolution"]
    kinds = {len(c.weight) for c in recorder.calls}
    assert kinds == {4, 5}, f"both the 3-D convs and the sub-pixel conv2d are recorded, got {kinds}"
    assert any(c.channels_last for c in recorder.calls)


def test_recorded_output_shape_is_the_convs():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 6, 5, 7, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, 2, dtype=torch.float64)
    recorder = ConvRecorder()
    with recorder:
        y = F.conv3d(x, w, stride=(1, 2, 1), padding=(0, 1, 1))
    (shape,) = recorder.calls
    assert shape.output == tuple(y.shape)
    assert shape.gemm == (2 * y.shape[2] * y.shape[3] * y.shape[4], 3 * 3 * 3 * 2, 4)


def test_stacked_time_taps_conv_is_conv3d():
    torch.manual_seed(2)
    x = torch.randn(2, 5, 6, 7, 8, dtype=torch.float64)
    w = torch.randn(4, 5, 3, 3, 3, dtype=torch.float64)
    b = torch.randn(4, dtype=torch.float64)
    ref = F.conv3d(x, w, b, padding=(0, 1, 1))
    out = stacked_time_taps_conv(x, w, b, (0, 1, 1))
    assert out.shape == ref.shape
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_fused_pass_bytes_are_the_passes_operands():
    """The compiled passes' least traffic: every input once and the output once (the output measured here)."""
    from bench.profile_vae_decode import fused_pass_bytes
    from inferix_core.vae import layers

    torch.manual_seed(3)
    vae = WanVAE(WanVAEConfig(dim=8)).eval()
    vae.decode_options = VAEDecodeOptions(channels_last=True, fused_cache=True, compile=True)
    blocks = [torch.randn(1, 16, 3, 4, 6) for _ in range(2)]
    seen: dict[str, int] = {}

    def spy(name, fn, *args):
        out = fn(*args)
        # x and the history (gamma and bias are per channel); or h (read, then written as out) and the shortcut
        operands = [args[0], args[2]]
        nbytes = sum(t.numel() for t in [*operands, out]) * out.element_size()
        seen[name] = seen.get(name, 0) + nbytes
        assert torch.isfinite(out).all()
        return out

    counted = fused_pass_bytes(vae, blocks)
    real = layers._run_compiled
    layers._run_compiled = spy
    try:
        with torch.no_grad():
            decoder = vae.stream_decoder()
            for z in blocks:
                decoder.decode(z)
    finally:
        layers._run_compiled = real
    assert set(counted) == {"norm_silu_cat", "add_bias_residual_"}
    assert {k: b for k, (_, b) in counted.items()} == seen
