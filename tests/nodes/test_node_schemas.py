"""Every node declares a complete, prefixed schema, and the shim exposes it the way ComfyUI's loaders read it."""

from __future__ import annotations

import inspect

import pytest

NUMBER_TYPES = {"INT", "FLOAT"}


def all_inputs(node_class):
    declared = node_class.INPUT_TYPES()
    for category in ("required", "optional"):
        for name, (kind, options) in declared.get(category, {}).items():
            yield category, name, kind, options


def test_ids_category_and_display_names(node_classes):
    from inferix_nodes import NODE_DISPLAY_NAME_MAPPINGS, NODES

    assert len(node_classes) == len(NODES)  # node ids are unique
    assert {"InferixLoadWorldModel", "InferixBlockDenoise", "InferixMemorySettings"} <= set(node_classes)
    for node_id, cls in node_classes.items():
        assert node_id.startswith("Inferix"), node_id
        assert cls.CATEGORY.startswith("Inferix/"), (node_id, cls.CATEGORY)
        assert NODE_DISPLAY_NAME_MAPPINGS[node_id] and not NODE_DISPLAY_NAME_MAPPINGS[node_id].startswith("Inferix_")
        assert cls.DESCRIPTION


def test_every_input_and_output_has_a_tooltip(node_classes):
    for node_id, cls in node_classes.items():
        for _, name, _, options in all_inputs(cls):
            assert options.get("tooltip"), f"{node_id}.{name} has no tooltip"
        assert len(cls.OUTPUT_TOOLTIPS) == len(cls.RETURN_TYPES)
        assert all(cls.OUTPUT_TOOLTIPS), f"{node_id} has an output without a tooltip"


def test_numbers_have_default_min_max_step(node_classes):
    for node_id, cls in node_classes.items():
        for _, name, kind, options in all_inputs(cls):
            if isinstance(kind, str) and kind in NUMBER_TYPES:
                for key in ("default", "min", "max"):
                    assert key in options, f"{node_id}.{name} lacks {key}"
                assert options["min"] <= options["default"] <= options["max"], f"{node_id}.{name}"


def test_v1_attributes_are_plain_class_attributes(node_classes):
    """An old ComfyUI reads these directly off the class, and calls FUNCTION on an instance."""
    for node_id, cls in node_classes.items():
        assert isinstance(cls.RETURN_TYPES, tuple) and isinstance(cls.FUNCTION, str)
        assert isinstance(cls.OUTPUT_NODE, bool) and isinstance(cls.CATEGORY, str)
        assert callable(getattr(cls(), cls.FUNCTION))
        if hasattr(cls, "VALIDATE_INPUTS"):
            args = inspect.getfullargspec(cls.VALIDATE_INPUTS).args
            assert args[0] == "cls" and set(args[1:]) <= {n for _, n, _, _ in all_inputs(cls)}, node_id


def test_sockets_and_combo_lists(node_classes):
    denoise = node_classes["InferixBlockDenoise"]
    # the core VIDEO last: links of workflows saved with three outputs keep their slots
    assert denoise.RETURN_TYPES == ("LATENT", "IMAGE", "INFERIX_VIDEO", "VIDEO", "INFERIX_WORLD_STATE")
    core_model = node_classes["InferixWorldModelFromCoreModel"].INPUT_TYPES()
    assert core_model["required"]["model"][0] == "MODEL" and core_model["optional"]["vae"][0] == "VAE"
    assert node_classes["InferixWorldModelFromCoreModel"].RETURN_TYPES == ("INFERIX_WORLD_MODEL",)
    declared = denoise.INPUT_TYPES()
    assert declared["required"]["world_model"][0] == "INFERIX_WORLD_MODEL"
    assert declared["optional"]["kv_cache"][0] == "INFERIX_KV_CACHE_CONFIG"
    assert declared["required"]["seed"][1]["control_after_generate"] is True
    # dynprompt: Block Denoise reads whether its world_state output is linked (Hidden.prompt would clash with "prompt")
    assert declared["hidden"] == {"unique_id": ("UNIQUE_ID",), "dynprompt": ("DYNPROMPT",)}
    assert node_classes["InferixKVCacheConfig"].RETURN_TYPES == ("INFERIX_KV_CACHE_CONFIG",)
    assert node_classes["InferixLoadWorldModel"].RETURN_TYPES == ("INFERIX_WORLD_MODEL",)
    model_choices = node_classes["InferixLoadWorldModel"].INPUT_TYPES()["required"]["model"][0]
    assert model_choices[0] == "bundled"  # old-ComfyUI combo spelling: the list of options
    assert node_classes["InferixStreamOut"].OUTPUT_NODE is True
    assert declared["optional"]["stream"][0] == "INFERIX_STREAM_SETTINGS"
    assert declared["optional"]["start_frames"][0] == "IMAGE"
    assert node_classes["InferixStreamSettings"].RETURN_TYPES == ("INFERIX_STREAM_SETTINGS",)
    assert node_classes["InferixKVCacheConfig"].INPUT_TYPES()["optional"]["world_model"][0] == "INFERIX_WORLD_MODEL"


def test_load_world_model_speed_options_are_optional_and_last(node_classes):
    """fp8/compile are optional booleans after every other widget: older workflows (API inputs without
    them, UI widgets_values two short) still load, with both off."""
    from inferix_core.workflow import NodeSchema

    cls = node_classes["InferixLoadWorldModel"]
    optional = cls.INPUT_TYPES()["optional"]
    for name in ("fp8", "compile"):
        kind, options = optional[name]
        assert kind == "BOOLEAN" and options["default"] is False and options["tooltip"]
    assert "FP8" in optional["fp8"][1]["tooltip"] and "torch.compile" in optional["compile"][1]["tooltip"]
    widgets = [s.name for s in NodeSchema.from_class("InferixLoadWorldModel", cls).widget_inputs]
    assert widgets[7:] == ["fp8", "compile", "family", "weights", "cuda_graphs"] and len(widgets) == 12
    assert inspect.signature(cls.execute).parameters["fp8"].default is False
    assert inspect.signature(cls.execute).parameters["compile"].default is False


def test_load_world_model_cuda_graphs_is_optional_last_and_off(node_classes):
    """cuda_graphs (issue #19) is the last widget, default off: older workflows load unchanged."""
    from inferix_core.workflow import NodeSchema

    cls = node_classes["InferixLoadWorldModel"]
    kind, options = cls.INPUT_TYPES()["optional"]["cuda_graphs"]
    assert kind == "BOOLEAN" and options["default"] is False and "CUDA graph" in options["tooltip"]
    assert [s.name for s in NodeSchema.from_class("InferixLoadWorldModel", cls).widget_inputs][-1] == "cuda_graphs"
    assert inspect.signature(cls.execute).parameters["cuda_graphs"].default is False


def test_load_world_model_family_and_weights_are_optional_and_last(node_classes):
    """family/weights (issue #15) come after fp8/compile, default 'auto': older workflows load unchanged."""
    cls = node_classes["InferixLoadWorldModel"]
    optional = cls.INPUT_TYPES()["optional"]
    families, options = optional["family"]
    assert families[0] == "auto" and options["default"] == "auto" and "causvid" in families and "krea" in families
    assert "bundled" not in families
    weights, options = optional["weights"]
    assert list(weights) == ["auto", "ema", "generator"] and options["default"] == "auto"
    assert inspect.signature(cls.execute).parameters["family"].default == "auto"
    assert inspect.signature(cls.execute).parameters["weights"].default == "auto"


def test_shim_rejects_unknown_widget_options():
    from inferix_nodes import io_shim as io

    with pytest.raises(TypeError, match="minimum"):
        io.Int.Input("x", minimum=0)
