"""Causal (block-autoregressive) Wan 2.1 transformer family."""

from .config import WanConfig

__all__ = ["WanConfig"]
