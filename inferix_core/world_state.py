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
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .cache.snapshot import cache_identity, restore_cache, snapshot_cache
from .errors import ConfigError, MissingFileError
from .models.wan.action_module import ActionKVCache
from .models.wan.causal_transformer import CrossAttentionCache
from .pipeline import BlockDiffusionPipeline, SeededNoise
from .pipeline.block_diffusion import StreamState

FORMAT = "inferix-world-state/1"
_STATE_TENSORS = ("first_latent", "recent_latents", "clean_prefix")  # optional StreamState tensors (Krea, TI2V)


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
    s = decoder.state
    tensors, caches = {}, []
    for (ty, tx), cache in s.caches.items():
        for key, t in cache.frames.items():
            tensors[f"decoder.{ty}.{tx}.{key}"] = t
        caches.append({"tile": [ty, tx], "frames": sorted(cache.frames), "started": sorted(cache.started),
                       "first_frame_bypass": cache.first_frame_bypass})  # fmt: skip
    meta = {"latent_frames_in": s.latent_frames_in, "frames_out": s.frames_out,
            "frames_to_drop": s.frames_to_drop, "caches": caches}  # fmt: skip
    return tensors, meta


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
    """Write `state` (and the streaming `decoder`'s cache, if given) to `path`; never overwrites a file.

    `extra` (JSON) and `extra_tensors` are the caller's own (a session's input history, ...): they come
    back from `read_world_state` as header["extra"] and the tensors named "extra.<name>".
    """
    path = Path(path)
    if path.exists():
        raise ConfigError(f"'{path}' exists; choose a new file name for the world state (it is never overwritten)")
    cache_t, cache_meta = _snapshot_stream_cache(state.cache)
    tensors = {f"cache.{k}": v for k, v in cache_t.items()}
    for name in _STATE_TENSORS:
        if getattr(state, name) is not None:
            tensors[f"state.{name}"] = getattr(state, name)
    tensors.update({f"extra.{k}": v for k, v in (extra_tensors or {}).items()})
    for i, (k, v) in enumerate(zip(state.text.keys, state.text.values, strict=True)):
        tensors[f"text.k.{i}"], tensors[f"text.v.{i}"] = k, v
    noise_t, noise_meta = _noise_tensors(state.noise)
    tensors.update(noise_t)
    decoder_meta = None
    if decoder is not None:
        dec_t, decoder_meta = _decoder_tensors(decoder)
        tensors.update(dec_t)
    header = {
        "format": FORMAT,
        "identity": identity,
        "settings": _settings(pipe, state),
        "cache": cache_meta,
        "noise": noise_meta,
        "decoder": decoder_meta,
        "position": {"next_frame": state.next_frame, "next_block": state.next_block},
        "text_layers": len(state.text.keys),
        "extra": extra or {},
    }
    tensors = {k: v.detach().contiguous().to("cpu") for k, v in tensors.items()}
    tmp = path.with_name(f".{path.name}.partial")
    save_file(tensors, str(tmp), metadata={"world_state": json.dumps(header)})
    os.replace(tmp, path)  # atomic on one filesystem: a reader sees no file or the whole state
    return path


def read_world_state(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The header and tensors of a world-state file (one-line errors for a file that is not one)."""
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
    return header, tensors


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
    path: str | Path, pipe: BlockDiffusionPipeline, *, identity: dict[str, Any], decoder=None
) -> StreamState:
    """A `StreamState` that continues the saved world with `pipe` (and resumes `decoder`, if given)."""
    header, tensors = read_world_state(path)
    saved_id = header["identity"]
    _refuse_mismatch("model family", saved_id["family"], identity["family"])
    _refuse_mismatch("model config", saved_id["config"], identity["config"])
    _refuse_mismatch("model weights (fingerprint)", saved_id["weights"], identity["weights"])
    settings = header["settings"]
    _refuse_mismatch("sampling", settings["sampling"], json.loads(json.dumps(dataclasses.asdict(pipe.sampling))))
    h, w = settings["latent_size"]
    fresh = pipe.start_stream(
        torch.zeros(settings["batch_size"], 1, pipe.model.config.context_dim, dtype=pipe.dtype),
        h, w, batch_size=settings["batch_size"], max_frames=None,
    )  # fmt: skip
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
    noise = SeededNoise(0, device=header["noise"]["device"])
    noise.generator.set_state(tensors["noise.generator"])
    upfront = tensors.get("noise.upfront")
    noise._upfront = None if upfront is None else upfront.to(noise.device)
    if decoder is not None:
        _restore_decoder(decoder, header["decoder"], tensors, dev)
    pos = header["position"]
    pipe.kv_cache = cache
    state = StreamState(cache, text, noise, h, w, settings["batch_size"], pos["next_frame"], pos["next_block"])
    for name in _STATE_TENSORS:
        if f"state.{name}" in tensors:
            setattr(state, name, tensors[f"state.{name}"].to(dev))
    return state


def _restore_decoder(decoder, meta: dict | None, tensors: dict, device) -> None:
    if meta is None:
        raise ConfigError("this world state was saved without the VAE decoder's cache; load it with decoder=None")
    from .vae.layers import CausalConvCache
    from .vae.streaming import DecodeState

    caches = {}
    for c in meta["caches"]:
        ty, tx = c["tile"]
        frames = {k: tensors[f"decoder.{ty}.{tx}.{k}"].to(device) for k in c["frames"]}
        caches[(ty, tx)] = CausalConvCache(frames, set(c["started"]), c["first_frame_bypass"])
    decoder.state = DecodeState(caches, meta["latent_frames_in"], meta["frames_out"], meta["frames_to_drop"])
