"""The bundled model's sampling and training-cache settings, shared by the trainer (train_bundled.py), the fidelity
probe (probe.py) and the benchmarks, so neither script imports the other."""

SAMPLING = {
    "denoising_steps": [1000, 750, 500, 250],
    "warp_denoising_steps": True,
    "shift": 5.0,
    "num_train_timesteps": 1000,
    "block_frames": 3,
    "context_noise": 0,
}
# Training (teacher forcing and the rollout phase) uses a window only, no sink frames: a sink's RoPE
# distance to the current block grows without bound over a 5-minute rollout, far past anything a clip shows.
CACHE = {"window_frames": 12, "sink_frames": 0}
