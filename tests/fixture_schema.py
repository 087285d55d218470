"""The fixture schema the tests rely on (tests/fixtures/README.md), as code: kinds, documented keys, validation.

A fixture's kind comes from its content (weight names, `info.config`), never from its file name or a tag:

* ``causal_wan``     a Self-Forcing-schema transformer run (Self-Forcing, CausVid, LongLive, Causal-Forcing, Krea);
* ``matrix_game2``   a Matrix-Game 2.0 pipeline run (`config.action_config`);
* ``action_module``  one Matrix-Game 2.0 ActionModule (bare `keyboard_embed.*` weights);
* ``wan_vae``        the Wan 2.1 VAE;
* ``other``          one of this repository's own fixtures outside the shared schema (validated for `info` only).

`python -m tests.fixture_schema strip SRC DST [--prefix P]` writes copies of SRC's fixtures that keep only the
documented keys (and the optional extras listed in `OPTIONAL_*`), the way a fixture written to the shared README
looks: the held-out check of issue #49 runs the suite on such copies.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# --- documented keys (shared READMEs: README.md, README_families.md, README_matrix_game2.md) ---------------------

WAN_CONFIG = ("model_type", "patch_size", "text_len", "in_dim", "dim", "ffn_dim", "freq_dim", "text_dim", "out_dim",
              "num_heads", "num_layers", "qk_norm", "cross_attn_norm", "eps")  # fmt: skip
PIPELINE = ("denoising_step_list", "warp_denoising_step", "timestep_shift", "num_train_timesteps", "scheduler",
            "num_frame_per_block", "context_noise", "num_latent_frames", "num_blocks", "latent_shape",
            "independent_first_frame", "local_attn_size", "sink_size", "frame_seq_length", "kv_cache_size_tokens")  # fmt: skip
PIPELINE_FAMILIES = ("global_sink", "max_attention_size_tokens", "use_ema", "timesteps_used", "noise_seed",
                     "renoise_seed", "denoising_step_list_config", "drop_final_zero", "context_timestep",
                     "uniform_timestep")  # fmt: skip
PIPELINE_MG2 = ("mode", "latent_layout", "num_pixel_frames", "num_visual_tokens", "clip_dim",
                "action_kv_cache_size_frames", "action_heads", "action_head_dim", "enable_mouse", "enable_keyboard",
                "keyboard_dim_in", "mouse_dim_in", "initial_latent", "batch_size", "kv_cache_recorded_after_blocks",
                "action_cache_recorded_layer", "seeds", "dtype", "device")  # fmt: skip
# settings a family's run may add that the shared READMEs do not name; each has a default (README.md here)
OPTIONAL_PIPELINE = {
    "denoising_step_list_first_chunk": None,  # Causal-Forcing: the first block's own steps
    "do_kv_recomp": False,  # Krea: recompute the KV cache before every block
    "kv_cache_num_frames": 0,  # Krea: frames recomputed
    "keep_first_frame": True,  # Krea: false = re-encode the window's first frame (needs `vae_file`)
}
TRACE = ("model_calls", "calls_per_block", "evictions_all_layers", "evictions_per_layer", "eviction_calls_layer0",
         "local_end_after_block_layer0", "global_end_after_block_layer0", "calls")  # fmt: skip
TRACE_MG2 = ("model_calls", "calls_per_block", "call_labels_check", "action_rows_passed_per_block",
             "crossattn_cache_computed_on_call", "evictions_all_layers_main", "eviction_layers_main",
             "eviction_calls_layer0_main", "local_end_after_block_layer0_main",
             "global_end_after_block_layer0_main")  # fmt: skip
TRACE_MG2_ACTION = re.compile(r"^(evictions_all_layers|eviction_layers)_(mouse|keyboard)$"
                              r"|^(eviction_calls|local_end_after_block|global_end_after_block)_layer\d+_(mouse|keyboard)$")  # fmt: skip
TOP = ("config", "pipeline", "trace", "weights_file", "lora", "switch", "reference",
       "frame_seq_length", "num_frame_per_block", "kv_cache_size_tokens")  # fmt: skip
OPTIONAL_TOP = {"vae_file": None, "reencode_blocks": None}  # Krea keep_first_frame=False: its VAE and re-encoded blocks
LORA = ("rank", "alpha", "scaling", "dropout", "container_key", "target_modules", "peft_config", "use_rslora",
        "use_dora")  # fmt: skip
SWITCH = ("switch_frame_indices", "switch_block_indices", "recache_frames", "sink_recache_after_switch")
# trace.calls entries: label and current_start are documented; the frame count's name is not (the tests read the
# frame count from the call's stored `.input`); `start_frame`, `reset_before`, `recompute` are optional extras
# (strip drops `start_frame`, so a stripped copy exercises the current_start path)
CALL = ("label", "current_start", "local_end", "global_end")
OPTIONAL_CALL = {"start_frame": None, "reset_before": False, "recompute": False}
VAE_TOP = ("config", "num_latent_frames", "z_shape", "video_shape", "decode", "encode", "cached_decode",
           "stream_block3_zero_cache", "weights_file")  # fmt: skip
ACTION_TOP = ("config", "call", "trace", "reference")


def weight_keys(keys) -> list[str]:
    return [k[len("weights.") :] for k in keys if k.startswith("weights.")]


def fixture_kind(info: dict, keys) -> str:
    """The schema a fixture follows, from its content (weight names, `config`), never its name or a tag."""
    cfg = info.get("config") or {}
    w = set(weight_keys(keys))
    if "keyboard_embed.0.weight" in w or ("call" in info and "mouse_qk_dim_list" in cfg):
        return "action_module"
    if isinstance(cfg.get("action_config"), dict) or any(".action_model." in k for k in w):
        return "matrix_game2"
    if "z_dim" in cfg and "dim_mult" in cfg and "dec_dim" not in cfg and "decode" in info:
        return "wan_vae"
    if cfg.get("model_type", "t2v") == "t2v" and "dim" in cfg and "pipeline" in info and "trace" in info:
        return "causal_wan"
    return "other"


OWN_KINDS = ("wan22_ti2v", "longlive2_run", "longlive2_lora", "unipc", "wan22_vae", "wan_i2v", "clip_vision")


def own_kind(info: dict, keys) -> str | None:
    """Which of this repository's own schemas an `other` fixture follows (tests/fixtures/README.md "Files"), from its
    tensors and `info` (never its name): `wan22_ti2v` (gen_wan22_ti2v: `flow_ti2v`), `longlive2_run` /
    `longlive2_lora` (gen_longlive2*: `info.run`, `output_latents`; the LoRA one with `merged.*`), `unipc`
    (gen_longlive2_unipc: `case0.samples`), `wan22_vae` (gen_wan22_vae: `config.dec_dim`, `z`), `wan_i2v`
    (gen_wan_i2v: `clip_tokens`, `pipeline`) and `clip_vision` (gen_matrix_game2_clip: `weights.visual.*`, `tokens`)."""
    if fixture_kind(info, keys) != "other":
        return None
    names = set(keys)
    cfg = info.get("config") or {}
    if "flow_ti2v" in names and "timestep_per_frame" in names:
        return "wan22_ti2v"
    if isinstance(info.get("run"), dict) and "output_latents" in names:
        return "longlive2_lora" if any(k.startswith("merged.") for k in names) else "longlive2_run"
    if "case0.samples" in names and "A" in names:
        return "unipc"
    if "dec_dim" in cfg and "z_dim" in cfg and "z" in names:
        return "wan22_vae"
    if "clip_tokens" in names and "cond_concat" in names and "pipeline" in info:
        return "wan_i2v"
    if "tokens" in names and any(k.startswith("weights.visual.") for k in names):
        return "clip_vision"
    return None


def _shape(t) -> list[int]:
    return list(t.shape) if hasattr(t, "shape") else list(t.get_shape())


def validate(path: Path, info: dict, tensors: dict) -> list[str]:
    """Problems of one fixture against the schema (empty = valid). `tensors` maps names to tensors or slices."""
    kind = fixture_kind(info, tensors)
    if kind == "other":
        return [] if isinstance(info, dict) and info else ["info is not a JSON object"]
    if kind == "wan_vae":
        return _validate_vae(info, tensors)
    if kind == "action_module":
        return _validate_action_module(info, tensors)
    return _validate_run(path, kind, info, tensors)


def _missing(obj: dict, keys, where: str) -> list[str]:
    return [f"{where}.{k} missing" for k in keys if k not in obj]


def _validate_run(path: Path, kind: str, info: dict, t: dict) -> list[str]:
    errs = _missing(info, ("config", "pipeline", "trace"), "info")
    if errs:
        return errs
    cfg, p = info["config"], info["pipeline"]
    errs += _missing(cfg, WAN_CONFIG, "config") + _missing(p, PIPELINE, "pipeline")
    if kind == "matrix_game2":
        errs += _missing(p, ("enable_mouse", "num_pixel_frames"), "pipeline")
    if errs:
        return errs
    w = {k[len("weights.") :]: v for k, v in t.items() if k.startswith("weights.")}
    if not w:
        if "weights_file" not in info:
            return ["neither weights.* nor info.weights_file"]
        if not (path.parent / info["weights_file"]).exists():
            return [f"weights_file {info['weights_file']} not beside it"]
    n, nb, F = p["num_frame_per_block"], p["num_blocks"], p["num_latent_frames"]
    dim, heads = cfg["dim"], cfg["num_heads"]
    ph, pw = cfg["patch_size"][1:]
    bfchw = kind == "causal_wan"  # Self-Forcing fixtures are [B, F, C, H, W]; Matrix-Game's are [B, C, F, H, W]
    shape = p["latent_shape"]
    B, C, H, W = (shape[0], shape[2], shape[3], shape[4]) if bfchw else (shape[0], shape[1], shape[3], shape[4])
    frames = shape[1] if bfchw else shape[2]

    def check(cond, msg):
        if not cond:
            errs.append(msg)

    check(frames == F, f"latent_shape {shape} has {frames} frames, num_latent_frames {F}")
    first = 1 if p["independent_first_frame"] else 0
    check(first + nb * n == F or nb * n == F, f"num_blocks {nb} × {n} frames ≠ {F} frames")
    check(cfg["out_dim"] == C, f"latent channels {C} ≠ config.out_dim {cfg['out_dim']}")
    check((H // ph) * (W // pw) == p["frame_seq_length"], f"frame_seq_length {p['frame_seq_length']} ≠ (H/2)(W/2)")
    check(dim % heads == 0, f"dim {dim} not divisible by num_heads {heads}")
    for name in ("noise", "output_latents"):
        check(name in t and _shape(t[name]) == shape, f"{name} missing or not latent_shape {shape}")
    for name in ("scheduler.sigmas", "scheduler.timesteps", "sigmas_used"):
        check(name in t, f"tensor {name} missing")
    steps = len(p["denoising_step_list"])
    check(any(k in t for k in ("timesteps_warped", "timesteps_used")), "neither timesteps_warped nor timesteps_used")
    tw = t.get("timesteps_warped", t.get("timesteps_used"))
    if tw is not None and not p.get("denoising_step_list_first_chunk"):
        check(_shape(tw) == [steps], f"timesteps {_shape(tw)} for {steps} steps")
    if kind == "causal_wan":
        check("text_context" in t and _shape(t["text_context"])[-1] == cfg["text_dim"], "text_context [.., text_dim]")
    else:
        errs += _validate_mg2_inputs(cfg, p, t, (B, F, H, W))
    block = _shape(t["block0.step0.input"]) if "block0.step0.input" in t else None
    check(block is not None, "block0.step0.input missing")
    for b in range(nb):
        for s in range(steps if b or not p.get("denoising_step_list_first_chunk") else 1):
            for suffix in ("input", "timestep", "flow_pred", "x0_pred"):
                check(f"block{b}.step{s}.{suffix}" in t, f"block{b}.step{s}.{suffix} missing")
    for k, v in t.items():
        m = re.fullmatch(r"kv_cache\.layer(\d+)\.after_block(\d+)\.[kv]", k)
        if m:
            s = _shape(v)
            check(int(m[1]) < cfg["num_layers"] and int(m[2]) < nb, f"{k}: no such layer/block")
            check(s[0] == B and s[2:] == [heads, dim // heads], f"{k} {s} ≠ [B, ·, {heads}, {dim // heads}]")
            if p["local_attn_size"] > 0:
                check(s[1] <= p["kv_cache_size_tokens"], f"{k} holds {s[1]} > kv_cache_size_tokens tokens")
    if w:
        errs += _validate_wan_weights(cfg, w, kind)
    errs += _validate_lora(info, t)
    return errs


def _validate_mg2_inputs(cfg: dict, p: dict, t: dict, bfhw) -> list[str]:
    B, F, H, W = bfhw
    errs = []
    ac = cfg.get("action_config") or {}
    rows = p["num_pixel_frames"]
    if rows != 1 + 4 * (F - 1):
        errs.append(f"num_pixel_frames {rows} ≠ 1 + 4(F − 1)")
    if _shape(t.get("cond_concat", [])) != [B, cfg["in_dim"] - cfg["out_dim"], F, H, W]:
        errs.append("cond_concat ≠ [B, in_dim − out_dim, F, H, W]")
    kd = ac.get("keyboard_dim_in", p.get("keyboard_dim_in"))
    if "keyboard_cond" not in t or _shape(t["keyboard_cond"]) != [B, rows, kd]:
        errs.append(f"keyboard_cond ≠ [B, {rows}, keyboard_dim_in {kd}]")
    if p["enable_mouse"] and ("mouse_cond" not in t or _shape(t["mouse_cond"])[:2] != [B, rows]):
        errs.append(f"mouse_cond ≠ [B, {rows}, ·] while enable_mouse")
    vc = t.get("visual_context")
    if vc is None or ("clip_dim" in cfg and _shape(vc)[-1] != cfg["clip_dim"]):
        errs.append("visual_context missing or not [.., clip_dim]")
    return errs


def _validate_wan_weights(cfg: dict, w: dict, kind: str) -> list[str]:
    errs = []
    dim, L = cfg["dim"], cfg["num_layers"]
    layers = {int(m[1]) for k in w if (m := re.match(r"blocks\.(\d+)\.", k))}
    if layers != set(range(L)):
        errs.append(f"weights hold blocks {sorted(layers)}, config.num_layers {L}")
    expect = {
        "patch_embedding.weight": [dim, cfg["in_dim"], *cfg["patch_size"]],
        "blocks.0.self_attn.q.weight": [dim, dim],
        "blocks.0.ffn.0.weight": [cfg["ffn_dim"], dim],
        "time_embedding.0.weight": [dim, cfg["freq_dim"]],
        "head.head.weight": [cfg["out_dim"] * cfg["patch_size"][0] * cfg["patch_size"][1] * cfg["patch_size"][2], dim],
    }
    if kind == "causal_wan":
        expect["text_embedding.0.weight"] = [dim, cfg["text_dim"]]
    for k, s in expect.items():
        if k not in w or _shape(w[k]) != s:
            errs.append(f"weights.{k} {_shape(w[k]) if k in w else 'missing'} ≠ {s} from config")
    if kind == "matrix_game2":
        blocks = cfg["action_config"].get("blocks")
        have = sorted({int(m[1]) for k in w if (m := re.match(r"blocks\.(\d+)\.action_model\.", k))})
        if blocks is not None and have != sorted(blocks):
            errs.append(f"action modules in blocks {have}, action_config.blocks {blocks}")
    return errs


def _validate_lora(info: dict, t: dict) -> list[str]:
    lora = {k: v for k, v in t.items() if k.startswith("lora.")}
    if not lora:
        return []
    errs = _missing(info.get("lora", {}), ("rank", "alpha"), "info.lora")
    rank = info.get("lora", {}).get("rank")
    for k, v in lora.items():
        s = _shape(v)
        if k.endswith("lora_A.weight") and s[0] != rank:
            errs.append(f"{k} {s}: lora_A is [rank {rank}, in]")
        elif k.endswith("lora_B.weight") and s[1] != rank:
            errs.append(f"{k} {s}: lora_B is [out, rank {rank}]")
    return errs


def _validate_vae(info: dict, t: dict) -> list[str]:
    errs = _missing(info, ("config", "z_shape", "video_shape", "decode"), "info")
    if errs:
        return errs
    cfg = info["config"]
    zs, vs = info["z_shape"], info["video_shape"]
    if zs[1] != cfg["z_dim"]:
        errs.append(f"z_shape {zs} channels ≠ z_dim {cfg['z_dim']}")
    if vs[2] != 1 + 4 * (zs[2] - 1) or vs[3:] != [8 * zs[3], 8 * zs[4]]:
        errs.append(f"video_shape {vs} does not decode from z_shape {zs}")
    for name, s in (("z", zs), ("decode_output", vs)):
        if name not in t or _shape(t[name]) != s:
            errs.append(f"{name} missing or not {s}")
    for name in ("latent_mean", "latent_std"):
        if name not in t or _shape(t[name]) != [cfg["z_dim"]]:
            errs.append(f"{name} missing or not [z_dim]")
    return errs


def _validate_action_module(info: dict, t: dict) -> list[str]:
    errs = _missing(info, ("config", "call"), "info")
    if errs:
        return errs
    cfg, call = info["config"], info["call"]
    errs += _missing(cfg, ("heads_num", "keyboard_dim_in", "windows_size", "local_attn_size"), "config")
    errs += _missing(call, ("num_blocks", "num_frame_per_block", "th", "tw"), "call")
    if errs:
        return errs
    kb = t.get("keyboard_cond")
    if kb is None or _shape(kb)[-1] != cfg["keyboard_dim_in"]:
        errs.append("keyboard_cond missing or not [.., keyboard_dim_in]")
    for b in range(call["num_blocks"]):
        if f"block{b}.call0.hidden_states" not in t:
            errs.append(f"block{b}.call0.hidden_states missing")
    return errs


# --- strip: a copy that keeps only documented keys (plus the optional extras) -------------------------------------


def strip_info(info: dict, kind: str) -> dict:
    if kind == "other":
        return info
    if kind == "wan_vae":
        return {k: v for k, v in info.items() if k in VAE_TOP}
    if kind == "action_module":
        return {k: v for k, v in info.items() if k in ACTION_TOP}
    out = {k: v for k, v in info.items() if k in TOP or k in OPTIONAL_TOP}
    keep = set(PIPELINE) | set(PIPELINE_FAMILIES) | set(OPTIONAL_PIPELINE) | set(PIPELINE_MG2)
    out["pipeline"] = {k: v for k, v in info["pipeline"].items() if k in keep}
    tr = info.get("trace", {})
    out["trace"] = {k: v for k, v in tr.items() if k in TRACE or k in TRACE_MG2 or TRACE_MG2_ACTION.match(k)}
    if isinstance(tr.get("calls"), list) and tr["calls"] and isinstance(tr["calls"][0], dict):
        fsl = info["pipeline"]["frame_seq_length"]
        calls = []
        for c in tr["calls"]:
            d = {k: v for k, v in c.items() if k in CALL or (k in OPTIONAL_CALL and k != "start_frame")}
            if "current_start" not in d and "start_frame" in c:
                d["current_start"] = c["start_frame"] * fsl
            d["num_frames"] = c.get("frames", c.get("num_frames"))  # a name the tests must not rely on
            calls.append(d)
        out["trace"]["calls"] = calls
    for key, allowed in (("lora", LORA), ("switch", SWITCH)):
        if isinstance(info.get(key), dict):
            out[key] = {k: v for k, v in info[key].items() if k in allowed}
    return out


def strip_file(src: Path, dst: Path, prefix: str = "") -> str:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(src), "pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    if "info" not in meta:
        dst.write_bytes(src.read_bytes())
        return "copied (no info)"
    info = json.loads(meta["info"])
    kind = fixture_kind(info, tensors)
    info = strip_info(info, kind)
    for key in ("weights_file", "vae_file"):  # files named beside it are renamed with it
        if isinstance(info.get(key), str):
            info[key] = prefix + info[key]
    save_file(tensors, str(dst), metadata={"info": json.dumps(info, sort_keys=True)})
    return kind


def _main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "strip":
        print("usage: python -m tests.fixture_schema strip SRC_DIR DST_DIR [--prefix P]")
        return 2
    src, dst = Path(argv[1]), Path(argv[2])
    prefix = argv[argv.index("--prefix") + 1] if "--prefix" in argv else ""
    dst.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.glob("*.safetensors")):
        print(p.name, "->", prefix + p.name, strip_file(p, dst / (prefix + p.name), prefix))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
