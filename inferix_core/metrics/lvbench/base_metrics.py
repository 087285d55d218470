"""VBench base metrics, written against the networks' forward functions and nothing else.

Each function reproduces one VBench dimension as LV-Bench applies it to a chunk (Inferix
`LV-Bench/metrics.py` and `LV-Bench/vbench/*.py`). Loading networks is networks.py's job and the
weight-free stand-ins live in proxies.py; the formulas here are shared by both, so a proxy differs
from the published metric only in the network it feeds.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

# Normalisation constants of OpenAI CLIP and of ImageNet (DINO); VBench `utils.py::clip_transform`
# and `dino_transform`.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGING_QUALITY_MAX_SIDE = 512  # VBench imaging_quality.py, preprocess_mode='longer'
BATCH_FRAMES = 32  # VBench aesthetic_quality.py batch_size

# interpolate(frame_a, frame_b) -> the middle frame, all uint8 [H, W, 3]
Interpolator = Callable[[np.ndarray, np.ndarray], np.ndarray]
# flow(frame_a, frame_b) -> optical flow [2, h, w] in pixels, frames uint8 [H, W, 3]
FlowEstimator = Callable[[np.ndarray, np.ndarray], np.ndarray]


# ---------------------------------------------------------------- preprocessing (torchvision-free)


def _as_float_nchw(frames: np.ndarray) -> torch.Tensor:
    """uint8 [T, H, W, 3] → float32 [T, 3, H, W] in 0..255 (VBench `load_video` hands floats to Resize)."""
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()


def resize_shorter(x: torch.Tensor, size: int, mode: str) -> torch.Tensor:
    """torchvision `Resize(size, antialias=False)` on a tensor: shorter side → size, longer side truncated."""
    h, w = x.shape[-2:]
    if h <= w:
        new_h, new_w = size, int(size * w / h)
    else:
        new_h, new_w = int(size * h / w), size
    if (new_h, new_w) == (h, w):
        return x
    return F.interpolate(x, size=(new_h, new_w), mode=mode, align_corners=False, antialias=False)


def center_crop(x: torch.Tensor, size: int) -> torch.Tensor:
    """torchvision `CenterCrop(size)` for an image at least `size` on both sides."""
    h, w = x.shape[-2:]
    top, left = round((h - size) / 2.0), round((w - size) / 2.0)
    return x[..., top : top + size, left : left + size]


def _normalize(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    m = torch.tensor(mean, dtype=x.dtype).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - m) / s


def clip_preprocess(frames: np.ndarray, size: int = 224) -> torch.Tensor:
    """VBench `clip_transform(224)`: bicubic shorter-side resize, centre crop, /255, CLIP mean/std."""
    x = center_crop(resize_shorter(_as_float_nchw(frames), size, "bicubic"), size)  # (T, 3, 224, 224)
    return _normalize(x / 255.0, CLIP_MEAN, CLIP_STD)


def dino_preprocess(frames: np.ndarray, size: int = 224) -> torch.Tensor:
    """VBench `dino_transform(224)`: bilinear shorter-side resize (no crop), /255, ImageNet mean/std."""
    x = resize_shorter(_as_float_nchw(frames), size, "bilinear")  # (T, 3, 224, W')
    return _normalize(x / 255.0, IMAGENET_MEAN, IMAGENET_STD)


def imaging_quality_preprocess(frames: np.ndarray, max_side: int = IMAGING_QUALITY_MAX_SIDE) -> torch.Tensor:
    """VBench `imaging_quality.py::transform(mode='longer')`: longer side ≤ 512 (bilinear), /255."""
    x = _as_float_nchw(frames)
    h, w = x.shape[-2:]
    if max(h, w) > max_side:
        scale = max_side / max(h, w)
        x = F.interpolate(x, size=(int(scale * h), int(scale * w)), mode="bilinear", align_corners=False)
    return x / 255.0


# ---------------------------------------------------------------- per-frame network outputs


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def clip_image_embeddings(frames: np.ndarray, clip_vision: torch.nn.Module) -> torch.Tensor:
    """L2-normalised CLIP image embeddings [T, D] (`encode_image` = projected, post-LN CLS token).

    Args:
        clip_vision: a transformers `CLIPVisionModelWithProjection`.
    """
    device, feats = _device_of(clip_vision), []
    for i in range(0, len(frames), BATCH_FRAMES):
        pixels = clip_preprocess(frames[i : i + BATCH_FRAMES]).to(device)
        feats.append(clip_vision(pixel_values=pixels).image_embeds.float().cpu())  # (B, D)
    return F.normalize(torch.cat(feats), dim=-1, p=2)


@torch.no_grad()
def dino_cls_features(frames: np.ndarray, vit: torch.nn.Module) -> torch.Tensor:
    """L2-normalised DINO CLS features [T, D]: the final-norm CLS token, as DINO's hub model returns.

    VBench feeds non-square 224-short-side frames; DINO interpolates its position embeddings, and so
    does `ViTModel` with `interpolate_pos_encoding=True` (bicubic; DINO adds a 0.1 offset to the
    scale factor, so real-weight results can differ from VBench in the 4th decimal on non-square video).
    """
    device, feats = _device_of(vit), []
    for i in range(0, len(frames), BATCH_FRAMES):
        pixels = dino_preprocess(frames[i : i + BATCH_FRAMES]).to(device)
        out = vit(pixel_values=pixels, interpolate_pos_encoding=True).last_hidden_state  # (B, 1+P, D)
        feats.append(out[:, 0].float().cpu())
    return F.normalize(torch.cat(feats), dim=-1, p=2)


@torch.no_grad()
def aesthetic_frame_scores(frames: np.ndarray, clip_vision: torch.nn.Module, head: torch.nn.Module) -> np.ndarray:
    """LAION aesthetic score of each frame, /10 (VBench `aesthetic_quality.py::laion_aesthetic`)."""
    emb = clip_image_embeddings(frames, clip_vision).to(_device_of(head))  # (T, 768), unit norm
    return (head(emb).squeeze(-1).float().cpu().numpy() / 10.0).astype(np.float64)


@torch.no_grad()
def imaging_quality_frame_scores(frames: np.ndarray, musiq: torch.nn.Module) -> np.ndarray:
    """MUSIQ-SPAQ score of each frame, /100 (VBench `imaging_quality.py::technical_quality`).

    LV-Bench's per-chunk clarity skips the /100; VDE is scale-free, so the drift is the same.
    """
    device = _device_of(musiq)
    x = imaging_quality_preprocess(frames)
    return np.array([float(musiq(x[i : i + 1].to(device))) / 100.0 for i in range(len(x))])


# ---------------------------------------------------------------- VBench formulas


def consistency_from_features(features: torch.Tensor | np.ndarray) -> float:
    """Mean over t ≥ 2 of ½[max(0, cos(f_{t−1}, f_t)) + max(0, cos(f_1, f_t))].

    VBench `subject_consistency.py` / `background_consistency.py`; f_1 is the first frame given, so a
    chunk is compared with its own first frame. NaN (with a warning) for fewer than two frames.
    """
    f = F.normalize(torch.as_tensor(features, dtype=torch.float64), dim=-1, p=2)  # (T, D)
    if len(f) < 2:
        log.warning("Consistency needs at least 2 frames; got %d.", len(f))
        return math.nan
    sim_prev = (f[1:] * f[:-1]).sum(-1).clamp(min=0.0)  # (T-1,)
    sim_first = (f[1:] * f[:1]).sum(-1).clamp(min=0.0)  # (T-1,)
    return float(((sim_prev + sim_first) / 2).mean())


def background_consistency(frames: np.ndarray, clip_vision: torch.nn.Module) -> float:
    """VBench background consistency: CLIP ViT-B/32 features through `consistency_from_features`."""
    return consistency_from_features(clip_image_embeddings(frames, clip_vision))


def subject_consistency(frames: np.ndarray, vit: torch.nn.Module) -> float:
    """VBench subject consistency: DINO ViT-B/16 CLS features through `consistency_from_features`."""
    return consistency_from_features(dino_cls_features(frames, vit))


def aesthetic_quality(frames: np.ndarray, clip_vision: torch.nn.Module, head: torch.nn.Module) -> float:
    """VBench aesthetic quality: mean LAION score /10 over the frames."""
    return float(aesthetic_frame_scores(frames, clip_vision, head).mean())


def imaging_quality(frames: np.ndarray, musiq: torch.nn.Module) -> float:
    """VBench imaging quality: mean MUSIQ-SPAQ score /100 over the frames."""
    return float(imaging_quality_frame_scores(frames, musiq).mean())


def motion_smoothness(frames: np.ndarray, interpolate: Interpolator) -> float:
    """(255 − mean |odd frame − interpolation of its even neighbours|) / 255.

    VBench `motion_smoothness.py::motion_score`: frames 0, 2, 4, … are interpolated pairwise (AMT in
    VBench) and each middle frame is compared with the real odd frame between them. NaN for < 3 frames.
    """
    even, odd = frames[0::2], frames[1::2]
    if len(even) < 2:
        log.warning("Motion smoothness needs at least 3 frames; got %d.", len(frames))
        return math.nan
    diffs = []
    for a, b, real in zip(even[:-1], even[1:], odd):
        mid = interpolate(a, b)
        diffs.append(np.abs(mid.astype(np.int16) - real.astype(np.int16)).mean())  # cv2.absdiff + mean
    return float((255.0 - np.mean(diffs)) / 255.0)


def top_flow_magnitude(flow: np.ndarray) -> float:
    """Mean of the top 5% flow magnitudes of a [2, h, w] flow (VBench `dynamic_degree.py::get_score`)."""
    rad = np.sqrt(flow[0] ** 2 + flow[1] ** 2).ravel()
    cut = max(1, int(rad.size * 0.05))  # VBench has no max(1, ·); it only matters below 20 pixels
    return float(np.sort(rad)[::-1][:cut].mean())


def dynamic_degree(frames: np.ndarray, flow: FlowEstimator, fps: float | None = None) -> float:
    """1.0 if the frames move per VBench `DynamicDegree.infer`, else 0.0.

    Frames should already be sampled at about 8 fps (chunking.dynamic_stride). A pair moves when its
    top-5% flow exceeds max(1, 8/fps)·6·min(H, W)/256 pixels (`set_params`; `fps` is the source video's
    rate, None for ≥ 8 fps); the clip moves when round(4·T/16) pairs do.
    """
    factor = max(1.0, 8.0 / fps) if fps else 1.0  # VBench scales the threshold up for videos under 8 fps
    threshold = factor * 6.0 * min(frames.shape[1:3]) / 256.0
    count_needed = round(4 * (len(frames) / 16.0))  # Python round, as VBench
    count = 0
    for a, b in itertools.pairwise(frames):
        if top_flow_magnitude(flow(a, b)) > threshold:
            count += 1
        if count >= count_needed:  # checked after each pair, so count_needed = 0 moves at once
            return 1.0
    return 0.0
