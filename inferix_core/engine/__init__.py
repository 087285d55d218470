"""The engine: one object that owns the block loop (engine.py); the facade and the interactive session drive it."""

from ..pipeline.loop import BlockInput
from .engine import Engine, EngineBlock, Stream, run_pipeline

__all__ = ["BlockInput", "Engine", "EngineBlock", "Stream", "run_pipeline"]
