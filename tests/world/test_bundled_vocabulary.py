"""The bundled model's vocabulary prompt: the word rules, v2 files loading (and v1 still), and the prompt
reaching the model through generate_video, InteractiveSession and the live page, on a tiny random v2 model."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import inferix_core.assets as assets
from inferix_core.api import generate_video
from inferix_core.clients.session import InteractiveSession
from inferix_core.errors import ConfigError
from inferix_core.models.bundled import load_bundled
from inferix_core.models.registry import load_world_model
from inferix_core.sinks.live import LiveView
from inferix_core.text.vocabulary import VocabularyConfig, VocabularyPromptEncoder
from inferix_core.vae.tiny_ae import TinyAEConfig, TinyCausalAE
from training.data import DatasetSpec
from training.train_bundled import SMOKE_CACHE, export, wan_config
from training.train_world import WorldModel

SCENES = {"day": ("sunny", "day"), "sunset": ("orange", "sunset", "dusk"), "night": ("dark", "night")}


@pytest.fixture(scope="module")
def vocab() -> VocabularyConfig:
    return VocabularyConfig.from_scenes(SCENES, text_len=4, default="day")


def test_words_name_one_scene_and_every_phrasing_gives_its_canonical_context(vocab):
    torch.manual_seed(0)
    enc = VocabularyPromptEncoder(vocab, torch.randn(len(vocab.words), 8))
    sunset = enc.table[[vocab.words.index(w) for w in SCENES["sunset"]] + [0]]  # rows of its words, then pad
    for prompt in ("sunset", "An ORANGE road at dusk!", "orange sunset dusk", "drive into the sunset, please"):
        torch.testing.assert_close(enc.encode([prompt])[0], sunset, rtol=0, atol=0)
    assert vocab.scene_of("") == vocab.scene_of("   ") == "day"  # empty: the default scene
    assert vocab.scene_of("dark winding mountain road") == "night"  # unknown words beside a known one: ignored
    assert enc.encode(["night", "day"]).shape == (2, 4, 8)
    assert not torch.equal(enc.encode(["night"]), enc.encode(["day"]))


@pytest.mark.parametrize("prompt", ["a car on a road", "rainbow unicorn"])
def test_a_prompt_with_no_scene_word_is_a_one_line_error_listing_the_vocabulary(vocab, prompt):
    with pytest.raises(ConfigError, match="names no scene") as info:
        vocab.scene_of(prompt)
    assert "\n" not in str(info.value) and "sunset: orange, sunset, dusk" in str(info.value)


def test_two_scenes_in_one_prompt_is_an_error(vocab):
    with pytest.raises(ConfigError, match="names 2 scenes"):
        vocab.scene_of("a sunny night")


def test_a_bad_vocabulary_is_refused():
    with pytest.raises(ConfigError, match="two scenes"):
        VocabularyConfig.from_scenes({"a": ("x",), "b": ("x",)}, 4, "a")
    with pytest.raises(ConfigError, match="text_len"):
        VocabularyConfig.from_scenes({"a": ("x", "y", "z")}, 2, "a")
    with pytest.raises(ConfigError, match="default"):
        VocabularyConfig.from_scenes({"a": ("x",)}, 2, "b")
    assert VocabularyConfig.from_dict(VocabularyConfig.from_scenes(SCENES, 4, "day").to_dict()).scenes["day"] == (
        "sunny",
        "day",
    )


@pytest.fixture(scope="module")
def v2_dir(tmp_path_factory, vocab):
    """A tiny random v2 bundled model written by the trainer's own export (the layout that ships)."""
    torch.manual_seed(1)
    wcfg = wan_config(smoke=True, text_len=vocab.text_len)
    world = WorldModel(wcfg, vocab)
    torch.nn.init.normal_(world.transformer.head.head.weight, std=0.3)  # outputs that depend on the prompt
    ae = TinyCausalAE(TinyAEConfig(latent_channels=32, num_res_blocks=1, pixel_channels=(8, 8)))
    spec = DatasetSpec(num_episodes=1, num_latent_frames=9, height=32, width=32, scenes=tuple(SCENES))
    out = tmp_path_factory.mktemp("bundled_v2")
    export(out, world, ae, wcfg, spec, SMOKE_CACHE, {"command": "test"})
    return out


def test_v2_files_load_with_their_vocabulary(v2_dir, vocab):
    b = load_bundled(v2_dir)
    assert b.takes_prompt and b.prompt_encoder.config.scenes == vocab.scenes
    torch.testing.assert_close(b.context, b.encode_prompt("sunny"))  # the default scene
    assert b.encode_prompt("night").shape == (1, vocab.text_len, b.transformer.config.text_dim)


def test_v1_files_still_load_with_their_fixed_context(v2_dir, tmp_path):
    """A v1 export (assets/__init__.py: one learned `bundled_context`, no `prompt` section) made from the v2
    files: it loads with no prompt encoder and every prompt gives its stored context."""
    config = json.loads((v2_dir / "config.json").read_text())
    del config["prompt"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    shutil.copy(v2_dir / "vae.safetensors", tmp_path / "vae.safetensors")
    sd = load_file(str(v2_dir / "transformer.safetensors"))
    table = sd.pop("bundled_vocabulary")
    wcfg = config["transformer"]
    context = torch.randn(1, wcfg["text_len"], table.shape[1], generator=torch.Generator().manual_seed(5))
    save_file({**sd, "bundled_context": context.to(table.dtype)}, str(tmp_path / "transformer.safetensors"))
    b = load_bundled(tmp_path)
    assert b.prompt_encoder is None and not b.takes_prompt
    assert torch.equal(b.encode_prompt("anything"), context.to(table.dtype).float())
    assert torch.equal(b.encode_prompt("night"), b.context)


@pytest.fixture
def v2_world(v2_dir, monkeypatch):
    monkeypatch.setattr(assets, "BUNDLED_DIR", v2_dir)
    return load_world_model("bundled", device="cpu")


def test_generate_video_prompt_selects_the_scene(v2_world):
    assert isinstance(v2_world.text_encoder, VocabularyPromptEncoder)

    def run(prompt):
        return generate_video(v2_world, prompt, num_blocks=2, width=32, height=32, seed=0, decode=False).latents

    night = run("a dark road")
    assert torch.equal(night, run("NIGHT"))
    assert not torch.allclose(night, run("sunny day"), atol=1e-4)
    assert torch.equal(run(""), run("day"))
    with pytest.raises(ConfigError, match="names no scene"):
        run("a car on a road")


def test_session_prompt_switch_mid_stream_and_a_bad_prompt_keeps_the_stream(v2_world, caplog):
    with InteractiveSession(v2_world, "day", width=32, height=32, seed=0, decode=False, hard_switch=True) as s:
        s.step()
        s.switch_prompt("dusk")
        s.step()
        assert s.prompt == "dusk"
        torch.testing.assert_close(s._context, v2_world.text_encoder.encode(["sunset"]))
        with caplog.at_level(logging.WARNING):
            s.switch_prompt("rainbow unicorn")
            s.step()
        assert s.prompt == "dusk" and "not taken" in caplog.text
        torch.testing.assert_close(s._context, v2_world.text_encoder.encode(["sunset"]))


def test_live_page_shows_the_vocabulary_as_the_prompt_placeholder(vocab):
    page = LiveView(takes_prompt=True, prompt_hint=f"Name a scene ({vocab.hint()})").page()
    assert "sunset: orange, sunset, dusk" in page and "CONFIG.prompt_hint" in page


def test_describe_names_the_vocabulary(v2_world):
    assert "text encoder: vocabulary (day: sunny, day; sunset: orange, sunset, dusk" in v2_world.describe()
