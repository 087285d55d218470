"""Clarity through MUSIQ: parity with VBench `imaging_quality.py` (longer side ≤ 512, /255, pyiqa's MUSIQ,
/100) on a random MUSIQ saved as the checkpoint file the loader expects. Needs pyiqa (CI skips)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from inferix_core.metrics import resolve_backends, score_video

from .videos import texture

musiq_arch = pytest.importorskip("pyiqa.archs.musiq_arch")
transforms = pytest.importorskip("torchvision.transforms")

MUSIQ_FILE = "musiq_spaq_ckpt-358bb6af.pth"


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised MUSIQ (SPAQ's architecture: one output, no softmax) as a plain state dict."""
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("inferix_metrics")
    torch.save(musiq_arch.MUSIQ(pretrained=False).state_dict(), root / MUSIQ_FILE)
    return root


def _vbench_transform(images: torch.Tensor) -> torch.Tensor:
    """VBench imaging_quality.transform(images, 'longer') on float 0..255 frames (T, 3, H, W)."""
    _, _, h, w = images.size()
    if max(h, w) > 512:
        scale = 512.0 / max(h, w)
        images = transforms.Resize(size=(int(scale * h), int(scale * w)), antialias=False)(images)
    return images / 255.0


@torch.no_grad()
def _vbench_frame_scores(path: Path, video: np.ndarray) -> list[float]:
    """VBench technical_quality: MUSIQ(pretrained_model_path=…), training=False, one frame at a time."""
    model = musiq_arch.MUSIQ(pretrained_model_path=str(path))
    model.training = False
    images = _vbench_transform(torch.from_numpy(video).permute(0, 3, 1, 2).float())
    return [float(model(images[i].unsqueeze(0))) for i in range(len(images))]


@pytest.mark.parametrize(("h", "w"), [(300, 800), (72, 104)], ids=["resized_to_512", "kept"])
def test_clarity_matches_vbench_imaging_quality(weights_dir: Path, h: int, w: int) -> None:
    rng = np.random.default_rng(h)
    video = np.stack([texture(rng, h, w, cell=2 + t) for t in range(4)])  # 4 different frames
    per_frame = _vbench_frame_scores(weights_dir / MUSIQ_FILE, video)
    assert len(set(per_frame)) > 1, "a random MUSIQ should still score different frames differently"

    backends = resolve_backends(["clarity"], weights_dir)
    assert not backends["clarity"].is_proxy and "MUSIQ" in backends["clarity"].description
    report = score_video(video, chunks=2, backends=backends).metrics["clarity"]
    expected = [np.mean(per_frame[:2]) / 100, np.mean(per_frame[2:]) / 100]
    np.testing.assert_allclose(report.chunk_scores, expected, rtol=1e-5)
    assert report.video_score == pytest.approx(np.mean(per_frame) / 100, rel=1e-5)  # VBench's video score
    names = report.named_scores()
    assert "vde_clarity" in names and "vbench_imaging_quality" in names
