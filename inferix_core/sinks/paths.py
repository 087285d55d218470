"""Output file naming: numbered names that never collide, and publishing a finished temp file.

Sinks write to ``<name>.partial<ext>`` and move it to its final name at close. Nothing here ever
overwrites an existing file: a name taken in the meantime moves the output to the next free number.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path, PurePosixPath, PureWindowsPath

from inferix_core.errors import ConfigError

logger = logging.getLogger(__name__)

PARTIAL_TAG = ".partial"
_PUBLISHED: list[Path] = []  # every file publish() created in this process, in order (see published_since)
_PUBLISHED_BASE = [0]  # how many older entries were trimmed off the front
_PUBLISHED_KEEP = 100_000
_PUBLISHED_LOCK = threading.Lock()
NUMBER_DIGITS = 5  # name_00001.mp4, as ComfyUI's SaveImage counter


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# One mode for every published output (videos, frames, world states, downloads): 0666 less the umask, i.e.
# 0644 under the usual 022, as a plain open() gives. safetensors and mkstemp write 0600; publish() sets it.
OUTPUT_MODE = 0o666 & ~_umask()


def confine_prefix(root: str | os.PathLike[str], prefix: str) -> tuple[Path, str]:
    """``(root/sub, name)`` for a ``filename_prefix`` such as ``'inferix/clip'``, refusing every escape.

    Why strict: a prefix comes from a workflow (someone else's JSON, or a ``/prompt`` client), and the
    output folder is the only place it may write. Refused with a one-line ``ConfigError``: empty prefixes,
    absolute paths (POSIX or Windows), ``.``/``..`` as the file name, and anything whose folder resolves
    (symlinks included) outside ``root``.
    """
    text = str(prefix).strip()
    hint = "use a relative prefix under the output folder, such as 'inferix/video'"
    if not text:
        raise ConfigError(f"filename_prefix is empty; {hint}")
    if "\x00" in text:
        raise ConfigError(f"filename_prefix {prefix!r} contains a NUL character; {hint}")
    if PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute() or PureWindowsPath(text).drive:
        raise ConfigError(f"filename_prefix '{prefix}' is an absolute path; {hint}")
    base = Path(root).resolve()
    name = PurePosixPath(text.replace("\\", "/")).name
    target = (base / text).resolve()
    folder = target.parent
    if name in ("", ".", "..") or target == base or (folder != base and base not in folder.parents):
        raise ConfigError(f"filename_prefix '{prefix}' points outside the output folder {base}; {hint}")
    return folder, target.name


def make_output_dir(folder: str | os.PathLike[str]) -> Path:
    """Create an output folder, or a one-line ConfigError (read-only file system, a file in the way, no permission)."""
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cannot create the output folder {path} ({error.strerror or error}); choose a writable folder "
            "(--output-dir, or the filename_prefix)"
        ) from None
    return path


def partial_path(path: Path) -> Path:
    """``out/clip_00001.mp4`` → ``out/clip_00001.partial.mp4`` (the extension stays, so players open it)."""
    return path.with_name(path.stem + PARTIAL_TAG + path.suffix)


def unique_path(directory: str | os.PathLike[str], prefix: str, ext: str) -> Path:
    """Return ``directory/prefix_NNNNN.ext`` with a number above every existing one (finished or partial).

    The directory is created. Numbering continues after the highest number present rather than filling
    gaps, so the newest output always sorts last.
    """
    folder = make_output_dir(directory)
    ext = ext.lstrip(".")
    suffix = f".{ext}" if ext else ""
    pattern = re.compile(rf"^{re.escape(prefix)}_(\d+)(?:{re.escape(PARTIAL_TAG)})?{re.escape(suffix)}$")
    highest = 0
    for entry in os.listdir(folder):
        match = pattern.match(entry)
        if match:
            highest = max(highest, int(match.group(1)))
    return folder / f"{prefix}_{highest + 1:0{NUMBER_DIGITS}d}{suffix}"


def next_free_path(path: Path) -> Path:
    """``clip.mp4`` → ``clip_00001.mp4`` (or the next free number) when ``clip.mp4`` is taken."""
    match = re.match(rf"^(.*)_(\d{{{NUMBER_DIGITS}}})$", path.stem)
    prefix = match.group(1) if match else path.stem
    return unique_path(path.parent, prefix, path.suffix)


def publish(temp: Path, final: Path) -> Path:
    """Move ``temp`` to ``final`` without ever replacing a file; returns the name actually used.

    The published file gets OUTPUT_MODE, whichever writer made it (docs/security.md, "File modes").

    ``os.link`` fails when the target exists, which makes the check and the move one atomic step; on
    file systems without hard links we fall back to check-then-rename.
    """
    target = final
    try:
        os.chmod(temp, OUTPUT_MODE)
    except OSError as exc:  # a file system without modes: the output is still published
        logger.debug("cannot set the mode of %s: %s", temp, exc)
    for _ in range(1000):
        try:
            os.link(temp, target)
        except FileExistsError:
            target = next_free_path(final)
            continue
        except OSError:  # no hard links (some network / FAT file systems)
            if target.exists():
                target = next_free_path(final)
                continue
            os.rename(temp, target)
            break
        os.unlink(temp)
        break
    else:  # pragma: no cover - a thousand concurrent writers of the same name
        logger.error("could not find a free name for %s; the output stays at %s", final, temp)
        return temp
    if target != final:
        logger.warning("%s appeared while writing; saved as %s instead (never overwriting)", final, target)
    with _PUBLISHED_LOCK:
        _PUBLISHED.append(target)
        if len(_PUBLISHED) > 2 * _PUBLISHED_KEEP:  # a long-lived server: keep the record bounded
            del _PUBLISHED[:_PUBLISHED_KEEP]
            _PUBLISHED_BASE[0] += _PUBLISHED_KEEP
    return target


def write_text_output(path: str | os.PathLike[str], text: str, *, force: bool = False) -> Path:
    """Write a result file (e.g. `--json OUT`) without ever replacing one: a taken name gets the next number.

    With `force` the file is replaced (atomically). Returns the path written.
    """
    final = Path(path)
    make_output_dir(final.parent if str(final.parent) else ".")
    temp = final.with_name(f".{final.name}.{os.getpid()}{PARTIAL_TAG}")
    temp.write_text(text, encoding="utf-8")
    if force:
        os.replace(temp, final)
        return final
    written = publish(temp, final)
    if written != final:
        print(f"{final} exists; wrote {written} instead (--force replaces it)")
    return written


def publish_mark() -> int:
    """A position in this process's record of published files, for `published_since`."""
    with _PUBLISHED_LOCK:
        return _PUBLISHED_BASE[0] + len(_PUBLISHED)


def published_since(mark: int) -> list[Path]:
    """Files this process published after `mark`: a run's own outputs, not another run's in the same folder."""
    with _PUBLISHED_LOCK:
        return list(_PUBLISHED[max(0, mark - _PUBLISHED_BASE[0]) :])
