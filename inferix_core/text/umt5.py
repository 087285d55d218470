"""umT5-XXL text encoder for Wan: load any common layout into transformers' UMT5EncoderModel, encode prompts.

Layouts: ComfyUI `models/text_encoders/umt5_xxl_*.safetensors` (HF key names without
`encoder.embed_tokens`, fp16/bf16 or fp8 with per-tensor `scale_weight`, and the SentencePiece model
embedded as a uint8 tensor `spiece_model`), a Hugging Face folder, and Wan's original
`models_t5_umt5-xxl-enc-bf16.pth`. The output is [B, text_len, d_model] with padding rows zeroed, as Wan
feeds its cross-attention. fp8 weights are dequantised at load; we do not run fp8 matmuls.
"""

from __future__ import annotations

import html
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from ..errors import BackendUnavailableError, CheckpointLayoutError, MissingFileError
from ..tensors import read_state_dict

logger = logging.getLogger(__name__)

HF_PROBE = "encoder.block.0.layer.0.SelfAttention.q.weight"
WAN_PROBE = "blocks.0.attn.q.weight"
TOKENIZER_KEY = "spiece_model"  # ComfyUI stores the tokenizer's serialized ModelProto under this key
_QUANT_EXTRAS = (".scale_input", ".input_scale", ".comfy_quant")
_WAN_BLOCK = {  # Wan's t5.py names → HF names, per block
    "norm1.weight": "layer.0.layer_norm.weight",
    "attn.q.weight": "layer.0.SelfAttention.q.weight",
    "attn.k.weight": "layer.0.SelfAttention.k.weight",
    "attn.v.weight": "layer.0.SelfAttention.v.weight",
    "attn.o.weight": "layer.0.SelfAttention.o.weight",
    "pos_embedding.embedding.weight": "layer.0.SelfAttention.relative_attention_bias.weight",
    "norm2.weight": "layer.1.layer_norm.weight",
    "ffn.gate.0.weight": "layer.1.DenseReluDense.wi_0.weight",
    "ffn.fc1.weight": "layer.1.DenseReluDense.wi_1.weight",
    "ffn.fc2.weight": "layer.1.DenseReluDense.wo.weight",
}


def _require_transformers():
    try:
        import transformers
    except ImportError as e:  # optional dependency: pip install comfyui-inferix[text]
        raise BackendUnavailableError(
            "the umT5 text encoder needs `transformers` and `sentencepiece` (pip install 'comfyui-inferix[text]')"
        ) from e
    return transformers


# ---- checkpoint layouts -------------------------------------------------------------------------
def dequantize(sd: dict[str, Tensor], dtype: torch.dtype, device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """Fold ComfyUI fp8 scales into the weights: w = w_fp8 · scale_weight (or `weight_scale`), cast to `dtype`.

    Markers (`scaled_fp8`) and activation scales (`scale_input`) are dropped: we run the matmuls in `dtype`.
    `sd` is consumed tensor by tensor and each result moved to `device`, so host memory peaks near the
    file size (umT5-XXL is 11 GB in fp16) instead of twice that.
    """
    out: dict[str, Tensor] = {}
    scales = {k.rsplit(".", 1)[0]: v for k, v in sd.items() if k.endswith((".scale_weight", ".weight_scale"))}
    for key in list(sd):
        value = sd.pop(key)
        if key == "scaled_fp8" or key.endswith((".scale_weight", ".weight_scale", *_QUANT_EXTRAS)):
            continue
        base = key[: -len(".weight")] if key.endswith(".weight") else None
        if base is not None and base in scales:
            scale = scales[base].float()
            if scale.numel() not in (1, value.shape[0]):
                raise CheckpointLayoutError(
                    f"'{key}': block-wise scale of shape {list(scale.shape)} is not supported; "
                    f"expected one scale per tensor or per output row"
                )
            value = value.float() * (scale.reshape(-1, *([1] * (value.ndim - 1))) if scale.numel() > 1 else scale)
        out[key] = value.to(device=device, dtype=dtype if value.is_floating_point() else value.dtype)
    return out


def convert_wan_native(sd: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Wan's original T5 (`token_embedding`, `blocks.{i}.attn.q`, `norm`) → HF names."""
    out: dict[str, Tensor] = {}
    for key, value in sd.items():
        if key == "token_embedding.weight":
            out["shared.weight"] = value
        elif key == "norm.weight":
            out["encoder.final_layer_norm.weight"] = value
        elif m := re.match(r"blocks\.(\d+)\.(.+)$", key):
            if m[2] not in _WAN_BLOCK:
                raise CheckpointLayoutError(
                    f"unknown Wan T5 key '{key}'; expected one of {sorted(_WAN_BLOCK)} per block"
                )
            out[f"encoder.block.{m[1]}.{_WAN_BLOCK[m[2]]}"] = value
        else:
            raise CheckpointLayoutError(f"unknown Wan T5 key '{key}'")
    return out


def _is_tokenizer_key(key: str) -> bool:
    return key.rsplit(".", 1)[-1] == TOKENIZER_KEY


def to_hf_layout(sd: Mapping[str, Tensor], source: str) -> tuple[dict[str, Tensor], str]:
    """Detect the layout (ComfyUI/HF, optionally prefixed; Wan native) and return HF-named tensors."""
    for probe, layout in ((HF_PROBE, "comfyui"), (WAN_PROBE, "wan")):
        prefix = next(
            (k[: -len(probe)] for k in sd if k.endswith(probe) and (k == probe or k[-len(probe) - 1] == ".")), None
        )
        if prefix is not None:
            tensors = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix) and not _is_tokenizer_key(k)}
            tensors.pop("encoder.embed_tokens.weight", None)  # tied to shared.weight
            return (convert_wan_native(tensors) if layout == "wan" else tensors), layout
    keys = [k for k in sd if not _is_tokenizer_key(k)]
    raise CheckpointLayoutError(
        f"'{source}' is not a umT5 text encoder we recognise: found {len(keys)} keys ({', '.join(keys[:5])} ...) but "
        f"no '{HF_PROBE}' (ComfyUI / Hugging Face layout) and no '{WAN_PROBE}' (Wan .pth). "
        f"Pass ComfyUI's models/text_encoders/umt5_xxl_fp16.safetensors (or the fp8_e4m3fn_scaled file)."
    )


def umt5_config_from_state_dict(sd: Mapping[str, Tensor], **overrides):
    """UMT5Config read from shapes: vocab and width from `shared`, heads and buckets from the relative bias."""
    transformers = _require_transformers()
    rel = sd["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]  # (buckets, heads)
    num_layers = 1 + max(int(m[1]) for k in sd if (m := re.match(r"encoder\.block\.(\d+)\.", k)))
    num_heads = int(rel.shape[1])
    kwargs = dict(
        vocab_size=int(sd["shared.weight"].shape[0]),
        d_model=int(sd["shared.weight"].shape[1]),
        d_kv=int(sd[HF_PROBE].shape[0]) // num_heads,
        d_ff=int(sd["encoder.block.0.layer.1.DenseReluDense.wi_0.weight"].shape[0]),
        num_layers=num_layers,
        num_heads=num_heads,
        relative_attention_num_buckets=int(rel.shape[0]),
        relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu",
        layer_norm_epsilon=1e-6,
        is_encoder_decoder=False,
        use_cache=False,
        tie_word_embeddings=True,
    )
    kwargs.update(overrides)
    return transformers.UMT5Config(**kwargs)


# ---- tokenizers ---------------------------------------------------------------------------------
def clean_prompt(text: str) -> str:
    """Wan's 'whitespace' cleaning (html entities unescaped, runs of whitespace collapsed); ftfy is not applied."""
    return re.sub(r"\s+", " ", html.unescape(html.unescape(text))).strip()


class SentencePieceTokenizer:
    """umT5's SentencePiece model: ids + EOS, truncated and padded (pad id 0) to a fixed length."""

    def __init__(self, model_proto: bytes) -> None:
        _require_transformers()
        import sentencepiece

        self.sp = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        self.eos_id = self.sp.eos_id()
        self.pad_id = max(self.sp.pad_id(), 0)

    def __call__(self, texts: Sequence[str], length: int) -> tuple[Tensor, Tensor]:
        ids = torch.full((len(texts), length), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(texts), length, dtype=torch.long)
        for i, text in enumerate(texts):
            tokens = [*self.sp.encode(text)[: length - 1], self.eos_id]
            ids[i, : len(tokens)] = torch.tensor(tokens)
            mask[i, : len(tokens)] = 1
        return ids, mask


class HFTokenizer:
    """A Hugging Face tokenizer folder (e.g. google/umt5-xxl), used when no `spiece.model` is at hand."""

    def __init__(self, folder: str | Path) -> None:
        self.tok = _require_transformers().AutoTokenizer.from_pretrained(str(folder))

    def __call__(self, texts: Sequence[str], length: int) -> tuple[Tensor, Tensor]:
        enc = self.tok(
            list(texts),
            padding="max_length",
            truncation=True,
            max_length=length,
            add_special_tokens=True,
            return_tensors="pt",
        )
        return enc["input_ids"], enc["attention_mask"]


def load_tokenizer(path: str | Path) -> SentencePieceTokenizer | HFTokenizer:
    """A `spiece.model` file, a folder holding one, or a Hugging Face tokenizer folder."""
    path = Path(path)
    if path.is_file():
        return SentencePieceTokenizer(path.read_bytes())
    if (path / "spiece.model").is_file():
        return SentencePieceTokenizer((path / "spiece.model").read_bytes())
    if path.is_dir():
        return HFTokenizer(path)
    raise MissingFileError(f"tokenizer '{path}' does not exist; pass a spiece.model file or a tokenizer folder")


# ---- the encoder --------------------------------------------------------------------------------
def _default_dtype(device: torch.device | str) -> torch.dtype:
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32  # Wan runs T5 in bf16


class UMT5TextEncoder:
    """Prompt strings → [B, text_len, d_model] embeddings with padding rows zeroed.

    Args:
        model: a transformers `UMT5EncoderModel`.
        tokenizer: callable (texts, length) → (ids, mask).
        text_len: rows of the output (the transformer config's text_len; 512 for Wan).
    """

    def __init__(self, model, tokenizer, text_len: int = 512) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.text_len = text_len

    @property
    def device(self) -> torch.device:
        return self.model.shared.weight.device

    @classmethod
    def load(
        cls,
        path: str | Path,
        tokenizer: str | Path | None = None,
        text_len: int = 512,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> UMT5TextEncoder:
        """A ComfyUI/Wan weights file, or a Hugging Face folder (`config.json` + weights)."""
        path = Path(path)
        if path.is_dir():
            return cls.from_pretrained(path, tokenizer, text_len, device, dtype)
        return cls.from_file(path, tokenizer, text_len, device, dtype)

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        tokenizer: str | Path | None = None,
        text_len: int = 512,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> UMT5TextEncoder:
        """Load a single weights file; the tokenizer comes from the file's `spiece_model` unless given."""
        transformers = _require_transformers()
        path, dtype = Path(path), dtype or _default_dtype(device)
        raw = read_state_dict(path, expected="umT5 text encoder")
        sd, layout = to_hf_layout(raw, path.name)
        embedded = next((k for k in raw if _is_tokenizer_key(k)), None)  # `spiece_model`, possibly prefixed
        if tokenizer is not None:
            tok = load_tokenizer(tokenizer)
        elif embedded is not None:
            tok = SentencePieceTokenizer(raw[embedded].cpu().numpy().tobytes())
        else:
            raise MissingFileError(
                f"'{path.name}' has no embedded '{TOKENIZER_KEY}'; pass tokenizer= (a spiece.model "
                f"or the google/umt5-xxl tokenizer folder)"
            )
        del raw  # `sd` holds the only references now, and dequantize releases them one by one
        sd = dequantize(sd, dtype, device)
        config = umt5_config_from_state_dict(sd)
        with torch.device("meta"):
            model = transformers.UMT5EncoderModel(config)
        result = model.load_state_dict(sd, strict=False, assign=True)
        missing = [k for k in result.missing_keys if k != "encoder.embed_tokens.weight"]
        if missing or result.unexpected_keys:
            raise CheckpointLayoutError(
                f"'{path.name}' ({layout} layout) does not match UMT5 with {config.num_layers} "
                f"layers: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
            )
        model.tie_weights()
        logger.info(
            "loaded umT5 from %s (%s layout, %d layers, d_model %d, %s)",
            path.name,
            layout,
            config.num_layers,
            config.d_model,
            dtype,
        )
        return cls(model, tok, text_len)

    @classmethod
    def from_pretrained(
        cls,
        folder: str | Path,
        tokenizer: str | Path | None = None,
        text_len: int = 512,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> UMT5TextEncoder:
        """A Hugging Face folder; the tokenizer is looked up in `tokenizer`, the folder, or `../tokenizer`."""
        transformers = _require_transformers()
        folder = Path(folder)
        model = transformers.UMT5EncoderModel.from_pretrained(str(folder), dtype=dtype or _default_dtype(device))
        candidates = [tokenizer] if tokenizer is not None else [folder, folder.parent / "tokenizer"]
        for candidate in candidates:
            p = Path(candidate)
            if p.is_file() or (p / "spiece.model").is_file() or (p / "tokenizer_config.json").is_file():
                return cls(model.to(device), load_tokenizer(p), text_len)
        raise MissingFileError(f"no tokenizer found in {[str(c) for c in candidates]}; pass tokenizer=")

    @torch.no_grad()
    def encode(self, prompts: Sequence[str]) -> Tensor:
        """Encode prompts → (B, text_len, d_model) in the model's dtype; rows past each prompt's EOS are zero."""
        ids, mask = self.tokenizer([clean_prompt(p) for p in prompts], self.text_len)
        ids, mask = ids.to(self.device), mask.to(self.device)
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, D)
        return hidden * mask.unsqueeze(-1).to(hidden.dtype)


class PromptCache:
    """Embeddings by prompt text, least recently used evicted: switching back to an earlier prompt costs nothing.

    The pipeline re-encodes on every prompt change in interactive sessions; T5-XXL takes ~100 ms on a
    GPU and seconds on CPU, so repeated prompts are served from here.
    """

    def __init__(self, encoder: UMT5TextEncoder, max_entries: int = 64) -> None:
        self.encoder = encoder
        self.max_entries = max_entries
        self._store: OrderedDict[str, Tensor] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, prompt: str) -> bool:
        return prompt in self._store

    def encode(self, prompts: Sequence[str]) -> Tensor:
        """Like `UMT5TextEncoder.encode`, encoding only prompts not seen before (in one batch)."""
        missing = list(dict.fromkeys(p for p in prompts if p not in self._store))
        self.misses += len(missing)
        self.hits += sum(1 for p in prompts if p not in missing)
        if missing:
            for prompt, emb in zip(missing, self.encoder.encode(missing)):
                self._store[prompt] = emb
        for p in prompts:
            self._store.move_to_end(p)
        out = torch.stack([self._store[p] for p in prompts])
        while len(self._store) > self.max_entries:
            self._store.popitem(last=False)
        return out

    def clear(self) -> None:
        self._store.clear()
