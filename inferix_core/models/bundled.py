"""The bundled toy world model (procedural driving world): built from the files in inferix_core/assets/bundled.

`load_bundled()` builds the transformer, the autoencoder, the prompt and the settings; the registry's
"bundled" entry (registry.py) wraps it in a WorldModel. The files themselves and where they are belong
to `inferix_core.assets`, which is data only.

Two prompt layouts load: v2 files carry a learned word table `bundled_vocabulary` (V, text_dim) and a
`prompt` section in config.json, so a prompt names the scene (`VocabularyPromptEncoder`); v1 files carry
one fixed learned context `bundled_context` (1, text_len, text_dim) and no prompt encoder.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..assets import bundled_model_paths
from ..cache.spec import KVCacheConfig
from ..errors import ConfigError
from ..scheduler import SamplingConfig
from ..text.vocabulary import VocabularyConfig, VocabularyPromptEncoder
from ..vae.tiny_ae import TinyAEConfig, TinyCausalAE
from .wan.causal_transformer import CausalWanTransformer
from .wan.config import WanConfig

logger = logging.getLogger(__name__)


@dataclass
class BundledWorldModel:
    """Everything needed to run the bundled model through BlockDiffusionPipeline."""

    transformer: CausalWanTransformer
    vae: TinyCausalAE
    context: torch.Tensor  # (1, text_len, text_dim): the default prompt (v1: the only one)
    config: dict  # config.json
    prompt_encoder: VocabularyPromptEncoder | None = None  # v2: prompt text → context; v1: None

    @property
    def takes_prompt(self) -> bool:
        return self.prompt_encoder is not None

    def encode_prompt(self, prompt: str) -> torch.Tensor:
        """Prompt text → (1, text_len, text_dim); v1 models have one context and ignore the text."""
        return self.context if self.prompt_encoder is None else self.prompt_encoder.encode([prompt])

    @property
    def action_names(self) -> list[str]:
        return list(self.config["actions"])

    def sampling_config(self) -> SamplingConfig:
        return SamplingConfig(**self.config["sampling"])

    def cache_config(self) -> KVCacheConfig:
        return KVCacheConfig(**self.config["cache"])

    def one_hot(self, actions: list[int] | torch.Tensor) -> torch.Tensor:
        """Latent-frame action ids [F] (or [B, F]) → one-hot float (B, F, action_dim)."""
        a = torch.as_tensor(actions, dtype=torch.long)
        a = a.unsqueeze(0) if a.ndim == 1 else a
        return torch.nn.functional.one_hot(a, len(self.action_names)).float()


def load_bundled(
    directory: str | Path | None = None, device: str | torch.device = "cpu", random_transformer: bool = False
) -> BundledWorldModel:
    """Build the bundled model in float32 on `device`.

    Args:
        random_transformer: keep the transformer (and prompt) at random init, for tests proving that a
            quality threshold discriminates; the autoencoder is still the trained one.
    """
    paths = bundled_model_paths(directory)
    config = json.loads(paths["config"].read_text())
    wcfg = WanConfig.from_dict(config["transformer"])
    transformer = CausalWanTransformer(wcfg)
    sd = {k: v.float() for k, v in load_file(str(paths["transformer"])).items()}
    encoder = None
    if "bundled_vocabulary" in sd:  # v2: a word table and its vocabulary
        if "prompt" not in config:
            raise ConfigError(
                f"{paths['transformer']} has a prompt table (bundled_vocabulary) but {paths['config']} has no "
                "'prompt' section; copy config.json from the same training run"
            )
        table = sd.pop("bundled_vocabulary")
        if random_transformer:
            torch.manual_seed(0)
            table = torch.randn_like(table)
        encoder = VocabularyPromptEncoder(VocabularyConfig.from_dict(config["prompt"]), table).requires_grad_(False)
        context = encoder.encode([""])  # the default scene
    else:
        context = sd.pop("bundled_context")
        if random_transformer:
            torch.manual_seed(0)
            context = torch.randn_like(context)
    if not random_transformer:
        transformer.load_state_dict(sd)
    vae = TinyCausalAE.from_file(paths["vae"], TinyAEConfig.from_dict(config["vae"]["config"]))
    logger.info(
        "loaded the bundled world model from %s (%s)",
        paths["config"].parent,
        "random transformer" if random_transformer else "trained",
    )
    if encoder is not None:
        encoder = encoder.to(device)
        context = encoder.encode([""])
    return BundledWorldModel(transformer.to(device).eval(), vae.to(device).eval(), context.to(device), config, encoder)


__all__ = ["BundledWorldModel", "load_bundled"]
