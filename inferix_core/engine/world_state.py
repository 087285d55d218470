"""Save a running world and resume it later: one safetensors file, continuing bitwise.

A world state is everything a stream carries from one block to the next (`StreamState`): the KV cache
(every buffer with its slot layout, `cache.snapshot`), the current prompt's cross-attention K/V, the
noise generator's state, the next frame and block, and optionally the streaming VAE decoder's causal
cache, so the next decoded frames continue seamlessly. Beside them the file names what it fits: the
model (family, config and a fingerprint of its weights), the sampling and cache settings and the
latent size. Loading checks all of them and refuses a state from another model or other settings with
the reason. The file is written under a temporary name and renamed, so a crash never leaves half a state.

    state = pipe.start_stream(ctx, h, w)              # ... generate some blocks ...
    save_world_state("world.safetensors", pipe, state, identity=model_identity(pipe.model, "self_forcing"))
    state = load_world_state("world.safetensors", pipe, identity=model_identity(pipe.model, "self_forcing"))
    pipe.denoise_block(state)                          # continues exactly where it stopped
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ..cache.snapshot import cache_identity, restore_cache, snapshot_cache
from ..errors import ConfigError, MissingFileError
from ..models.wan.action_module import ActionKVCache
from ..models.wan.causal_transformer import CrossAttentionCache
from ..pipeline import BlockDiffusionPipeline, SeededNoise
from ..pipeline.block_diffusion import StreamState
from ..sinks.paths import PARTIAL_TAG, publish
from ..vae.tiny_ae import TinyDecodeState

FORMAT = "inferix-world-state/1"
_STATE_TENSORS = ("first_latent", "recent_latents", "clean_prefix")  # optional StreamState tensors (Krea, TI2V)


class ResumedNoise(SeededNoise):
    """A restored SeededNoise. A finite run drew its whole initial noise up front (the reference's order);
    blocks past that draw their initial noise from the generator when they start, as an open stream does."""

    def initial(self, start_frame: int, shape: tuple[int, ...]) -> torch.Tensor:
        if self._upfront is not None and start_frame + shape[1] <= self._upfront.shape[1]:
            return self._upfront[:, start_frame : start_frame + shape[1]]
        return torch.randn(shape, generator=self.generator, device=self.device)


def weights_fingerprint(model: torch.nn.Module, samples: int = 64) -> str:
    """A cheap fingerprint of a model's weights: names, shapes, dtypes and `samples` strided values each.

    Hashing every byte of a 14B model would take minutes; a state saved from other weights differs in
    (nearly) every sampled value, so a strided sample catches it.
    """
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        flat = t.detach().reshape(-1)
        step = max(1, flat.numel() // samples)
        picked = flat[::step][:samples].to("cpu").contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(picked.view(torch.uint8).numpy().tobytes())  # the raw bytes, whatever the dtype
    return h.hexdigest()[:32]


def model_identity(model: torch.nn.Module, family: str) -> dict[str, Any]:
    cfg = model.config
    config = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(vars(cfg))
    config.pop("extra", None)
    return {
        "family": family,
        "config": json.loads(json.dumps(config, default=str)),
        "weights": weights_fingerprint(model),
    }


def _settings(pipe: BlockDiffusionPipeline, state: StreamState) -> dict[str, Any]:
    return {
        "sampling": json.loads(json.dumps(dataclasses.asdict(pipe.sampling))),
        "cache": cache_identity(pipe.cache_config, state.cache.spec, state.cache),
        "latent_size": [state.latent_height, state.latent_width],
        "batch_size": state.batch_size,
    }


def _snapshot_stream_cache(cache) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The stream's cache: a plain KV cache, or Matrix-Game's main cache with its mouse and keyboard rings."""
    if type(cache) is not ActionKVCache:
        return snapshot_cache(cache)
    tensors, main = snapshot_cache(cache.main, "main.")
    meta: dict[str, Any] = {"kind": "action", "main": main, "mouse": None, "keyboard": None}
    for name in ("mouse", "keyboard"):
        sub = getattr(cache, name)
        if sub is not None:
            t, meta[name] = snapshot_cache(sub, f"{name}.")
            tensors.update(t)
    return tensors, meta


def _restore_stream_cache(cache, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    if (meta.get("kind") == "action") != (type(cache) is ActionKVCache):
        saved = "has" if meta.get("kind") == "action" else "has no"
        raise ConfigError(f"the saved KV cache {saved} Matrix-Game action caches and this model's cache differs")
    if type(cache) is not ActionKVCache:
        restore_cache(cache, tensors, meta)
        return
    restore_cache(cache.main, tensors, meta["main"], "main.")
    for name in ("mouse", "keyboard"):
        sub = getattr(cache, name)
        if (sub is None) != (meta[name] is None):
            raise ConfigError(f"the saved Matrix-Game {name} cache does not fit this model (another variant?)")
        if sub is not None:
            restore_cache(sub, tensors, meta[name], f"{name}.")


def _noise_tensors(noise) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    if not isinstance(noise, SeededNoise):
        raise ConfigError(f"saving a world state needs SeededNoise noise, not {type(noise).__name__}")
    tensors = {"noise.generator": noise.generator.get_state()}
    if noise._upfront is not None:
        tensors["noise.upfront"] = noise._upfront
    return tensors, {"device": str(noise.device)}


def _decoder_tensors(decoder) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The streaming decoder's state: the Wan VAE's causal conv caches, or the tiny VAE's last features.

    A decoder without a state of its own hands on the pixels Krea's pixel window decoded in the loop
    (`api.EncoderPixels`): that window is saved with the pipeline (`_window_tensors`).
    """
    if not hasattr(decoder, "state"):
        if getattr(decoder, "encoder", None) is None:
            raise ConfigError(f"cannot save the state of a {type(decoder).__name__} decoder; save without decoder=")
        return {}, {"kind": "pixel_window"}
    s = decoder.state
    if type(s) is TinyDecodeState:
        tensors = {} if s.previous is None else {"decoder.previous": s.previous}
        return tensors, {"kind": "tiny", "latent_frames_in": s.latent_frames_in}
    tensors, caches = {}, []
    for (ty, tx), cache in s.caches.items():
        for key, t in cache.frames.items():
            tensors[f"decoder.{ty}.{tx}.{key}"] = t
        caches.append({"tile": [ty, tx], "frames": sorted(cache.frames), "started": sorted(cache.started),
                       "first_frame_bypass": cache.first_frame_bypass})  # fmt: skip
    meta = {"kind": "wan", "latent_frames_in": s.latent_frames_in, "frames_out": s.frames_out,
            "frames_to_drop": s.frames_to_drop, "caches": caches}  # fmt: skip
    return tensors, meta


def _window_tensors(encoder) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Krea's keep_first_frame=False pixel window (`vae.PixelWindowEncoder`): its kept pixel frames, the last
    block's pixels and its block decoder's causal caches, so the resumed run re-encodes the same first frame."""
    dec_t, dec_meta = _decoder_tensors(encoder.decoder)
    tensors = {f"window.{k}": v for k, v in dec_t.items()}
    for i, frame in enumerate(encoder.frames):
        tensors[f"window.frame.{i}"] = frame
    if encoder.last_pixels is not None:
        tensors["window.last_pixels"] = encoder.last_pixels
    meta = {"frames": len(encoder.frames), "last_pixels": encoder.last_pixels is not None, "decoder": dec_meta}
    return tensors, meta


def _restore_window(encoder, meta: dict, tensors: dict, device) -> None:
    encoder.reset()
    _restore_decoder(encoder.decoder, meta["decoder"], {k[len("window.") :]: v for k, v in tensors.items()
                                                        if k.startswith("window.decoder.")}, device)  # fmt: skip
    encoder.frames.extend(tensors[f"window.frame.{i}"].to(device) for i in range(meta["frames"]))
    encoder.last_pixels = tensors["window.last_pixels"].to(device) if meta["last_pixels"] else None


@dataclass(frozen=True)
class WorldState:
    """A captured world: the JSON header and CPU tensors a world-state file holds, kept in memory.

    What `capture_world_state` returns, `write_world_state` writes, `read_world_state` reads back and
    `load_world_state` resumes; the ComfyUI nodes carry it between Block Denoise and Save/Load World State.
    """

    header: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    @property
    def next_block(self) -> int:
        return self.header["position"]["next_block"]

    @property
    def family(self) -> str:
        return self.header["identity"]["family"]

    def describe(self) -> str:
        pos, cache = self.header["position"], self.header["settings"]["cache"]
        window = "global" if cache["window_frames"] == -1 else f"window {cache['window_frames']}"
        h, w = self.header["settings"]["latent_size"]
        return (
            f"{self.family} world after {pos['next_block']} blocks ({pos['next_frame']} latent frames, "
            f"latents {w}x{h}, {window}, {self.nbytes / 2**20:.1f} MiB)"
        )

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def capture_world_state(
    pipe: BlockDiffusionPipeline,
    state: StreamState,
    *,
    identity: dict[str, Any],
    decoder=None,
    extra: dict[str, Any] | None = None,
    extra_tensors: dict[str, torch.Tensor] | None = None,
    copy: bool = True,
) -> WorldState:
    """Everything `state` (and the streaming `decoder`) carries, as CPU tensors + a JSON header.

    `copy=False` lets CPU tensors be shared with the live stream (only for writing them out at once).
    `extra` (JSON) and `extra_tensors` are the caller's own (a session's input history, ...): they come
    back as header["extra"] and the tensors named "extra.<name>".
    """
    pipe.settle(state)  # a block stream() handed out last may still owe its K/V
    cache_t, cache_meta = _snapshot_stream_cache(state.cache)
    tensors = {f"cache.{k}": v for k, v in cache_t.items()}
    for name in _STATE_TENSORS:
        if getattr(state, name) is not None:
            tensors[f"state.{name}"] = getattr(state, name)
    tensors.update({f"extra.{k}": v for k, v in (extra_tensors or {}).items()})
    for i, (k, v) in enumerate(zip(state.text.keys, state.text.values, strict=True)):
        tensors[f"text.k.{i}"], tensors[f"text.v.{i}"] = k, v
    if getattr(state.text, "image_keys", None) is not None:  # Wan 2.1 I2V: the start image's K/V beside the prompt's
        for i, (k, v) in enumerate(zip(state.text.image_keys, state.text.image_values, strict=True)):
            tensors[f"text.ik.{i}"], tensors[f"text.iv.{i}"] = k, v
    noise_t, noise_meta = _noise_tensors(state.noise)
    tensors.update(noise_t)
    decoder_meta = window_meta = None
    if decoder is not None:
        dec_t, decoder_meta = _decoder_tensors(decoder)
        tensors.update(dec_t)
    if pipe.first_frame_encoder is not None:  # Krea's keep_first_frame=False: the window it re-encodes from
        win_t, window_meta = _window_tensors(pipe.first_frame_encoder)
        tensors.update(win_t)
    header = {
        "format": FORMAT,
        "identity": identity,
        "settings": _settings(pipe, state),
        "cache": cache_meta,
        "noise": noise_meta,
        "decoder": decoder_meta,
        "pixel_window": window_meta,
        "position": {
            "next_frame": state.next_frame,
            "next_block": state.next_block,
            "shot_index": state.shot_index,
            "rope_offset": state.rope_offset,
        },
        "text_layers": len(state.text.keys),
        "extra": json.loads(json.dumps(extra or {})),
    }
    tensors = {k: v.detach().to("cpu", copy=copy).contiguous() for k, v in tensors.items()}
    return WorldState(header, tensors)


def write_world_state(path: str | Path, world: WorldState) -> Path:
    """Write a captured world to `path` (a new file: never overwritten); returns the path written.

    Written under a temporary name and published with `sinks.paths.publish` (a hard link that fails when
    the name is taken), so a crash never leaves half a state and a racing writer never loses its file.
    """
    path = Path(path)
    if path.exists():
        raise ConfigError(f"'{path}' exists; choose a new file name for the world state (it is never overwritten)")
    tmp = path.with_name(f".{path.name}{PARTIAL_TAG}")
    try:
        save_file(world.tensors, str(tmp), metadata={"world_state": json.dumps(world.header)})
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return publish(tmp, path)


def save_world_state(
    path: str | Path,
    pipe: BlockDiffusionPipeline,
    state: StreamState,
    *,
    identity: dict[str, Any],
    decoder=None,
    extra: dict[str, Any] | None = None,
    extra_tensors: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write `state` (and the streaming `decoder`'s cache, if given) to `path`; never overwrites a file."""
    if Path(path).exists():
        raise ConfigError(f"'{path}' exists; choose a new file name for the world state (it is never overwritten)")
    world = capture_world_state(
        pipe, state, identity=identity, decoder=decoder, extra=extra, extra_tensors=extra_tensors, copy=False
    )
    return write_world_state(path, world)


def read_world_state(path: str | Path) -> WorldState:
    """A world-state file's header and tensors (one-line errors for a file that is not one)."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"world state '{path}' does not exist")
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            if "world_state" not in meta:
                raise ConfigError(f"'{path.name}' is a safetensors file but not an Inferix world state")
            header = json.loads(meta["world_state"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"'{path.name}' is not a readable world state ({str(exc).splitlines()[0]})") from None
    if header.get("format") != FORMAT:
        raise ConfigError(f"'{path.name}' has world-state format {header.get('format')!r}; this Inferix reads {FORMAT}")
    return WorldState(header, tensors)


def history_tensors(history: list) -> tuple[list[list[int]], dict[str, torch.Tensor]]:
    """A stream's re-cache history, (start, clean latents, action) blocks, as JSON + tensors for `extra`.

    Blocks whose action is not a tensor (an image-started model's per-block inputs) are left out: those
    models take no prompt switches, so they never re-cache.
    """
    meta, tensors = [], {}
    for i, (start, latents, action) in enumerate(history):
        if action is not None and not isinstance(action, torch.Tensor):
            return [], {}
        meta.append([start, int(action is not None)])
        tensors[f"history.{i}.latents"] = latents
        if action is not None:
            tensors[f"history.{i}.action"] = action
    return meta, tensors


def history_from(world: WorldState, device) -> list[tuple[int, torch.Tensor, torch.Tensor | None]]:
    """The re-cache history saved by `history_tensors` (under extra["history"]), on `device`."""
    out = []
    for i, (start, has_action) in enumerate(world.header["extra"].get("history", [])):
        latents = world.tensors[f"extra.history.{i}.latents"].to(device)
        action = world.tensors[f"extra.history.{i}.action"].to(device) if has_action else None
        out.append((start, latents, action))
    return out


def _refuse_mismatch(what: str, saved: Any, here: Any) -> None:
    if saved == here:
        return
    if isinstance(saved, dict) and isinstance(here, dict):
        keys = sorted(k for k in set(saved) | set(here) if saved.get(k) != here.get(k))
        diff = ", ".join(f"{k}: saved {saved.get(k)!r}, here {here.get(k)!r}" for k in keys[:4])
    else:
        diff = f"saved {saved!r}, here {here!r}"
    raise ConfigError(f"this world state was saved with another {what} ({diff}); load it with the same {what}")


def load_world_state(
    source: str | Path | WorldState, pipe: BlockDiffusionPipeline, *, identity: dict[str, Any], decoder=None
) -> StreamState:
    """A `StreamState` that continues the saved world (a file or a `WorldState`) with `pipe`.

    `decoder` (a streaming VAE decoder) is resumed too when given. Refuses, naming the difference, a
    state of another model family, config or weights, other sampling or KV-cache settings.
    """
    world = source if isinstance(source, WorldState) else read_world_state(source)
    header, tensors = world.header, world.tensors
    saved_id = header["identity"]
    _refuse_mismatch("model family", saved_id["family"], identity["family"])
    _refuse_mismatch("model config", saved_id["config"], identity["config"])
    _refuse_mismatch("model weights (fingerprint)", saved_id["weights"], identity["weights"])
    settings = header["settings"]
    _refuse_mismatch("sampling", settings["sampling"], json.loads(json.dumps(dataclasses.asdict(pipe.sampling))))
    h, w = settings["latent_size"]
    b, cfg = settings["batch_size"], pipe.model.config
    image = torch.zeros(b, 1, cfg.clip_dim, dtype=pipe.dtype) if getattr(cfg, "has_image_input", False) else None
    fresh = pipe.start_stream(  # the cache only: its prompt (and Wan I2V image) K/V are replaced by the saved ones
        torch.zeros(b, 1, cfg.context_dim, dtype=pipe.dtype), h, w, batch_size=b, max_frames=None, image_context=image
    )
    here = cache_identity(pipe.cache_config, fresh.cache.spec, fresh.cache)
    _refuse_mismatch("KV cache settings", settings["cache"], here)
    cache = fresh.cache
    cache_t = {k[len("cache.") :]: v for k, v in tensors.items() if k.startswith("cache.")}
    _restore_stream_cache(cache, cache_t, header["cache"])
    dev = pipe.device
    n = header["text_layers"]
    text = CrossAttentionCache(
        [tensors[f"text.k.{i}"].to(dev) for i in range(n)], [tensors[f"text.v.{i}"].to(dev) for i in range(n)]
    )
    if "text.ik.0" in tensors:  # Wan 2.1 I2V: the start image's K/V
        text.image_keys = [tensors[f"text.ik.{i}"].to(dev) for i in range(n)]
        text.image_values = [tensors[f"text.iv.{i}"].to(dev) for i in range(n)]
    elif getattr(pipe.model.config, "has_image_input", False):
        raise ConfigError("this world state holds no start-image K/V but this model (Wan 2.1 I2V) needs them")
    noise = ResumedNoise(0, device=header["noise"]["device"])
    noise.generator.set_state(tensors["noise.generator"])
    upfront = tensors.get("noise.upfront")
    noise._upfront = None if upfront is None else upfront.to(noise.device)
    if decoder is not None:
        _restore_decoder(decoder, header["decoder"], tensors, dev)
    if pipe.first_frame_encoder is not None:
        if header.get("pixel_window") is None:
            raise ConfigError("this world state holds no pixel window for Krea's keep_first_frame=False re-encode; "
                              "save it again with this Inferix, or resume with keep_first_frame=True")  # fmt: skip
        _restore_window(pipe.first_frame_encoder, header["pixel_window"], tensors, dev)
    pos = header["position"]
    pipe.kv_cache = cache
    state = StreamState(cache, text, noise, h, w, settings["batch_size"], pos["next_frame"], pos["next_block"])
    pipe.lease_cache(state)  # `fresh` goes away here; the cache is this state's now (CUDA-graph runners)
    state.shot_index, state.rope_offset = pos.get("shot_index", 0), pos.get("rope_offset", 0.0)  # LongLive 2.0 shots
    for name in _STATE_TENSORS:
        if f"state.{name}" in tensors:
            setattr(state, name, tensors[f"state.{name}"].to(dev))
    return state


def _restore_decoder(decoder, meta: dict | None, tensors: dict, device) -> None:
    if meta is None:
        raise ConfigError("this world state was saved without the VAE decoder's cache; load it with decoder=None")
    from ..vae.layers import CausalConvCache
    from ..vae.streaming import DecodeState

    kind = meta.get("kind", "wan")
    if not hasattr(decoder, "state"):  # the loop's own pixels (Krea's window, restored with the pipeline)
        here = "pixel_window"
    else:
        here = "tiny" if type(decoder.state) is TinyDecodeState else "wan"
    if kind != here:
        raise ConfigError(f"this world state holds a {kind} VAE decoder's cache; this run decodes with a {here} VAE")
    if kind == "pixel_window":
        return
    if kind == "tiny":
        prev = tensors.get("decoder.previous")
        decoder.state = TinyDecodeState(None if prev is None else prev.to(device).clone(), meta["latent_frames_in"])
        return
    caches = {}
    for c in meta["caches"]:
        ty, tx = c["tile"]
        frames = {k: tensors[f"decoder.{ty}.{tx}.{k}"].to(device).clone() for k in c["frames"]}
        caches[(ty, tx)] = CausalConvCache(frames, set(c["started"]), c["first_frame_bypass"])
    decoder.state = DecodeState(caches, meta["latent_frames_in"], meta["frames_out"], meta["frames_to_drop"])
