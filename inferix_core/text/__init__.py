"""Text encoders: umT5-XXL for Wan, and a prompt cache so repeated prompts are free."""

from .placement import PLACEMENTS, PlacedTextEncoder
from .umt5 import PromptCache, SentencePieceTokenizer, UMT5TextEncoder, clean_prompt, load_tokenizer

__all__ = [
    "PLACEMENTS",
    "PlacedTextEncoder",
    "PromptCache",
    "SentencePieceTokenizer",
    "UMT5TextEncoder",
    "clean_prompt",
    "load_tokenizer",
]
