"""Files shipped inside the package: the bundled world model (weights, config) of the procedural driving world.

`bundled_model_paths()` says where the files are. This package is data only (it imports nothing of the
engine but errors.py); `inferix_core.models.bundled.load_bundled` builds the networks from these files.
Nothing here downloads anything.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import MissingFileError

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"


def bundled_model_paths(directory: str | Path | None = None) -> dict[str, Path]:
    """Paths of the bundled model's files; raises MissingFileError naming what is absent.

    Keys: "transformer" (canonical Wan keys, float16, plus the prompt: v2 `bundled_vocabulary` (V, text_dim),
    the word table of config.json's `prompt` section; v1 `bundled_context` (1, text_len, text_dim)),
    "vae" (TinyCausalAE weights, float16; load with `TinyCausalAE.from_file`, not WanVAE) and
    "config" (config.json: WanConfig, sampling, cache window, action names, fps, sizes, training record).
    """
    d = Path(directory) if directory is not None else BUNDLED_DIR
    paths = {"transformer": d / "transformer.safetensors", "vae": d / "vae.safetensors", "config": d / "config.json"}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        raise MissingFileError(
            f"bundled world model files are missing: {missing}. They ship with the package; reinstall it, "
            "or retrain with `python -m training.train_bundled` and copy the output into inferix_core/assets/bundled/"
        )
    return paths


__all__ = ["BUNDLED_DIR", "bundled_model_paths"]
