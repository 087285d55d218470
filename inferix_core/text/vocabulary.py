"""A prompt encoder for a fixed vocabulary: the bundled world model's scene words → its text context.

The bundled model has no umT5; its prompt is a small learned table (V, text_dim) of words. A prompt
names one scene (a palette / time of day of the driving world) with any of that scene's words; the
context is always the scene's canonical word sequence (its words' rows, padded with row 0 to
text_len), so every phrasing of a scene gives exactly the context the model was trained on. Words
are lower-cased; filler words ("a", "the", "road", ...) and other unknown words are ignored, but a
prompt must name a scene: no known word, or words of two scenes, is a one-line ConfigError that lists
the vocabulary. An empty prompt means the config's default scene.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..errors import ConfigError

logger = logging.getLogger(__name__)

PAD = "<pad>"
DEFAULT_FILLER = (
    "a", "an", "the", "in", "on", "at", "of", "to", "and", "with", "by", "through", "along", "into", "under",
    "over", "is", "it", "its", "this", "that", "drive", "driving", "drives", "road", "roads", "car", "world",
    "scene", "time", "please", "some", "very", "view", "behind", "down", "lane", "highway",
)  # fmt: skip
_WORD = re.compile(r"[a-z0-9']+")


def prompt_words(text: str) -> list[str]:
    """Lower-cased words of a prompt (letters, digits, apostrophes)."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class VocabularyConfig:
    """The `prompt` section of a bundled config.json.

    words: the table's rows in order; row 0 is the pad word `<pad>`.
    scenes: scene name → its words, in the order that forms its context (at most text_len).
    default: the scene an empty prompt means.
    filler: words that are ignored without a note.
    """

    words: tuple[str, ...]
    scenes: dict[str, tuple[str, ...]]
    text_len: int
    default: str
    filler: tuple[str, ...] = field(default=DEFAULT_FILLER)

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(self.words))
        object.__setattr__(self, "scenes", {s: tuple(w) for s, w in self.scenes.items()})
        object.__setattr__(self, "filler", tuple(self.filler))
        if not self.words or self.words[0] != PAD:
            raise ConfigError(f"a prompt vocabulary's first word must be '{PAD}' (the padding row)")
        if len(set(self.words)) != len(self.words):
            raise ConfigError("a prompt vocabulary lists a word twice; each word is one row of the table")
        owner: dict[str, str] = {}
        for scene, ws in self.scenes.items():
            if not ws or len(ws) > self.text_len:
                raise ConfigError(f"scene '{scene}' has {len(ws)} words; it needs 1..text_len={self.text_len}")
            for w in ws:
                if w not in self.words or w == PAD:
                    raise ConfigError(f"scene '{scene}' uses the word '{w}', which is not in the vocabulary")
                if owner.setdefault(w, scene) != scene:
                    raise ConfigError(f"the word '{w}' belongs to two scenes ({owner[w]}, {scene}); give it one")
        if self.default not in self.scenes:
            raise ConfigError(f"the default scene '{self.default}' is not one of {sorted(self.scenes)}")

    @classmethod
    def from_scenes(
        cls, scenes: dict[str, tuple[str, ...] | list[str]], text_len: int, default: str
    ) -> VocabularyConfig:
        """Vocabulary = the pad word, then every scene's words in scene order."""
        words = [PAD, *dict.fromkeys(w for ws in scenes.values() for w in ws)]
        return cls(tuple(words), {s: tuple(w) for s, w in scenes.items()}, text_len, default)

    def to_dict(self) -> dict:
        return {
            "vocabulary": list(self.words),
            "scenes": {s: list(w) for s, w in self.scenes.items()},
            "text_len": self.text_len,
            "default": self.default,
            "filler": list(self.filler),
        }

    @classmethod
    def from_dict(cls, d: dict) -> VocabularyConfig:
        return cls(
            tuple(d["vocabulary"]),
            {s: tuple(w) for s, w in d["scenes"].items()},
            int(d["text_len"]),
            str(d["default"]),
            tuple(d.get("filler", DEFAULT_FILLER)),
        )

    @property
    def scene_names(self) -> tuple[str, ...]:
        return tuple(self.scenes)

    def hint(self) -> str:
        """One line naming every scene and its words, for errors and the prompt box's placeholder."""
        return "; ".join(f"{s}: {', '.join(ws)}" for s, ws in self.scenes.items())

    def scene_of(self, prompt: str) -> str:
        """The scene a prompt names (see the module docstring for the rules)."""
        words = prompt_words(prompt)
        if not words:
            return self.default
        owner = {w: s for s, ws in self.scenes.items() for w in ws}
        named = {owner[w] for w in words if w in owner}
        ignored = sorted({w for w in words if w not in owner and w not in self.filler})
        if not named:
            raise ConfigError(
                # the prompt is not quoted: it may be a caption read from a file (docs/security.md)
                f"a prompt ({len(words)} words) names no scene this model knows; use one of these words ({self.hint()}), "
                f"or leave it empty for '{self.default}'"
            )
        if len(named) > 1:
            raise ConfigError(
                f"a prompt names {len(named)} scenes ({', '.join(sorted(named))}); name one ({self.hint()})"
            )
        if ignored:
            logger.info("prompt words not in the bundled vocabulary were ignored: %s", ", ".join(ignored))
        return named.pop()

    def token_ids(self, scene: str) -> list[int]:
        """The scene's canonical context: its words' rows, padded with row 0 to text_len."""
        if scene not in self.scenes:
            raise ConfigError(f"unknown scene '{scene}'; this model knows {', '.join(self.scenes)}")
        ids = [self.words.index(w) for w in self.scenes[scene]]
        return ids + [0] * (self.text_len - len(ids))


class VocabularyPromptEncoder(nn.Module):
    """Prompt text → (B, text_len, text_dim) rows of a learned word table (the model's `bundled_vocabulary`)."""

    def __init__(self, config: VocabularyConfig, table: Tensor):
        super().__init__()
        if table.dim() != 2 or table.shape[0] != len(config.words):
            raise ConfigError(
                f"the prompt table has shape {tuple(table.shape)}; the vocabulary needs ({len(config.words)}, text_dim)"
            )
        self.config = config
        self.table = nn.Parameter(table.detach().clone(), requires_grad=table.requires_grad)

    @property
    def text_dim(self) -> int:
        return self.table.shape[1]

    def ids_for_scenes(self, scenes: list[str]) -> Tensor:
        """(B, text_len) token ids of the scenes' canonical contexts."""
        return torch.tensor([self.config.token_ids(s) for s in scenes], dtype=torch.long, device=self.table.device)

    def context_for_ids(self, ids: Tensor) -> Tensor:
        """(B, text_len) ids → (B, text_len, text_dim); differentiable in the table (training uses it)."""
        return self.table[ids]

    def encode(self, prompts: list[str]) -> Tensor:
        """Prompts → context (B, text_len, text_dim), the same call as the umT5 encoder's."""
        scenes = []
        for i, prompt in enumerate(prompts):
            try:
                scenes.append(self.config.scene_of(prompt))
            except ConfigError as exc:
                if len(prompts) == 1:
                    raise
                raise ConfigError(f"prompt {i + 1} of {len(prompts)}: {exc}") from None
        return self.context_for_ids(self.ids_for_scenes(scenes))

    def forward(self, prompts: list[str]) -> Tensor:
        return self.encode(prompts)


__all__ = ["PAD", "VocabularyConfig", "VocabularyPromptEncoder", "prompt_words"]
