"""Files shipped inside the package: the bundled world model (weights, config) of the procedural driving world.

`bundled_model_paths()` says where the files are; `load_bundled()` builds the transformer, the
autoencoder, the fixed learned prompt and the settings from them (the registry's "bundled" entry can
use either). Nothing here downloads anything.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import MissingFileError

logger = logging.getLogger(__name__)

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"


@dataclass
class BundledWorldModel:
    """Everything needed to run the bundled model through BlockDiffusionPipeline."""

    transformer: torch.nn.Module  # CausalWanTransformer
    vae: torch.nn.Module  # TinyCausalAE
    context: torch.Tensor  # (1, text_len, text_dim): the fixed learned prompt
    config: dict  # config.json

    @property
    def action_names(self) -> list[str]:
        return list(self.config["actions"])

    def sampling_config(self):
        from ..pipeline.block_diffusion import SamplingConfig

        return SamplingConfig(**self.config["sampling"])

    def cache_config(self):
        from ..cache.spec import KVCacheConfig

        return KVCacheConfig(**self.config["cache"])

    def one_hot(self, actions: list[int] | torch.Tensor) -> torch.Tensor:
        """Latent-frame action ids [F] (or [B, F]) → one-hot float (B, F, action_dim)."""
        a = torch.as_tensor(actions, dtype=torch.long)
        a = a.unsqueeze(0) if a.ndim == 1 else a
        return torch.nn.functional.one_hot(a, len(self.action_names)).float()


def bundled_model_paths(directory: str | Path | None = None) -> dict[str, Path]:
    """Paths of the bundled model's files; raises MissingFileError naming what is absent.

    Keys: "transformer" (canonical Wan keys + `bundled_context` (1, text_len, text_dim), float16),
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


def load_bundled(
    directory: str | Path | None = None, device: str | torch.device = "cpu", random_transformer: bool = False
) -> BundledWorldModel:
    """Build the bundled model in float32 on `device`.

    Args:
        random_transformer: keep the transformer (and prompt) at random init, for tests proving that a
            quality threshold discriminates; the autoencoder is still the trained one.
    """
    from safetensors.torch import load_file

    from ..models.wan.causal_transformer import CausalWanTransformer
    from ..models.wan.config import WanConfig
    from ..vae.tiny_ae import TinyAEConfig, TinyCausalAE

    paths = bundled_model_paths(directory)
    config = json.loads(paths["config"].read_text())
    wcfg = WanConfig.from_dict(config["transformer"])
    transformer = CausalWanTransformer(wcfg)
    sd = {k: v.float() for k, v in load_file(str(paths["transformer"])).items()}
    context = sd.pop("bundled_context")
    if random_transformer:
        torch.manual_seed(0)
        context = torch.randn_like(context)
    else:
        transformer.load_state_dict(sd)
    vae = TinyCausalAE.from_file(paths["vae"], TinyAEConfig.from_dict(config["vae"]["config"]))
    logger.info(
        "loaded the bundled world model from %s (%s)",
        paths["config"].parent,
        "random transformer" if random_transformer else "trained",
    )
    return BundledWorldModel(transformer.to(device).eval(), vae.to(device).eval(), context.to(device), config)


__all__ = ["BUNDLED_DIR", "BundledWorldModel", "bundled_model_paths", "load_bundled"]
