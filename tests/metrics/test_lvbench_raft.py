"""Dynamic degree through RAFT: parity with VBench's `DynamicDegree` on a random torchvision RAFT-large
saved as the state-dict file the loader expects. Needs torchvision (ComfyUI has it; CI skips)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from inferix_core.errors import ShapeMismatchError
from inferix_core.metrics import resolve_backends, score_video
from inferix_core.metrics.lvbench import networks
from inferix_core.metrics.lvbench.base_metrics import top_flow_magnitude

optical_flow = pytest.importorskip("torchvision.models.optical_flow")

RAFT_FILE = "raft_large_C_T_V1-22a6c225.pth"
H, W = 126, 134  # not multiples of 8, so the InputPadder path runs (padded to 128 x 136)


@pytest.fixture(scope="module")
def raft_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random RAFT-large, its flow head scaled so its flow depends on the content near the threshold."""
    torch.manual_seed(0)
    model = optical_flow.raft_large(weights=None)
    with torch.no_grad():
        for p in model.update_block.flow_head.parameters():
            p.mul_(0.5)
    root = tmp_path_factory.mktemp("inferix_metrics")
    torch.save(model.state_dict(), root / RAFT_FILE)
    return root


def _vbench_pair_score(model: torch.nn.Module, a: np.ndarray, b: np.ndarray) -> float:
    """VBench dynamic_degree.py for one pair: InputPadder('sintel'), RAFT 20 iters, mean of the top 5% |flow|."""
    img1, img2 = (torch.from_numpy(f).permute(2, 0, 1).float()[None] for f in (a, b))  # 0..255, as get_frames
    ht, wd = img1.shape[-2:]
    pad_ht, pad_wd = (((ht // 8) + 1) * 8 - ht) % 8, (((wd // 8) + 1) * 8 - wd) % 8
    pad = [pad_wd // 2, pad_wd - pad_wd // 2, pad_ht // 2, pad_ht - pad_ht // 2]
    img1, img2 = F.pad(img1, pad, mode="replicate"), F.pad(img2, pad, mode="replicate")
    # VBench's RAFT normalises inside forward (2·x/255 − 1); torchvision's RAFT expects it done
    flow_up = model(2 * (img1 / 255.0) - 1, 2 * (img2 / 255.0) - 1, num_flow_updates=20)[-1]
    flo = flow_up[0].permute(1, 2, 0).numpy()
    rad = np.sqrt(np.square(flo[:, :, 0]) + np.square(flo[:, :, 1]))
    h, w = rad.shape
    cut_index = int(h * w * 0.05)
    return float(np.mean(abs(np.sort(-rad.flatten()))[:cut_index]))


def _vbench_check_move(scores: list[float], frames: list[np.ndarray], fps: float) -> float:
    """VBench set_params + check_move on precomputed pair scores."""
    factor = max(1.0, 8.0 / fps)
    thres = factor * 6.0 * (min(frames[0].shape[:2]) / 256.0)
    count_num = round(4 * (len(frames) / 16.0))
    count = 0
    for s in scores:
        if s > thres:
            count += 1
        if count >= count_num:
            return 1.0
    return 0.0


@pytest.fixture(scope="module")
def video() -> np.ndarray:
    """8 frames at 8 fps: 4 flat grey (RAFT's random flow stays under the threshold) then 4 black|white
    halves (over it), so the two chunks get different dynamic degrees."""
    grey = np.full((H, W, 3), 128, np.uint8)
    halves = np.zeros((H, W, 3), np.uint8)
    halves[:, W // 2 :] = 255
    return np.stack([grey] * 4 + [halves] * 4)


def _memo(flow):
    """RAFT once per distinct pair: the video has three (CPU RAFT is slow, the results are the same)."""
    cache: dict[bytes, np.ndarray] = {}

    def cached(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        key = a.tobytes() + b.tobytes()
        if key not in cache:
            cache[key] = flow(a, b)
        return cache[key]

    return cached


@pytest.fixture(scope="module")
def our_flow(raft_dir: Path):
    """The loader's own flow estimator (what resolve_backends builds), memoised per pair."""
    return _memo(networks.load_raft_flow(raft_dir / RAFT_FILE))


@pytest.fixture
def backends(our_flow, raft_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(networks, "load_raft_flow", lambda path, device="cpu": our_flow)
    out = resolve_backends(["dynamic"], raft_dir)
    assert not out["dynamic"].is_proxy
    return out


@pytest.fixture(scope="module")
def vbench_pair_scores(raft_dir: Path, video: np.ndarray) -> list[float]:
    model = optical_flow.raft_large(weights=None)
    model.load_state_dict(torch.load(raft_dir / RAFT_FILE, weights_only=True))
    model.eval()
    score = _memo(lambda a, b: np.float64(_vbench_pair_score(model, a, b)))
    with torch.no_grad():
        return [float(score(a, b)) for a, b in itertools.pairwise(video)]


def test_raft_flow_matches_vbench_padding_and_top5(
    our_flow, vbench_pair_scores: list[float], video: np.ndarray
) -> None:
    """The loader's flow is VBench's: same padding, input normalisation, 20 updates, top-5% statistic."""
    ours = [top_flow_magnitude(our_flow(a, b)) for a, b in itertools.pairwise(video)]
    np.testing.assert_allclose(ours, vbench_pair_scores, rtol=1e-4)


def test_dynamic_degree_matches_vbench_per_chunk(
    backends: dict, vbench_pair_scores: list[float], video: np.ndarray
) -> None:
    frames, s = list(video), vbench_pair_scores
    report = score_video(video, chunks=2, fps=8, backends=backends).metrics["dynamic"]
    expected = [_vbench_check_move(s[i * 4 : i * 4 + 3], frames[i * 4 : (i + 1) * 4], 8.0) for i in range(2)]
    assert expected == [0.0, 1.0], f"the fixture should straddle the threshold; pair scores {s}"
    assert report.chunk_scores == expected
    assert report.video_score == _vbench_check_move(s, frames, 8.0)
    # FramePack windows: 15% of 8 frames, at least the 2 frames the rule needs
    assert report.start_score == _vbench_check_move(s[:1], frames[:2], 8.0)
    assert report.end_score == _vbench_check_move(s[-1:], frames[-2:], 8.0)
    names = report.named_scores()
    assert "vde_dynamic" in names and not any(k.endswith("_proxy") for k in names)


def test_dynamic_degree_below_8_fps_raises_the_threshold(
    backends: dict, vbench_pair_scores: list[float], video: np.ndarray
) -> None:
    """At 4 fps VBench keeps every frame and scales the threshold by 8/4: the moving chunk stops moving."""
    frames, s = list(video), vbench_pair_scores
    report = score_video(video, chunks=2, fps=4, backends=backends).metrics["dynamic"]
    expected = [_vbench_check_move(s[i * 4 : i * 4 + 3], frames[i * 4 : (i + 1) * 4], 4.0) for i in range(2)]
    assert report.chunk_scores == expected == [0.0, 0.0]


def test_raft_rejects_frames_smaller_than_its_pyramid(raft_dir: Path) -> None:
    flow = networks.load_raft_flow(raft_dir / RAFT_FILE)
    small = np.zeros((64, 200, 3), np.uint8)
    with pytest.raises(ShapeMismatchError, match="at least 128"):
        flow(small, small)
