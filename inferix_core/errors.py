"""Exception classes raised by the engine.

Every message says what was found, what was expected and what to change. User mistakes raise one of
these; the CLI prints them without a traceback (unless --debug) and nodes show them in the graph.
"""


class InferixError(Exception):
    """Base class for errors a user can act on."""


class ConfigError(InferixError, ValueError):
    """A configuration value is invalid or inconsistent with another."""


class CheckpointLayoutError(InferixError):
    """A weights file does not have a layout we recognise, or does not match the model."""


class ShapeMismatchError(InferixError, ValueError):
    """A tensor has a shape the model or pipeline cannot use."""


class CacheBudgetError(InferixError):
    """The KV cache does not fit the memory budget."""


class BackendUnavailableError(InferixError):
    """An attention backend, kernel or optional dependency was asked for but is not available."""


class WorkflowError(InferixError):
    """A workflow JSON is malformed or does not validate against the node definitions."""

    def __init__(self, message: str, node_id: str | None = None, input_name: str | None = None):
        self.node_id = node_id
        self.input_name = input_name
        where = ""
        if node_id is not None:
            where = f"node {node_id}"
            if input_name is not None:
                where += f", input '{input_name}'"
            where += ": "
        super().__init__(where + message)


class MissingFileError(InferixError, FileNotFoundError):
    """A model or data file the user must supply is missing."""


class GenerationInterruptedError(InferixError):
    """Generation was stopped by the user (ComfyUI interrupt, Ctrl-C, session stop)."""


class StreamStopped(InferixError):  # noqa: N818 -- a signal to stop one stream, not a failure
    """A sink refused more frames of its stream (a full queue under policy "stop", a failed consumer): that
    stream alone stops; the engine's other streams go on (`Engine.step_many`)."""
