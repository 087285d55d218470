"""Parity of the network-backed metrics with the VBench formulas, on tiny random networks saved in the
layouts users supply, and the messages when a file is missing."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection, ViTConfig, ViTModel

from inferix_core.errors import BackendUnavailableError, CheckpointLayoutError, MissingFileError
from inferix_core.metrics import resolve_backends, score_video
from inferix_core.metrics.lvbench import networks

from .videos import noisy, texture

CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
NET_MEAN, NET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random CLIP (both sizes), DINO-style ViT and aesthetic head under the expected names."""
    root = tmp_path_factory.mktemp("inferix_metrics")
    torch.manual_seed(0)
    clip_cfg = dict(
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=224,
        patch_size=32,
        projection_dim=16,
    )
    for name in ("clip-vit-base-patch32", "clip-vit-large-patch14"):
        CLIPVisionModelWithProjection(CLIPVisionConfig(**clip_cfg)).save_pretrained(root / name)
    vit_cfg = ViTConfig(
        hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, image_size=224, patch_size=32
    )
    ViTModel(vit_cfg, add_pooling_layer=False).save_pretrained(root / "dino-vitb16")
    head = torch.nn.Linear(16, 1)
    torch.save(head.state_dict(), root / "sa_0_4_vit_l_14_linear.pth")
    return root


@pytest.fixture(scope="module")
def video() -> np.ndarray:
    """12 frames, 40×60 (non-square, so DINO interpolates positions), with a cut at frame 7."""
    rng = np.random.default_rng(20)
    a, b = texture(rng, 40, 60), texture(rng, 40, 60)
    return np.stack([noisy(rng, a if t < 7 else b, 6.0) for t in range(12)])


def _resize_short(x: torch.Tensor, size: int, mode: str) -> torch.Tensor:
    h, w = x.shape[-2:]
    out = (size, int(size * w / h)) if h <= w else (int(size * h / w), size)
    return F.interpolate(x, size=out, mode=mode, align_corners=False, antialias=False)


def _clip_input(frame: np.ndarray) -> torch.Tensor:
    """VBench clip_transform(224) on one frame, written out step by step."""
    x = _resize_short(torch.tensor(frame, dtype=torch.float32).permute(2, 0, 1)[None], 224, "bicubic")
    h, w = x.shape[-2:]
    top, left = round((h - 224) / 2), round((w - 224) / 2)
    x = x[..., top : top + 224, left : left + 224] / 255.0
    return (x - torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)) / torch.tensor(CLIP_STD).view(1, 3, 1, 1)


def _dino_input(frame: np.ndarray) -> torch.Tensor:
    x = _resize_short(torch.tensor(frame, dtype=torch.float32).permute(2, 0, 1)[None], 224, "bilinear") / 255.0
    return (x - torch.tensor(NET_MEAN).view(1, 3, 1, 1)) / torch.tensor(NET_STD).view(1, 3, 1, 1)


def _vbench_consistency(feats: list[torch.Tensor]) -> float:
    """The loop of VBench subject_consistency.py, frame by frame."""
    total, first, former = 0.0, None, None
    for i, f in enumerate(feats):
        f = F.normalize(f, dim=-1, p=2)
        if i == 0:
            first = f
        else:
            sim_pre = max(0.0, F.cosine_similarity(former, f).item())
            sim_fir = max(0.0, F.cosine_similarity(first, f).item())
            total += (sim_pre + sim_fir) / 2
        former = f
    return total / (len(feats) - 1)


@torch.no_grad()
def test_background_and_subject_match_vbench_per_chunk(weights_dir: Path, video: np.ndarray) -> None:
    clip = CLIPVisionModelWithProjection.from_pretrained(weights_dir / "clip-vit-base-patch32").eval()
    dino = ViTModel.from_pretrained(weights_dir / "dino-vitb16", add_pooling_layer=False).eval()
    clip_feats = [clip(pixel_values=_clip_input(f)).image_embeds for f in video]
    dino_feats = [
        dino(pixel_values=_dino_input(f), interpolate_pos_encoding=True).last_hidden_state[:, 0] for f in video
    ]

    result = score_video(video, metrics=["background", "subject"], chunks=3, weights_dir=weights_dir)
    for metric, feats in (("background", clip_feats), ("subject", dino_feats)):
        report = result.metrics[metric]
        assert not report.is_proxy
        expected = [_vbench_consistency(feats[i * 4 : (i + 1) * 4]) for i in range(3)]
        np.testing.assert_allclose(report.chunk_scores, expected, atol=1e-5)
        assert report.video_score == pytest.approx(_vbench_consistency(feats), abs=1e-5)
        start = _vbench_consistency(feats[:2])  # 15% of 12 frames, at least the 2 the formula needs
        end = _vbench_consistency(feats[-2:])
        assert report.start_end_contrast == pytest.approx(abs(start - end), abs=1e-5)
    names = result.scores()
    assert {"vde_background", "vbench_background_consistency", "vde_subject", "vbench_subject_consistency"} <= set(
        names
    )
    assert not any(k.endswith("_proxy") for k in names)


@torch.no_grad()
def test_aesthetic_matches_laion_formula(weights_dir: Path, video: np.ndarray) -> None:
    clip = CLIPVisionModelWithProjection.from_pretrained(weights_dir / "clip-vit-large-patch14").eval()
    head = torch.nn.Linear(16, 1)
    head.load_state_dict(torch.load(weights_dir / "sa_0_4_vit_l_14_linear.pth"))
    per_frame = [head(F.normalize(clip(pixel_values=_clip_input(f)).image_embeds, dim=-1)).item() / 10 for f in video]

    report = score_video(video, metrics=["aesthetic"], chunks=3, weights_dir=weights_dir).metrics["aesthetic"]
    assert report.unavailable is None and not report.is_proxy
    np.testing.assert_allclose(
        report.chunk_scores, [np.mean(per_frame[i * 4 : (i + 1) * 4]) for i in range(3)], atol=1e-6
    )
    assert report.video_score == pytest.approx(np.mean(per_frame), abs=1e-6)


def test_missing_files_name_the_file_and_fall_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(MissingFileError, match=r"subject consistency.*dino-vitb16"):
        networks.locate(tmp_path, "dino_b16")
    with pytest.raises(MissingFileError, match=r"sa_0_4_vit_l_14_linear\.pth"):
        networks.locate(tmp_path, "aesthetic_head")
    with caplog.at_level(logging.WARNING):
        backends = resolve_backends(["subject", "aesthetic"], tmp_path)
    assert backends["subject"].is_proxy
    assert backends["aesthetic"].unavailable is not None
    assert "dino-vitb16" in caplog.text and "subject_proxy" in caplog.text and "clip-vit-large-patch14" in caplog.text


def test_aesthetic_head_with_the_wrong_layout_is_rejected(tmp_path: Path) -> None:
    torch.save({"layers.0.weight": torch.randn(1, 16)}, tmp_path / "head.pth")
    with pytest.raises(CheckpointLayoutError, match="weight, bias"):
        networks.load_aesthetic_head(tmp_path / "head.pth")


@pytest.mark.skipif(importlib.util.find_spec("pyiqa") is not None, reason="pyiqa is installed")
def test_musiq_without_pyiqa_says_so_and_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "musiq_spaq_ckpt-358bb6af.pth").write_bytes(b"not read")
    with pytest.raises(BackendUnavailableError, match="pip install pyiqa"):
        networks.load_musiq(tmp_path / "musiq_spaq_ckpt-358bb6af.pth")
    with caplog.at_level(logging.WARNING):
        assert resolve_backends(["clarity"], tmp_path)["clarity"].is_proxy
    assert "pyiqa" in caplog.text


def test_user_interpolator_gives_the_published_motion_label(video: np.ndarray) -> None:
    odd = {video[i].tobytes(): video[i + 1] for i in range(len(video) - 1)}
    backends = resolve_backends(["motion"], interpolator=lambda a, b: odd[a.tobytes()])
    result = score_video(video, chunks=3, backends=backends)
    assert result.metrics["motion"].chunk_scores == [1.0] * 3
    assert "vde_motion" in result.scores() and result.scores()["vde_motion"] == 0.0


# RAFT (dynamic degree) and MUSIQ (clarity) parity: test_lvbench_raft.py and test_lvbench_musiq.py.
