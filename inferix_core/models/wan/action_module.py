"""Matrix-Game 2.0's ActionModule: keyboard and mouse conditioning inside the first transformer blocks.

Written from the authors' `Matrix-Game-2/wan/modules/action_module.py` (SkyworkAI, read at
github:zoheth/Matrix-Game commit 3ceb3114) and from `tests/fixtures/README_matrix_game2.md` §3.5, which
says in words what it computes. Parameter names are the authors' (`blocks.N.action_model.*`).

Per call over a chunk of n latent frames starting at absolute frame `start_frame`, with the action rows
of every pixel frame from 0 to the end of the chunk (N = 1 + 4·(start_frame + n − 1) rows):

* **Windows.** Latent frame f sees the r·ws rows j = r·f − r·ws … r·f − 1 (r = 4 pixel frames per
  latent frame, ws = windows_size = 3; j < 0 means row 0). The window ends one row before pixel frame
  4f, so the chunk's last row is not used by this chunk (it is by the next one).
* **Mouse** (if the variant has it): per spatial location, an MLP of [hidden state ; the window's mouse
  rows] → q, k, v → temporal self-attention over the cached latent frames of that location.
* **Keyboard**: queries from the video tokens (`mouse_attn_q`, despite the name), keys/values from an
  embedding of the window's keyboard rows, one per latent frame, shared by every location.
* Both attentions: heads of 64 dims, q/k RMS-normalised **without** their stored weights (the authors'
  norm never multiplies by its weight), RoPE on only the first `mouse_qk_dim_list[0]` (8) dims of each
  head with theta 256 and the absolute latent frame as position (float32 tables), no mask.
* **Caches**: one K/V entry per latent frame (mouse: per location), a rolling window of the main
  cache's length with **no sink** (the authors hard-code sink 0 here whatever the model's sink).

`ActionKVCache` wraps the main KV cache with the two action caches so that they begin, roll, restart and
reset together; see its docstring for which cache kinds it supports.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ...attention import get_attention_backend
from ...compile_boundary import compile_boundary
from ...errors import ConfigError, ShapeMismatchError
from .layers import LayerNorm

log = logging.getLogger(__name__)

ACTION_HEAD_DIM = 64  # fixed by the authors' RoPE table (built for 64-dim heads)


@dataclass(frozen=True)
class ActionConfig:
    """The `action_config` of a Matrix-Game 2.0 model (the authors' ActionModule arguments, same names).

    `patch_size` and `rope_dim_list` are carried for round-tripping the released config.json but are
    unused by the computation (the RoPE uses `mouse_qk_dim_list`, also when the mouse is disabled).
    """

    blocks: tuple[int, ...] = ()
    keyboard_dim_in: int = 4
    mouse_dim_in: int = 2
    enable_mouse: bool = True
    enable_keyboard: bool = True
    hidden_size: int = 128  # keyboard embedding width
    img_hidden_size: int = 1536  # = the transformer's dim
    heads_num: int = 16
    keyboard_hidden_dim: int = 1024
    mouse_hidden_dim: int = 1024
    vae_time_compression_ratio: int = 4
    windows_size: int = 3
    mouse_qk_dim_list: tuple[int, ...] = (8, 28, 28)
    rope_dim_list: tuple[int, ...] = (8, 28, 28)
    rope_theta: float = 256
    patch_size: tuple[int, ...] = (1, 2, 2)
    qk_norm: bool = True
    qkv_bias: bool = False

    def __post_init__(self) -> None:
        for name in ("blocks", "mouse_qk_dim_list", "rope_dim_list", "patch_size"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        if sum(self.mouse_qk_dim_list) != ACTION_HEAD_DIM:
            raise ConfigError(f"mouse_qk_dim_list {list(self.mouse_qk_dim_list)} must sum to {ACTION_HEAD_DIM}")
        for name in ("keyboard_hidden_dim", "mouse_hidden_dim") if self.enable_mouse else ("keyboard_hidden_dim",):
            if getattr(self, name) != ACTION_HEAD_DIM * self.heads_num:
                raise ConfigError(
                    f"{name}={getattr(self, name)} must be {ACTION_HEAD_DIM} × heads_num ({self.heads_num}): "
                    "the action attention's head size is fixed at 64"
                )
        if not self.enable_keyboard:
            raise ConfigError("Matrix-Game action modules without a keyboard branch are not supported")

    @property
    def window_rows(self) -> int:
        """Action rows (pixel frames) each latent frame sees: r · windows_size (12)."""
        return self.vae_time_compression_ratio * self.windows_size

    @classmethod
    def from_dict(cls, d: dict) -> ActionConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names - {"local_attn_size"})
        if unknown:
            raise ConfigError(f"unknown action_config keys {unknown}; expected some of {sorted(names)}")
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def rms_norm_unweighted(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x · rsqrt(mean(x²) + eps) in the input dtype: the authors' action-module norm, which ignores its weight."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


class _UnweightedRMSNorm(nn.Module):
    """Holds the checkpoint's `.weight` (so the released files load) but, as the authors' code, never uses it."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm_unweighted(x, self.eps)


def action_rope_table(
    positions: torch.Tensor, dims: tuple[int, ...], theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (len(positions), 64) float32, interleaved per pair as the authors' table.

    Only the first dims[0] entries rotate (angle pos · theta^(−2i/dims[0]), float32 arithmetic); the
    authors build the other 28 + 28 from a one-entry spatial grid, so their angle is 0 (cos 1, sin 0).
    """
    d_t = dims[0]
    pos = positions.to(torch.float32)
    freqs = 1.0 / (theta ** (torch.arange(0, d_t, 2, device=pos.device)[: d_t // 2].float() / d_t))
    angles = torch.outer(pos, freqs)  # (n, d_t/2)
    rest = sum(dims) - d_t
    cos = torch.cat([angles.cos().repeat_interleave(2, dim=1), pos.new_ones(len(pos), rest)], dim=1)
    sin = torch.cat([angles.sin().repeat_interleave(2, dim=1), pos.new_zeros(len(pos), rest)], dim=1)
    return cos, sin


def apply_action_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (…, L, H, 64) · cos + rotate_half(x) · sin in float32, cos/sin (L, 64); returned in x's dtype."""
    xf = x.float()
    real, imag = xf.unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack([-imag, real], dim=-1).flatten(-2)
    return (xf * cos[:, None, :] + rotated * sin[:, None, :]).type_as(x)


class ActionInputs(NamedTuple):
    """What an action module gets in one transformer call: fixed-shape windows and RoPE tables (built once per
    call by `action_inputs`, outside any compiled graph: the raw tracks grow every block) and the cache views."""

    keyboard_windows: torch.Tensor  # (B, n, r·ws, keyboard_dim_in): each latent frame's window of rows
    mouse_windows: torch.Tensor | None  # (B, n, r·ws, mouse_dim_in), or None (keyboard-only variants)
    cos: torch.Tensor  # (n, 64) float32 action-RoPE table of the chunk's absolute latent frames
    sin: torch.Tensor
    frame_tokens: int  # spatial tokens per latent frame (h·w after patchify)
    mouse_kv: object | None = None  # LayerKV-like view of the mouse cache (update(k, v) -> (k_all, v_all))
    keyboard_kv: object | None = None


def window_index(config: ActionConfig, start_frame: int, num_frames: int, device=None) -> torch.Tensor:
    """(n, r·ws) row indices of each frame's window: r·f − r·ws … r·f − 1, clamped at row 0 (the padding)."""
    r, rows = config.vae_time_compression_ratio, config.window_rows
    frames = torch.arange(start_frame, start_frame + num_frames, device=device)
    return (r * frames[:, None] + torch.arange(-rows, 0, device=device)[None, :]).clamp_min(0)


def action_inputs(config: ActionConfig, keyboard: torch.Tensor, mouse: torch.Tensor | None, start_frame: int,
                  num_frames: int, frame_tokens: int, dtype: torch.dtype | None = None) -> ActionInputs:  # fmt: skip
    """Gather the chunk's windows from the per-pixel-frame tracks (B, N, ·) and build its RoPE table.

    The tracks must hold at least the rows the windows read (1 + 4·(start_frame + n − 1) rows, as the
    authors pass, covers them). Built on the tracks' device: no host copy inside the block loop.
    """
    need = config.vae_time_compression_ratio * (start_frame + num_frames - 1)  # rows 0..need-1 are read
    if keyboard.shape[1] < max(need, 1):
        raise ShapeMismatchError(
            f"keyboard actions have {keyboard.shape[1]} rows; the chunk at latent frame {start_frame} needs "
            f"{1 + need} (one row per pixel frame, 1 + 4·(last latent frame))"
        )
    if config.enable_mouse:
        if mouse is None:
            raise ConfigError("this Matrix-Game variant takes mouse actions; pass zeros for no camera movement")
        if mouse.shape[1] < max(need, 1):
            raise ShapeMismatchError(f"mouse actions have {mouse.shape[1]} rows; the chunk needs {1 + need}")
    idx = window_index(config, start_frame, num_frames, keyboard.device)
    positions = torch.arange(start_frame, start_frame + num_frames, device=keyboard.device)
    cos, sin = action_rope_table(positions, config.mouse_qk_dim_list, config.rope_theta)
    cast = (lambda t: t) if dtype is None else (lambda t: t.to(dtype))
    mouse_windows = cast(mouse[:, idx]) if config.enable_mouse else None
    return ActionInputs(cast(keyboard[:, idx]), mouse_windows, cos, sin, frame_tokens)


class ActionModule(nn.Module):
    """One block's keyboard (+ mouse) conditioning; parameter names are the authors'."""

    def __init__(self, config: ActionConfig, dim: int):
        super().__init__()
        if config.img_hidden_size != dim:
            raise ConfigError(f"action_config.img_hidden_size={config.img_hidden_size} must equal the model dim {dim}")
        self.config = config
        c, hs, rows = config.mouse_hidden_dim, config.hidden_size, config.window_rows
        bias = config.qkv_bias
        self.keyboard_embed = nn.Sequential(nn.Linear(config.keyboard_dim_in, hs), nn.SiLU(), nn.Linear(hs, hs))
        if config.enable_mouse:
            self.mouse_mlp = nn.Sequential(
                nn.Linear(config.mouse_dim_in * rows + dim, c),
                nn.GELU(approximate="tanh"),
                nn.Linear(c, c),
                LayerNorm(c, eps=1e-5),
            )
            self.t_qkv = nn.Linear(c, 3 * c, bias=bias)
            self.img_attn_q_norm = _UnweightedRMSNorm(ACTION_HEAD_DIM) if config.qk_norm else nn.Identity()
            self.img_attn_k_norm = _UnweightedRMSNorm(ACTION_HEAD_DIM) if config.qk_norm else nn.Identity()
            self.proj_mouse = nn.Linear(c, dim, bias=bias)
        kc = config.keyboard_hidden_dim
        self.key_attn_q_norm = _UnweightedRMSNorm(ACTION_HEAD_DIM) if config.qk_norm else nn.Identity()
        self.key_attn_k_norm = _UnweightedRMSNorm(ACTION_HEAD_DIM) if config.qk_norm else nn.Identity()
        self.mouse_attn_q = nn.Linear(dim, kc, bias=bias)
        self.keyboard_attn_kv = nn.Linear(hs * rows, 2 * kc, bias=bias)
        self.proj_keyboard = nn.Linear(kc, dim, bias=bias)
        self.attend = get_attention_backend("sdpa").attend

    def forward(self, x: torch.Tensor, act: ActionInputs) -> torch.Tensor:
        """x (B, n·S, dim) in (frame, location) order → x plus the mouse and keyboard residuals."""
        cfg = self.config
        b, tokens, dim = x.shape
        s = act.frame_tokens
        n = tokens // s
        cos, sin, heads = act.cos, act.sin, cfg.heads_num
        if cfg.enable_mouse:
            # one sequence of n frames per location: (B·S, n, dim), then [hidden ; window rows flattened]
            hs = x.view(b, n, s, dim).transpose(1, 2).reshape(b * s, n, dim)
            window = act.mouse_windows.to(x.dtype).flatten(2)  # (B, n, rows·2), row-major
            window = window[:, None].expand(b, s, n, window.shape[-1]).reshape(b * s, n, -1)
            z = self.mouse_mlp(torch.cat([hs, window], dim=-1))
            q, k, v = self.t_qkv(z).view(b * s, n, 3, heads, ACTION_HEAD_DIM).unbind(2)
            q = apply_action_rope(self.img_attn_q_norm(q), cos, sin)
            k = apply_action_rope(self.img_attn_k_norm(k), cos, sin)
            attn = self.attend_cached(q, k, v, act.mouse_kv)  # (B·S, n, H, 64)
            attn = attn.reshape(b, s, n, -1).transpose(1, 2).reshape(b, n * s, -1)
            x = x + self.proj_mouse(attn)
        # keyboard: one key/value per latent frame from its window's embedded rows
        window = self.keyboard_embed(act.keyboard_windows.to(x.dtype))  # (B, n, rows, hs)
        k, v = self.keyboard_attn_kv(window.flatten(2)).view(b, n, 2, heads, ACTION_HEAD_DIM).unbind(2)
        q = self.mouse_attn_q(x).view(b, n * s, heads, ACTION_HEAD_DIM)
        q = apply_action_rope(self.key_attn_q_norm(q), cos.repeat_interleave(s, dim=0), sin.repeat_interleave(s, dim=0))
        k = apply_action_rope(self.key_attn_k_norm(k), cos, sin)
        attn = self.attend_cached(q, k, v, act.keyboard_kv)  # every location attends to the same frames
        return x + self.proj_keyboard(attn.flatten(2))

    @compile_boundary
    def attend_cached(self, q, k, v, kv=None):
        """Write this chunk's K/V to the action cache (if any) and attend to every cached frame (no mask)."""
        if kv is not None:
            k, v = kv.update(k, v)
        return self.attend(q, k, v)


class ActionKVCache:
    """The main KV cache plus Matrix-Game's mouse and keyboard caches, advanced together.

    `begin`, `reset` and `restart` go to all three, so the action caches follow the main cache's window
    (same length in latent frames) and restarts; everything else (`layer`, `stats`, `logical_kv`,
    `attended_tokens`, …) is the main cache's. The action caches always have **sink 0** (the authors'
    action code hard-codes it) and are resident `RingKVCache`s whatever the main cache's kind (ring,
    paged, offload, quant): they are small (one entry per latent frame: 880 locations × 1024 values per
    action layer for the mouse at 352×640, ≈ 22 MB K+V per layer in bf16 for a 6-frame window) and are
    read whole on every call, so paging or offloading them would only add copies; a non-ring main cache
    logs this once. With a global main cache (window −1) the action caches are global too (the authors'
    pipeline refuses local_attn_size −1).
    """

    def __init__(self, main, mouse, keyboard, layer_slots: dict[int, int]):
        self.main = main
        self.mouse = mouse
        self.keyboard = keyboard
        self.layer_slots = layer_slots  # transformer layer -> index in the action caches

    @classmethod
    def build(cls, main, cache_config, spec, action: ActionConfig) -> ActionKVCache:
        from ...cache import KVCacheConfig, KVCacheSpec
        from ...cache.ring import RingKVCache

        if not isinstance(main, RingKVCache):
            log.info("Matrix-Game action caches stay resident rings beside the %s main cache", type(main).__name__)
        config = KVCacheConfig(window_frames=cache_config.window_frames, sink_frames=0)
        layers = sorted(action.blocks)
        common = dict(num_layers=len(layers), num_heads=action.heads_num, head_dim=ACTION_HEAD_DIM, frame_tokens=1,
                      block_frames=spec.block_frames, dtype=spec.dtype, device=spec.device,
                      max_frames=spec.max_frames)  # fmt: skip
        mouse = None
        if action.enable_mouse:  # one sequence per spatial location
            mouse = RingKVCache(config, KVCacheSpec(batch_size=spec.batch_size * spec.frame_tokens, **common))
        keyboard = RingKVCache(config, KVCacheSpec(batch_size=spec.batch_size, **common))
        return cls(main, mouse, keyboard, {layer: i for i, layer in enumerate(layers)})

    def _all(self):
        return [c for c in (self.main, self.mouse, self.keyboard) if c is not None]

    def begin(self, start_frame: int, num_frames: int) -> None:
        for c in self._all():
            c.begin(start_frame, num_frames)

    def reset(self) -> None:
        for c in self._all():
            c.reset()

    def restart(self, start_frame: int) -> None:
        for c in self._all():
            c.restart(start_frame)

    def action_views(self, layer: int) -> tuple[object | None, object | None]:
        """(mouse view, keyboard view) of a transformer layer that has an action module."""
        slot = self.layer_slots[layer]
        return (self.mouse.layer(slot) if self.mouse is not None else None), self.keyboard.layer(slot)

    def layer(self, index: int):
        return self.main.layer(index)

    def stats(self) -> dict:
        """The main cache's stats; resident_bytes includes the action caches (also given on their own)."""
        out = dict(self.main.stats())
        action = sum(c.stats()["resident_bytes"] for c in (self.mouse, self.keyboard) if c is not None)
        out["action_resident_bytes"] = action
        out["resident_bytes"] = out.get("resident_bytes", 0) + action
        return out

    def __getattr__(self, name: str):  # everything else is the main cache's
        if name == "main":
            raise AttributeError(name)
        return getattr(self.main, name)


@dataclass
class MatrixGameBlockInput:
    """The per-chunk conditioning of a Matrix-Game call, handed to `CausalWanTransformer.forward(action=…)`.

    cond_concat: (B, 20, n, H, W) this chunk's slice of [mask (4) ; start-image latent (16)].
    keyboard / mouse: (B, N, K) / (B, N, 2) action rows of pixel frames 0 … N−1 with N = 1 + 4·(last
    latent frame of the chunk); mouse None for keyboard-only variants.
    """

    cond_concat: torch.Tensor
    keyboard: torch.Tensor
    mouse: torch.Tensor | None = None

    def to(self, device, dtype: torch.dtype | None = None) -> MatrixGameBlockInput:
        move = lambda t: None if t is None else t.to(device=device, dtype=dtype or t.dtype)  # noqa: E731
        return MatrixGameBlockInput(move(self.cond_concat), move(self.keyboard), move(self.mouse))


# --- shapes (for the checkpoint loader) -------------------------------------------------------------------


def expected_action_shapes(config: ActionConfig, dim: int) -> dict[str, tuple[int, ...]]:
    """The tensors of one ActionModule (names below `blocks.N.action_model.`), with shapes."""
    c, kc, hs, rows = config.mouse_hidden_dim, config.keyboard_hidden_dim, config.hidden_size, config.window_rows
    lin = lambda name, o, i, bias=True: {f"{name}.weight": (o, i), **({f"{name}.bias": (o,)} if bias else {})}  # noqa: E731
    qkv = config.qkv_bias
    s = {**lin("keyboard_embed.0", hs, config.keyboard_dim_in), **lin("keyboard_embed.2", hs, hs),
         **lin("mouse_attn_q", kc, dim, qkv), **lin("keyboard_attn_kv", 2 * kc, hs * rows, qkv),
         **lin("proj_keyboard", dim, kc, qkv)}  # fmt: skip
    norms = ["key_attn_q_norm", "key_attn_k_norm"]
    if config.enable_mouse:
        s.update(lin("mouse_mlp.0", c, config.mouse_dim_in * rows + dim) | lin("mouse_mlp.2", c, c))
        s.update({"mouse_mlp.3.weight": (c,), "mouse_mlp.3.bias": (c,)})
        s.update(lin("t_qkv", 3 * c, c, qkv) | lin("proj_mouse", dim, c, qkv))
        norms += ["img_attn_q_norm", "img_attn_k_norm"]
    if config.qk_norm:
        s.update({f"{n}.weight": (ACTION_HEAD_DIM,) for n in norms})
    return s


def infer_action_config(shapes: dict, dim: int) -> ActionConfig | None:
    """The ActionConfig that canonical tensor shapes imply, or None when no block has an action module.

    Read from the weights: blocks, keyboard width, mouse branch and width, heads (hidden / 64), keyboard
    embedding width, window (keyboard_attn_kv input / embedding width / r), the biases and norms. Not in the
    weights, taken from the released configs (all three agree): r = 4, mouse_qk_dim_list [8, 28, 28], theta 256.
    """
    import re

    pattern = re.compile(r"^blocks\.(\d+)\.action_model\.keyboard_embed\.0\.weight$")
    blocks = sorted(int(m.group(1)) for k in shapes if (m := pattern.match(k)))
    if not blocks:
        return None
    p = f"blocks.{blocks[0]}.action_model."
    hs, keyboard_dim = (int(v) for v in shapes[p + "keyboard_embed.0.weight"])
    kc2, kv_in = (int(v) for v in shapes[p + "keyboard_attn_kv.weight"])
    r = 4
    rows = kv_in // hs
    mouse = p + "mouse_mlp.0.weight" in shapes
    mouse_dim = (int(shapes[p + "mouse_mlp.0.weight"][1]) - dim) // rows if mouse else 2
    kc = kc2 // 2
    return ActionConfig(
        blocks=tuple(blocks), keyboard_dim_in=keyboard_dim, mouse_dim_in=mouse_dim, enable_mouse=mouse,
        hidden_size=hs, img_hidden_size=dim, heads_num=kc // ACTION_HEAD_DIM, keyboard_hidden_dim=kc,
        mouse_hidden_dim=kc if not mouse else int(shapes[p + "mouse_mlp.0.weight"][0]),
        vae_time_compression_ratio=r, windows_size=rows // r, qk_norm=p + "key_attn_q_norm.weight" in shapes,
        qkv_bias=p + "mouse_attn_q.bias" in shapes,
    )  # fmt: skip


# Keys the weights cannot tell (the RoPE split and theta, the VAE's temporal ratio, carried extras), and the
# released configs' values (universal, gta_drive and templerun agree) used only where a config lacks them.
NOT_IN_WEIGHTS = {"mouse_qk_dim_list": (8, 28, 28), "rope_theta": 256, "vae_time_compression_ratio": 4,
                  "rope_dim_list": (8, 28, 28), "patch_size": (1, 2, 2)}  # fmt: skip


def resolve_action_config(inferred: ActionConfig, stored: dict | None, source: str) -> ActionConfig:
    """The action config of a checkpoint: shapes for what they tell, the stored `action_config` for the rest.

    `inferred` comes from the weights (`infer_action_config`), which cannot tell the RoPE split, theta or the
    temporal ratio; `stored` is the file's own `action_config` (its metadata or the config.json beside it), or
    None. Every key the stored config has wins for those; the window follows from the weights' row count and
    the stored ratio. A key no config gives keeps the released value, and what was guessed is logged.
    """
    stored = dict(stored or {})
    rows = inferred.window_rows  # the keyboard_attn_kv input tells r · windows_size, not the two apart
    values = {k: stored.get(k, default) for k, default in NOT_IN_WEIGHTS.items()}
    r = int(values["vae_time_compression_ratio"])
    if rows % r:
        raise ConfigError(f"{source}: {rows} action rows per latent frame are no multiple of the ratio {r}")
    windows = int(stored.get("windows_size", rows // r))
    if windows * r != rows:
        raise ConfigError(
            f"{source}: action_config windows_size {windows} × ratio {r} ≠ the {rows} rows its weights take"
        )
    guessed = sorted(k for k in NOT_IN_WEIGHTS if k not in stored)
    if guessed and not {"mouse_qk_dim_list", "rope_theta"}.isdisjoint(guessed):
        log.warning(
            "%s: no %s in its config; using the released Matrix-Game 2.0 values %s",
            source,
            "/".join(guessed),
            ", ".join(
                f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in NOT_IN_WEIGHTS.items() if k in guessed
            ),
        )
    elif guessed:
        log.info("%s: %s not in its config; the released values apply", source, "/".join(guessed))
    return dataclasses.replace(inferred, windows_size=windows, **values)
