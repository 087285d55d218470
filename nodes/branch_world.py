"""InferixBranchWorld: one common past, N futures side by side, and the one to keep.

The node converts widget strings and ComfyUI types into `inferix_core.clients.branching.branch_video`, which
generates the past once, forks the futures (their KV pages shared copy-on-write with the past), runs them
as one batch per block step and decodes the past once and each future from the past's decoder state.
The outputs are the futures next to each other (to compare) and past + the kept future (to go on with).
"""

from __future__ import annotations

import logging
from typing import Any

from . import comfy_runtime as rt
from . import types
from .block_denoise import MAX_BLOCKS, conditioning_tensor, frame_size_inputs, frames_to_image, size_problem
from .compat import io

log = logging.getLogger(__name__)

MAX_FUTURES = 8
KEEP_PROMPT = "="  # a futures line that keeps the past's prompt


def parse_futures(text: str) -> list[str | None] | str:
    """One future per non-empty line: its prompt, or '=' for the past's prompt; else an error string."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return f"futures needs at least one line: a prompt per future, or '{KEEP_PROMPT}' to keep the past's prompt"
    if len(lines) > MAX_FUTURES:
        return f"futures has {len(lines)} lines; at most {MAX_FUTURES} futures run side by side"
    return [None if line == KEEP_PROMPT else line for line in lines]


class InferixBranchWorld(io.ComfyNode):
    """Generates a past, then N futures from it in one batch, sharing the past's KV cache."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="InferixBranchWorld",
            display_name="Inferix Branch World",
            category=f"{types.CATEGORY}/sampling",
            description="Generates a common past, then several futures from the same moment (each its own "
            "prompt and seed) as one batch: the futures share the past's KV cache, so memory grows only by "
            "their new blocks. Shows the futures side by side and outputs past + the one you keep.",
            inputs=[
                types.WorldModel.Input("world_model", tooltip="The model from Inferix Load World Model."),
                io.String.Input(
                    "past_prompt",  # not "prompt": an output node's hidden inputs include the workflow as "prompt"
                    multiline=True,
                    default="a car drives along a winding coastal road",
                    tooltip="The past's prompt. Ignored when conditioning is connected.",
                ),
                io.String.Input(
                    "futures",
                    multiline=True,
                    default="=\na car drives along a winding coastal road at night\n"
                    "a car drives along a winding coastal road in snow",
                    tooltip=f"One future per line: its prompt, or '{KEEP_PROMPT}' to keep the past's prompt "
                    f"(with another seed). At most {MAX_FUTURES}.",
                ),
                io.Int.Input("past_blocks", default=4, min=1, max=MAX_BLOCKS, tooltip="Blocks of common past."),
                io.Int.Input("future_blocks", default=3, min=1, max=MAX_BLOCKS, tooltip="Blocks of each future."),
                *frame_size_inputs(),
                io.Int.Input(
                    "seed",
                    default=0,
                    min=0,
                    max=0xFFFFFFFFFFFFFFFF,
                    control_after_generate=True,
                    tooltip="Noise seed of the past; future i draws from seed + 1 + i.",
                ),
                io.Int.Input(
                    "keep",
                    default=0,
                    min=0,
                    max=MAX_FUTURES - 1,
                    tooltip="Which future (0 = the first line) the 'chosen' output continues the past with.",
                ),
                types.KVCacheConfig.Input(
                    "kv_cache",
                    optional=True,
                    tooltip="Cache settings (window, sink, page size); resident full precision only "
                    "(offload and int8 pages cannot be shared yet).",
                ),
                io.Conditioning.Input(
                    "conditioning", optional=True, tooltip="A text embedding for the past; replaces the prompt text."
                ),
            ],
            outputs=[
                io.Image.Output("side_by_side", tooltip="The futures' frames next to each other, left to right."),
                io.Image.Output("chosen", tooltip="The past followed by the kept future, one video."),
                io.String.Output("info", tooltip="Futures, KV pages shared and used."),
            ],
            hidden=[io.Hidden.unique_id],
            is_output_node=True,  # it shows what it shared on the node (and runs without a downstream node)
        )

    @classmethod
    def validate_inputs(cls, futures: str | None = None) -> bool | str:
        # one input: ComfyUI pins a validator's message on every input it names (keep is checked in execute)
        if futures is None:
            return True
        parsed = parse_futures(futures)
        return parsed if isinstance(parsed, str) else True

    @classmethod
    def execute(
        cls,
        world_model: Any,
        past_prompt: str,
        futures: str,
        past_blocks: int,
        future_blocks: int,
        width: int,
        height: int,
        seed: int,
        keep: int,
        kv_cache: Any = None,
        conditioning: Any = None,
    ) -> io.NodeOutput:
        from inferix_core.api import check_plan, plan_run
        from inferix_core.clients.branching import branch_video
        from inferix_core.errors import ConfigError

        parsed = parse_futures(futures)
        if isinstance(parsed, str):
            raise ConfigError(parsed)
        problem = size_problem(width, height, world_model=world_model)
        if problem:
            raise ConfigError(problem)
        if not 0 <= keep < len(parsed):
            raise ConfigError(f"keep={keep} but there are {len(parsed)} futures (0..{len(parsed) - 1})")
        # one stream's plan of the whole length (its budget); branch_video then admits the N futures against it:
        # the past's pages once + N × their own, naming the largest N that fits when they do not
        plan = plan_run(world_model, kv_cache, width, height, past_blocks + future_blocks, world_model.sampling)
        log.info("%s", plan.describe())
        check_plan(plan)
        rt.ensure_loaded(world_model, plan.total_bytes - plan.weights_bytes)
        text = conditioning_tensor(conditioning) if conditioning is not None else past_prompt
        result = branch_video(
            world_model, text, parsed, past_blocks=past_blocks, future_blocks=future_blocks,
            width=width, height=height, seed=seed, cache=kv_cache, budget_bytes=plan.budget_bytes,
        )  # fmt: skip
        s = result.stats
        info = (
            f"{len(parsed)} futures of {future_blocks} blocks after {past_blocks} blocks of past; KV pages at the "
            f"end: {s['used_pages']} in use, {s['shared_pages']} of them shared, {s['page_copies']} copied on write"
        )
        return io.NodeOutput(
            frames_to_image(result.side_by_side()), frames_to_image(result.chosen(keep)), info, ui={"text": [info]}
        )
