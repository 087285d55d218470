"""Wan VAE streamed decode: whole 3-latent blocks vs one latent frame at a time (speed vs working set).

Random dim-96 weights, bf16, `VAEDecodeOptions.fast()`, 480×832, 7 blocks of 3 latent frames; the
median of the 6 later blocks (CUDA events) and the decode's working set (peak allocated above what was
allocated before). The whole-block run is repeated last, so autotuning in the first run biases nothing.

    PYTHONPATH=. python3 bench/bench_vae_slices.py
"""

from __future__ import annotations

import torch

from inferix_core.vae import WanVAE, WanVAEConfig
from inferix_core.vae.config import VAEDecodeOptions


def main() -> None:
    torch.manual_seed(0)
    with torch.device("cuda"):
        vae = WanVAE(WanVAEConfig(dim=96)).to(torch.bfloat16).eval().requires_grad_(False)
    vae.decode_options = VAEDecodeOptions.fast()
    z = torch.randn(1, 16, 21, 60, 104, device="cuda", dtype=torch.bfloat16)
    for step in (None, 1, None):
        decoder = vae.stream_decoder(latent_frames_per_step=step)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        times = []
        with torch.no_grad():
            for b in range(7):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = decoder.decode(z[:, :, 3 * b : 3 * b + 3])
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
        working = (torch.cuda.max_memory_allocated() - base) / 2**30
        print(
            f"latent_frames_per_step={step}: later blocks median {sorted(times[1:])[3]:.1f} ms, "
            f"first {times[0]:.1f} ms, decode working set {working:.2f} GiB, out {tuple(out.shape)}"
        )


if __name__ == "__main__":
    main()
