"""One rank of the sequence-parallel tests, launched by tests/parallel/test_ulysses.py as torchrun would.

The environment carries RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT. Results go to
`<out_dir>/rank<R>.pt` (tensors) so that every comparison happens in the pytest process.

    python tests/parallel/sp_worker.py MODE OUT_DIR
    MODE: all (exchange helpers, indivisible heads, then every fixture × cache kinds: one launch, since
          starting two ranks costs seconds), or fail (rank 1 raises inside fail_together while rank 0
          waits in a collective; the ranks die, so it is a launch of its own)
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from inferix_core import parallel  # noqa: E402
from inferix_core.errors import ConfigError  # noqa: E402

# cache kinds run under sequence parallelism (overrides of each fixture's window/sink config)
CACHE_KINDS = {
    "ring": {},
    "paged": {"page_frames": 2},
    "offload": {"offload": "always"},
    "int8": {"quantization": "int8"},
}


def run_parity(out: dict) -> None:
    from inferix_core.pipeline import BlockDiffusionPipeline, GenerationRequest
    from tests.fixture_utils import fixture_header, self_forcing_runs
    from tests.pipeline.test_parity import FixtureNoise, Recorder, build

    for path in self_forcing_runs():
        if fixture_header(path)[0]["config"]["num_heads"] % dist.get_world_size():  # refused, naming both
            _info, _t, model, sampling, cache_cfg = build(path)
            try:
                BlockDiffusionPipeline(model, sampling, cache_cfg)
            except ConfigError as exc:
                out[f"{path.name}/refused"] = str(exc)
            continue
        for kind, overrides in CACHE_KINDS.items():
            info, t, model, sampling, cache_cfg = build(path)
            p = info["pipeline"]
            b, _f, _c, h, w = p["latent_shape"]
            pipe = BlockDiffusionPipeline(model, sampling, dataclasses.replace(cache_cfg, **overrides))
            assert model.sequence_parallel is not None, "the pipeline did not enable sequence parallelism"
            rec = Recorder()
            req = GenerationRequest(
                num_blocks=p["num_blocks"],
                latent_height=h,
                latent_width=w,
                context=t["text_context"],
                batch_size=b,
                noise=FixtureNoise(t),
            )
            key = f"{path.name}/{kind}"
            out[key + "/latents"] = pipe.generate(req, rec)
            out[key + "/x0"] = torch.stack([rec.x0[k] for k in sorted(rec.x0)])
            out[key + "/cache_heads"] = torch.tensor(pipe.kv_cache.spec.num_heads)
            out[key + "/num_calls"] = torch.tensor(pipe.kv_cache.num_calls)


def run_masked(out: dict) -> None:
    """No KV cache, an explicit block-causal mask over the whole sequence (full-sequence runs)."""
    from inferix_core.models.wan.masks import block_causal_mask
    from tests.fixture_utils import self_forcing_runs
    from tests.pipeline.test_parity import build

    path = self_forcing_runs()[0]
    _info, t, model, sampling, _cache = build(path)
    x = t["noise"].permute(0, 2, 1, 3, 4)  # (B, C, F, H, W)
    frames = x.shape[2]
    ft = model.config.frame_tokens(x.shape[3], x.shape[4])
    mask = block_causal_mask(frames, ft, sampling.block_frames)
    timestep = torch.full((x.shape[0], frames), 500.0)
    with torch.no_grad():
        parallel.enable_sequence_parallel(model)
        split = model(x, timestep, t["text_context"], None, 0, attn_mask=mask)
        parallel.disable_sequence_parallel(model)
        whole = model(x, timestep, t["text_context"], None, 0, attn_mask=mask)
    out["masked_max_diff"] = (split - whole).abs().max()


def run_a2a(out: dict) -> None:
    from inferix_core.parallel.sp_transformer import SequenceParallel

    rank, n = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6 * n, 4 * n, 3, generator=g)  # (B, L, H, D), the same on every rank
    shard = x.chunk(n, dim=1)[rank]
    heads = parallel.seq_to_head(shard)
    out["seq_to_head_ok"] = torch.tensor(torch.equal(heads, x.chunk(n, dim=2)[rank]))
    out["head_to_seq_ok"] = torch.tensor(torch.equal(parallel.head_to_seq(heads), shard))
    # frame-interleaved layout with padding: 3 frames of 5 tokens (5 does not divide by 2)
    sp = SequenceParallel()
    f, hh, ww, c = 3, 1, 5, 8
    tokens = torch.randn(1, f * hh * ww, c, generator=g)
    freqs = torch.randn(f * hh * ww, 1, 2, 2, generator=g)  # (L, 1, pairs, cos/sin)
    local, local_freqs, _ = sp.shard(_NoBlocks(), tokens, freqs, (f, hh, ww))
    qkv = torch.randn(1, f * hh * ww, 2 * n, 4, generator=g)  # full (B, L, H, D)
    ftl = sp.local_frame_tokens(hh * ww)
    padded = torch.nn.functional.pad(qkv.view(1, f, hh * ww, 2 * n, 4), (0, 0, 0, 0, 0, ftl * n - hh * ww))
    mine = padded.view(1, f, n, ftl, 2 * n, 4)[:, :, rank].reshape(1, f * ftl, 2 * n, 4)
    exchanged = sp.to_heads(mine)
    out["to_heads_ok"] = torch.tensor(torch.equal(exchanged, qkv.chunk(n, dim=2)[rank]))
    back = sp.to_tokens(exchanged)
    real = torch.ones(1, f, n, ftl, 1, 1, dtype=torch.bool)
    real.view(1, f, n * ftl)[:, :, hh * ww :] = False
    real = real[:, :, rank].reshape(1, f * ftl, 1, 1)
    out["to_tokens_ok"] = torch.tensor(torch.equal(back * real, mine * real))
    gathered = sp.gather(local.unflatten(1, (f, -1)), (f, hh, ww))
    out["gather_ok"] = torch.tensor(torch.equal(gathered, tokens.unflatten(1, (f, -1))))
    out["local_freqs"] = local_freqs


class _NoBlocks:
    blocks = ()


def run_heads(out: dict) -> None:
    from inferix_core.models.wan.causal_transformer import CausalWanTransformer
    from inferix_core.models.wan.config import WanConfig

    model = CausalWanTransformer(
        WanConfig(dim=48, ffn_dim=64, freq_dim=32, text_dim=32, text_len=8, num_heads=3, num_layers=1)
    )
    try:
        parallel.enable_sequence_parallel(model)
    except ConfigError as exc:
        out["heads_message"] = str(exc)


def run_fail(out: dict) -> None:
    with parallel.fail_together(poll_s=0.1):
        if dist.get_rank() == 1:
            raise ConfigError("rank one broke on purpose")
        dist.barrier()  # rank 0 waits here for a rank that will never come


def main() -> int:
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    parallel.init_distributed("cpu")
    out: dict = {}
    steps = {"all": [run_a2a, run_heads, run_masked, run_parity], "fail": [run_fail]}[mode]
    for step in steps:
        step(out)
    torch.save(out, out_dir / f"rank{dist.get_rank()}.pt")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
