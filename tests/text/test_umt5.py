"""umT5 text encoder: every supported layout round-trips a tiny random model; padding rows are zero; prompt cache.

A tiny SentencePiece model is trained in a temp dir (umT5's ids: pad 0, eos 1, unk 2) and a tiny random
UMT5Config model is saved in each layout, then loaded back and compared with transformers run directly.
"""

from __future__ import annotations

import re

import pytest
import torch

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

from safetensors.torch import save_file  # noqa: E402

from inferix_core.errors import CheckpointLayoutError, MissingFileError  # noqa: E402
from inferix_core.text import PromptCache, UMT5TextEncoder  # noqa: E402
from inferix_core.text.umt5 import _WAN_BLOCK, to_hf_layout, umt5_config_from_state_dict  # noqa: E402

TEXT_LEN = 24
PROMPTS = ["a red fox runs  through snow", "the camera pans over a quiet harbour at dawn"]


@pytest.fixture(scope="module")
def spiece(tmp_path_factory) -> bytes:
    d = tmp_path_factory.mktemp("spm")
    words = [
        "fox",
        "snow",
        "camera",
        "pans",
        "over",
        "quiet",
        "harbour",
        "dawn",
        "red",
        "runs",
        "through",
        "the",
        "a",
        "boat",
        "sea",
        "light",
        "city",
        "night",
        "rain",
    ]
    g = torch.Generator().manual_seed(0)
    lines = [" ".join(words[i] for i in torch.randint(len(words), (8,), generator=g).tolist()) for _ in range(300)]
    (d / "corpus.txt").write_text("\n".join(lines))
    spm.SentencePieceTrainer.train(
        input=str(d / "corpus.txt"),
        model_prefix=str(d / "spiece"),
        vocab_size=40,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        model_type="unigram",
        minloglevel=2,
    )
    return (d / "spiece.model").read_bytes()


@pytest.fixture(scope="module")
def reference(spiece):
    """A tiny random UMT5EncoderModel (gated-GELU, per-layer relative bias, like umT5-XXL)."""
    torch.manual_seed(0)
    config = transformers.UMT5Config(
        vocab_size=64,
        d_model=32,
        d_kv=8,
        d_ff=48,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=False,
        use_cache=False,
    )
    model = transformers.UMT5EncoderModel(config).eval()
    return model


def _expected(model, spiece: bytes, prompts=PROMPTS) -> torch.Tensor:
    sp = spm.SentencePieceProcessor(model_proto=spiece)
    ids = torch.zeros(len(prompts), TEXT_LEN, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        t = [*sp.encode(" ".join(p.split()))[: TEXT_LEN - 1], 1]  # truncated, EOS kept
        ids[i, : len(t)], mask[i, : len(t)] = torch.tensor(t), 1
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state * mask[..., None]


def _comfy_sd(model, spiece: bytes) -> dict[str, torch.Tensor]:
    sd = {k: v.clone() for k, v in model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    sd["spiece_model"] = torch.frombuffer(bytearray(spiece), dtype=torch.uint8)
    return sd


def test_comfyui_layout_with_embedded_tokenizer(reference, spiece, tmp_path):
    path = tmp_path / "umt5_xxl_fp16.safetensors"
    save_file(_comfy_sd(reference, spiece), str(path))
    enc = UMT5TextEncoder.load(path, text_len=TEXT_LEN)
    out = enc.encode(PROMPTS)
    assert out.shape == (2, TEXT_LEN, 32) and not out.isnan().any()
    torch.testing.assert_close(out, _expected(reference, spiece), atol=1e-5, rtol=0)
    num_tokens = (out.abs().sum(-1) > 0).sum(1)
    assert (num_tokens < TEXT_LEN).all()  # padding rows exist and are exactly zero
    for i, n in enumerate(num_tokens.tolist()):
        assert torch.equal(out[i, n:], torch.zeros_like(out[i, n:]))


def test_long_prompt_is_truncated_with_eos(reference, spiece, tmp_path):
    path = tmp_path / "umt5_xxl_fp16.safetensors"
    save_file(_comfy_sd(reference, spiece), str(path))
    enc = UMT5TextEncoder.load(path, text_len=TEXT_LEN)
    long_prompt = " ".join(PROMPTS * 3)
    ids, mask = enc.tokenizer([long_prompt], TEXT_LEN)
    assert mask.all() and ids[0, -1] == 1
    torch.testing.assert_close(
        enc.encode([long_prompt]), _expected(reference, spiece, [long_prompt]), atol=1e-5, rtol=0
    )


def test_bf16_file_and_prefix(reference, spiece, tmp_path):
    prefixed = {"spiece_model": "text_encoders.umt5xxl.spiece_model"}
    sd = {prefixed.get(k, f"text_encoders.umt5xxl.transformer.{k}"): v for k, v in _comfy_sd(reference, spiece).items()}
    sd = {k: v.bfloat16() if v.is_floating_point() else v for k, v in sd.items()}
    path = tmp_path / "umt5_xxl_bf16.safetensors"
    save_file(sd, str(path))
    enc = UMT5TextEncoder.load(path, text_len=TEXT_LEN, dtype=torch.float32)
    assert enc.model.shared.weight.dtype == torch.float32
    torch.testing.assert_close(enc.encode(PROMPTS), _expected(reference, spiece), atol=0.1, rtol=0.1)


def test_fp8_scaled_layout(reference, spiece, tmp_path):
    """ComfyUI umt5_xxl_fp8_e4m3fn_scaled: fp8 weights, a `scale_weight` per linear, a `scaled_fp8` marker."""
    sd = _comfy_sd(reference, spiece)
    dequantized = dict(reference.state_dict())
    for key in [k for k in sd if re.search(r"\.(q|k|v|o|wi_0|wi_1|wo)\.weight$", k)]:
        scale = sd[key].abs().max() / 448.0
        q = (sd[key] / scale).to(torch.float8_e4m3fn)
        sd[key], sd[key.replace(".weight", ".scale_weight")] = q, scale.reshape(1)
        sd[key.replace(".weight", ".scale_input")] = torch.ones(1)
        dequantized[key] = q.float() * scale
    sd["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    path = tmp_path / "umt5_xxl_fp8_e4m3fn_scaled.safetensors"
    save_file(sd, str(path))
    enc = UMT5TextEncoder.load(path, text_len=TEXT_LEN, dtype=torch.float32)
    expected_model = transformers.UMT5EncoderModel(reference.config).eval()
    expected_model.load_state_dict(dequantized)
    torch.testing.assert_close(enc.encode(PROMPTS), _expected(expected_model, spiece), atol=1e-5, rtol=0)


def test_huggingface_folder(reference, spiece, tmp_path):
    reference.save_pretrained(tmp_path / "text_encoder")
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "spiece.model").write_bytes(spiece)
    enc = UMT5TextEncoder.load(tmp_path / "text_encoder", text_len=TEXT_LEN, dtype=torch.float32)
    torch.testing.assert_close(enc.encode(PROMPTS), _expected(reference, spiece), atol=1e-5, rtol=0)


def test_wan_native_pth(reference, spiece, tmp_path):
    inverse = {v: k for k, v in _WAN_BLOCK.items()}
    sd = {}
    for key, value in reference.state_dict().items():
        if key == "shared.weight":
            sd["token_embedding.weight"] = value
        elif key == "encoder.final_layer_norm.weight":
            sd["norm.weight"] = value
        elif m := re.match(r"encoder\.block\.(\d+)\.(.+)$", key):
            sd[f"blocks.{m[1]}.{inverse[m[2]]}"] = value
    (tmp_path / "spiece.model").write_bytes(spiece)
    path = tmp_path / "models_t5_umt5-xxl-enc-bf16.pth"
    torch.save(sd, path)
    with pytest.raises(MissingFileError, match="spiece_model"):
        UMT5TextEncoder.load(path, text_len=TEXT_LEN)
    enc = UMT5TextEncoder.load(path, tokenizer=tmp_path / "spiece.model", text_len=TEXT_LEN, dtype=torch.float32)
    torch.testing.assert_close(enc.encode(PROMPTS), _expected(reference, spiece), atol=1e-5, rtol=0)


def test_unknown_layout(tmp_path):
    path = tmp_path / "clip_l.safetensors"
    save_file({"text_model.embeddings.token_embedding.weight": torch.randn(4, 4)}, str(path))
    with pytest.raises(CheckpointLayoutError, match=r"clip_l\.safetensors.*SelfAttention\.q\.weight"):
        UMT5TextEncoder.load(path)


def test_real_umt5_xxl_key_map():
    """ComfyUI's umt5_xxl names (comfy/text_encoders/t5.py: relative bias in every block for umt5) are the HF
    UMT5EncoderModel names minus the tied embed_tokens; the config read back is umT5-XXL's."""
    config = transformers.UMT5Config(
        vocab_size=256384,
        d_model=4096,
        d_kv=64,
        d_ff=10240,
        num_layers=24,
        num_heads=64,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=False,
    )
    with torch.device("meta"):
        hf = transformers.UMT5EncoderModel(config).state_dict()
    block = [
        "layer.0.SelfAttention.q.weight",
        "layer.0.SelfAttention.k.weight",
        "layer.0.SelfAttention.v.weight",
        "layer.0.SelfAttention.o.weight",
        "layer.0.SelfAttention.relative_attention_bias.weight",
        "layer.0.layer_norm.weight",
        "layer.1.DenseReluDense.wi_0.weight",
        "layer.1.DenseReluDense.wi_1.weight",
        "layer.1.DenseReluDense.wo.weight",
        "layer.1.layer_norm.weight",
    ]
    comfy = {
        "shared.weight",
        "encoder.final_layer_norm.weight",
        *(f"encoder.block.{i}.{n}" for i in range(24) for n in block),
    }
    assert set(hf) - {"encoder.embed_tokens.weight"} == comfy
    sd, layout = to_hf_layout({k: hf[k] for k in comfy} | {"spiece_model": torch.zeros(1, dtype=torch.uint8)}, "x")
    assert layout == "comfyui" and set(sd) == comfy
    read = umt5_config_from_state_dict(sd)
    assert (read.vocab_size, read.d_model, read.d_kv, read.d_ff, read.num_layers, read.num_heads) == (
        256384,
        4096,
        64,
        10240,
        24,
        64,
    )


def test_prompt_cache(reference, spiece, tmp_path):
    path = tmp_path / "umt5.safetensors"
    save_file(_comfy_sd(reference, spiece), str(path))
    enc = UMT5TextEncoder.load(path, text_len=TEXT_LEN)
    calls = []
    original = enc.encode
    enc.encode = lambda prompts: calls.append(list(prompts)) or original(prompts)
    cache = PromptCache(enc, max_entries=2)
    first = cache.encode(PROMPTS)
    again = cache.encode([PROMPTS[1], PROMPTS[0], PROMPTS[1]])
    assert calls == [PROMPTS]  # the second call encoded nothing
    assert torch.equal(again[0], first[1]) and torch.equal(again[1], first[0])
    assert (cache.hits, cache.misses) == (3, 2)
    cache.encode(["a boat at night"])  # evicts the least recently used (PROMPTS[0])
    assert len(cache) == 2 and PROMPTS[0] not in cache and PROMPTS[1] in cache


@pytest.mark.parametrize("placement", ["device", "cpu", "offload"])
def test_placements_give_the_same_embeddings(reference, spiece, tmp_path, placement):
    from inferix_core.text import PlacedTextEncoder

    path = tmp_path / "umt5.safetensors"
    save_file(_comfy_sd(reference, spiece), str(path))
    enc = UMT5TextEncoder.load(path, text_len=TEXT_LEN)
    placed = PlacedTextEncoder(enc, placement, "cpu")
    out = placed.encode(PROMPTS)
    torch.testing.assert_close(out, _expected(reference, spiece), atol=1e-5, rtol=0)
    assert out.device.type == "cpu" and placed.device.type == "cpu"
    assert (placed.resident_bytes() > 0) == (placement == "device")


def test_unknown_placement_is_an_error(reference, spiece, tmp_path):
    from inferix_core.errors import ConfigError
    from inferix_core.text import PlacedTextEncoder

    path = tmp_path / "umt5.safetensors"
    save_file(_comfy_sd(reference, spiece), str(path))
    with pytest.raises(ConfigError, match="device, cpu, offload"):
        PlacedTextEncoder(UMT5TextEncoder.load(path, text_len=TEXT_LEN), "gpu", "cpu")
