"""Each registered family samples as the authors' released inference configs say.

The values below are copied from the authors' own config files (repository, file), not from a fixture: a
fixture may be made with any settings (held-out sets vary steps, shifts, windows and block sizes on purpose),
so what the registry ships can only be checked against the released configs. The dictionaries use the keys of
a fixture's `info.pipeline` (the shared schema), so the same conversion the parity tests use
(`sampling_from_metadata`, `cache_from_metadata`) turns them into our configs.

Where the authors' pipeline rewrites its config before sampling, the table holds what it samples with:
CausVid's `wan_causal_dmd.yaml` lists `[1000, 757, 522, 0]` and its inference pipeline drops the trailing 0
(`causal_inference.py`: asserts it is 0, then `denoising_step_list[:-1]`); Krea's 14B server config lists the warped
values `[1000, 937, 833, 625, 0]` with warp false, the same timesteps as `[1000, 750, 500, 250, 0]` warped
with shift 5 (checked below through the scheduler, so the equivalence is computed, not assumed).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inferix_core.models.registry import get_family
from inferix_core.scheduler import FlowMatchScheduler
from tests.fixture_utils import cache_from_metadata, sampling_from_metadata

BASE = dict(num_train_timesteps=1000, context_noise=0, independent_first_frame=False, local_attn_size=-1, sink_size=0)
RELEASED = {
    # guandeh17/Self-Forcing configs/self_forcing_dmd.yaml
    "self_forcing": dict(
        denoising_step_list=[1000, 750, 500, 250], warp_denoising_step=True, timestep_shift=5.0, num_frame_per_block=3
    ),
    # tianweiy/CausVid configs/wan_causal_dmd.yaml (trailing 0 dropped by the pipeline, see above)
    "causvid": dict(
        denoising_step_list=[1000, 757, 522], warp_denoising_step=False, timestep_shift=8.0, num_frame_per_block=3
    ),
    # thu-ml/Causal-Forcing configs/causal_forcing_dmd_{chunkwise,framewise,framewise_2step,framewise_1step}.yaml
    "causal_forcing_chunkwise": dict(
        denoising_step_list=[1000, 750, 500, 250], warp_denoising_step=True, timestep_shift=5.0, num_frame_per_block=3
    ),
    "causal_forcing_framewise": dict(
        denoising_step_list=[1000, 750, 500, 250], warp_denoising_step=True, timestep_shift=5.0, num_frame_per_block=1
    ),
    "causal_forcing_framewise_2step": dict(
        denoising_step_list=[1000, 500],
        denoising_step_list_first_chunk=[1000, 750, 500, 250],
        warp_denoising_step=True,
        timestep_shift=5.0,
        num_frame_per_block=1,
    ),
    "causal_forcing_framewise_1step": dict(
        denoising_step_list=[1000],
        denoising_step_list_first_chunk=[1000, 750, 500, 250],
        warp_denoising_step=True,
        timestep_shift=5.0,
        num_frame_per_block=1,
    ),
    # Wan 2.1 I2V run causally by guandeh17/Self-Forcing's loop with configs/self_forcing_dmd.yaml (no authors'
    # causal Wan 2.1 I2V release; bench/fixtures/gen_wan_i2v.py's reference): global attention, no sink
    "wan21_i2v": dict(
        denoising_step_list=[1000, 750, 500, 250], warp_denoising_step=True, timestep_shift=5.0, num_frame_per_block=3
    ),
    # NVlabs/LongLive configs/longlive_inference.yaml (local_attn_size 12, sink_size 3 under model_kwargs)
    "longlive": dict(
        denoising_step_list=[1000, 750, 500, 250],
        warp_denoising_step=True,
        timestep_shift=5.0,
        num_frame_per_block=3,
        local_attn_size=12,
        sink_size=3,
    ),
    # SkyworkAI/Matrix-Game Matrix-Game-2 configs/inference_yaml/inference_universal.yaml and
    # configs/distilled_model/universal/config.json (local_attn_size 6, sink_size 0)
    "matrix_game2": dict(
        denoising_step_list=[1000, 666, 333],
        warp_denoising_step=True,
        timestep_shift=5.0,
        num_frame_per_block=3,
        local_attn_size=6,
    ),
}
# krea-ai/realtime-video configs/self_forcing_server_14b.yaml; its KV recompute window and first-frame policy
# are per session (release_server.GenerateParams), so they are not compared
KREA = dict(
    denoising_step_list=[1000, 937, 833, 625, 0], warp_denoising_step=False, timestep_shift=5.0, num_frame_per_block=3
)


@pytest.mark.parametrize("family", sorted(RELEASED))
def test_registry_ships_the_released_settings(family):
    p = BASE | RELEASED[family]
    fam = get_family(family)
    assert fam.sampling == sampling_from_metadata(p)
    assert fam.cache == cache_from_metadata(p)


def _timesteps(sampling) -> torch.Tensor:
    sch = FlowMatchScheduler(sampling.shift, sampling.num_train_timesteps)
    return sch.timesteps_for(list(sampling.denoising_steps), sampling.warp_denoising_steps)


def test_krea_samples_the_released_timesteps():
    fam, theirs = get_family("krea"), sampling_from_metadata(BASE | KREA)
    ours = dataclasses.replace(fam.sampling, kv_recompute_frames=0, keep_first_frame=True)
    # warped [1000, 750, 500, 250, 0] at shift 5 are the 14B config's listed values (to the integer it lists)
    torch.testing.assert_close(_timesteps(ours), _timesteps(theirs), atol=0.5, rtol=0)
    same = ("shift", "num_train_timesteps", "block_frames", "context_noise", "independent_first_frame")
    assert all(getattr(ours, k) == getattr(theirs, k) for k in same)
    assert fam.cache == cache_from_metadata(BASE | KREA)
