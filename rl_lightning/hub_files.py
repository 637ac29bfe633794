"""The files of a pretrained folder (``rl_lightning.hub``), read with bounds: a folder from the Hub is data someone
else wrote.

- ``config.json`` is read only up to :data:`MAX_CONFIG_BYTES` and refused where it nests deeper than
  :data:`MAX_JSON_DEPTH` levels (the offending key is named), before anything walks it.
- ``model.safetensors``: its header is read first (at most :data:`MAX_HEADER_BYTES`); every tensor it declares must
  be one of the module's, of the module's dtype and shape, and the file exactly as long as those tensors, before a
  byte of tensor data is read; then ``safetensors.safe_open`` reads only the tensors the module has. A mismatch is a
  ``ValueError`` naming the tensor.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_lightning._checks import check_str

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
VIDEO_NAME = "replay.mp4"
CARD_NAME = "README.md"
#: The exported policies' file names by ``export_formats`` entry.
EXPORT_NAMES = {"pt2": "policy.pt2", "onnx": "policy.onnx"}
LIBRARY_NAME = "rl_lightning"
#: The layout version of ``config.json``; a folder of a later version is refused.
FORMAT_VERSION = 1
#: The files :func:`rl_lightning.hub.load_pretrained` needs (all that it downloads).
FILES_TO_LOAD = (CONFIG_NAME, WEIGHTS_NAME)
#: The most bytes of ``config.json`` that are read (save_pretrained's are a few kB).
MAX_CONFIG_BYTES = 4 * 2**20
#: The deepest nesting of lists and dicts read from a folder's JSON (save_pretrained's config nests about 6 deep).
MAX_JSON_DEPTH = 32
#: The largest safetensors header that is read (about 100 bytes a tensor).
MAX_HEADER_BYTES = 4 * 2**20
HUB_EXTRA = "pip install 'rl_lightning[hub]'"
#: safetensors' dtype names of torch's dtypes.
_SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_NEWER_DTYPES = {
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
}
_SAFETENSORS_DTYPES.update({getattr(torch, name): code for name, code in _NEWER_DTYPES.items() if hasattr(torch, name)})


def require(name: str) -> Any:
    """Import ``name``, one of the ``hub`` extra's modules; an ``ImportError`` saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"the Hugging Face Hub needs {name}: {HUB_EXTRA}") from error


def check_repo_id(name: str, value: Any) -> str:
    """``value`` must be a Hub repo id by the Hub's own rules (``huggingface_hub.utils.validate_repo_id``):
    ``"user/name"`` or ``"name"``, letters, digits, ``-``, ``_`` and ``.``, no ``--`` or ``..``, at most 96 chars."""
    check_str(name, value)
    hub_utils = require("huggingface_hub.utils")
    try:
        hub_utils.validate_repo_id(value)
    except ValueError as error:  # huggingface_hub's HFValidationError
        raise ValueError(
            f"{name} must be a Hub repo id such as 'user/ppo-CartPole-v1', got {value!r}: {error}"
        ) from None
    return value


# -- JSON with bounds ------------------------------------------------------------------------------------------


def read_json(path: Path, what: str, where: str, max_bytes: int = MAX_CONFIG_BYTES) -> Any:
    """The JSON file ``path`` (``what``: its name in messages), at most ``max_bytes`` long and
    :data:`MAX_JSON_DEPTH` deep; else a ``ValueError`` (the too-deep key named)."""
    with path.open("rb") as file:  # read() of at most max_bytes + 1: a device or a huge file is not read whole
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"{where}: {what} is over {max_bytes:,} bytes, more than a pretrained folder's ever is")
    return parse_json(raw, what, where)


def parse_json(raw: bytes, what: str, where: str) -> Any:
    """``raw`` as JSON, at most :data:`MAX_JSON_DEPTH` deep; else a ``ValueError`` naming the too-deep key."""
    value = _loads(raw, what, where)
    if value is _TOO_DEEP_TO_PARSE:  # deeper than Python's recursion limit: name the key from a bounded prefix
        value = _loads(_closed_prefix(raw), what, where)
    too_deep = _too_deep(value)
    if too_deep is not None or value is _TOO_DEEP_TO_PARSE:
        raise ValueError(
            f"{where}: {what} nests lists and dicts deeper than {MAX_JSON_DEPTH} levels, at {too_deep or 'the top'}: "
            "not a file rl_lightning wrote"
        )
    return value


_TOO_DEEP_TO_PARSE = object()


def _loads(raw: bytes, what: str, where: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        return _TOO_DEEP_TO_PARSE
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError, an int of over 4300 digits
        raise ValueError(f"{where}: {what} is not JSON: {error}") from error


def _too_deep(value: Any) -> str | None:
    """The key path (``['hyperparameters']['x'][0]...``) of the first list or dict at depth over
    :data:`MAX_JSON_DEPTH` (the top level is depth 1), None if there is none; walked without recursion."""
    stack = [(value, (), 1)]
    while stack:
        item, path, depth = stack.pop()
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            shown = "".join(f"[{key!r}]" for key in path[:6])
            return shown + (f"... ({len(path)} keys deep)" if len(path) > 6 else "")
        stack.extend((child, (*path, key), depth + 1) for key, child in reversed(list(children)))
    return None


def _closed_prefix(raw: bytes) -> bytes:
    """``raw`` cut just after its first ``[`` or ``{`` at depth ``MAX_JSON_DEPTH + 1`` and closed: JSON of the same
    key path that the parser reads without recursing deeper (strings are masked out before brackets are counted)."""
    codes = np.frombuffer(raw, dtype=np.uint8).copy()
    for start, end in _string_spans(raw):
        codes[start:end] = ord(" ")
    opens = (codes == ord("[")) | (codes == ord("{"))
    depth = np.cumsum(opens.astype(np.int64) - ((codes == ord("]")) | (codes == ord("}"))))
    deep = np.flatnonzero(opens & (depth > MAX_JSON_DEPTH))
    if not len(deep):  # unbalanced brackets, say: not JSON
        return raw[:0]
    cut = int(deep[0])
    openers = np.flatnonzero(opens[: cut + 1])
    # The container open at level k at the cut is the last one opened at level k before it.
    still_open = [int(openers[depth[openers] == level][-1]) for level in range(1, MAX_JSON_DEPTH + 2)]
    closers = bytes(ord("]") if codes[position] == ord("[") else ord("}") for position in reversed(still_open))
    return raw[: cut + 1] + closers


def _string_spans(raw: bytes) -> list[tuple[int, int]]:
    import re

    return [match.span() for match in re.finditer(rb'"(?:[^"\\]|\\.)*"', raw, flags=re.DOTALL)]


def read_config(path: Path, where: str) -> dict[str, Any]:
    """``config.json`` of a pretrained folder (``where``: the folder, for messages), read with :func:`read_json`'s
    bounds and checked to be rl_lightning's of a format this version reads, with the algorithm and the env spec."""
    if not path.is_file():
        raise FileNotFoundError(f"{where} has no {CONFIG_NAME}: not a folder save_pretrained wrote")
    config = read_json(path, CONFIG_NAME, where)
    if not isinstance(config, dict) or config.get("library") != LIBRARY_NAME:
        raise ValueError(f"{where}: {CONFIG_NAME} is not an rl_lightning config (its 'library' is not 'rl_lightning')")
    version = config.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: {CONFIG_NAME} has format_version {version!r}; this rl_lightning reads up to {FORMAT_VERSION} "
            "(upgrade rl_lightning)"
        )
    env = config.get("env")
    if not (
        isinstance(config.get("algorithm"), str)
        and isinstance(config.get("hyperparameters"), dict)
        and isinstance(env, dict)
        and all(key in env for key in ("env_id", "observation_space", "action_space"))
    ):
        raise ValueError(
            f"{where}: {CONFIG_NAME} lacks 'algorithm', 'hyperparameters' or the env spec (env_id, observation_space, "
            "action_space)"
        )
    return config


# -- safetensors with bounds -----------------------------------------------------------------------------------


def read_weights(path: Path, state: Mapping[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """The tensors of ``state`` (the module's ``state_dict``) from the safetensors file ``path``: its header (at
    most :data:`MAX_HEADER_BYTES`) must declare exactly ``state``'s names, dtypes and shapes before any tensor is
    read; then ``safe_open`` reads only those. A ``ValueError`` names the first tensor that does not fit."""
    safetensors = require("safetensors")
    if not path.is_file():
        raise FileNotFoundError(
            f"{where} has no {WEIGHTS_NAME}: rl_lightning loads weights from safetensors only (never a pickle: "
            ".pt, .bin, .pkl files are not read)"
        )
    header_bytes, header = _safetensors_header(path, where)
    declared = {name: entry for name, entry in header.items() if name != "__metadata__"}
    only_saved, only_own = sorted(set(declared) - set(state)), sorted(set(state) - set(declared))
    if only_saved or only_own:
        raise ValueError(
            f"{where}: its weights are not this module's network: only in {WEIGHTS_NAME}: "
            f"{only_saved[:5] or 'none'}, only in the module: {only_own[:5] or 'none'}"
        )
    data_bytes = 0
    for name, tensor in state.items():  # in the module's order: the first tensor that differs is named
        entry = declared[name]
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (isinstance(shape, list) and all(isinstance(size, int) and size >= 0 for size in shape)):
            raise ValueError(f"{where}: {WEIGHTS_NAME} is not a safetensors file: {name}'s entry is {entry!r}")
        if tuple(shape) != tuple(tensor.shape):
            raise ValueError(
                f"{where}: {WEIGHTS_NAME}'s {name} has shape {tuple(shape)} but the module built from its "
                f"hyper-parameters has {tuple(tensor.shape)}"
            )
        dtype = _SAFETENSORS_DTYPES.get(tensor.dtype)  # None: a dtype this map lacks, compared once read
        if dtype is not None and entry.get("dtype") != dtype:
            raise ValueError(
                f"{where}: {WEIGHTS_NAME}'s {name} has dtype {entry.get('dtype')!r} but the module's is {dtype!r} "
                f"({tensor.dtype})"
            )
        data_bytes += math.prod(shape) * tensor.element_size()
    size = path.stat().st_size
    if size != 8 + header_bytes + data_bytes:
        raise ValueError(
            f"{where}: {WEIGHTS_NAME} is {size:,} bytes, but its header and the module's tensors make "
            f"{8 + header_bytes + data_bytes:,}: truncated, or holding data beyond its tensors"
        )
    try:
        with safetensors.safe_open(str(path), framework="pt", device="cpu") as file:
            weights = {name: file.get_tensor(name) for name in state}
    except Exception as error:  # safetensors' own errors: offsets that overlap or leave holes
        raise ValueError(f"{where}: {WEIGHTS_NAME} is not a safetensors file: {error}") from error
    for name, tensor in state.items():
        if weights[name].dtype != tensor.dtype:
            raise ValueError(f"{where}: {WEIGHTS_NAME}'s {name} is {weights[name].dtype}, the module's {tensor.dtype}")
    return weights


def _safetensors_header(path: Path, where: str) -> tuple[int, dict[str, Any]]:
    """The header's length in bytes and the header (safetensors' layout: a little-endian u64 length, then JSON)."""
    not_safetensors = f"{where}: {WEIGHTS_NAME} is not a safetensors file"
    with path.open("rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{not_safetensors}: {len(prefix)} bytes, shorter than its header's length")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise ValueError(
                f"{not_safetensors} rl_lightning reads: its header declares {length:,} bytes, over {MAX_HEADER_BYTES:,}"
            )
        raw = file.read(length)
    if len(raw) < length:
        raise ValueError(f"{not_safetensors}: its header declares {length:,} bytes but the file ends after {len(raw)}")
    try:
        header = parse_json(raw, f"{WEIGHTS_NAME}'s header", where)
    except ValueError as error:
        raise ValueError(f"{not_safetensors}: {error}") from error
    if not isinstance(header, dict):
        raise ValueError(f"{not_safetensors}: its header is a {type(header).__name__}, not a dict of tensors")
    return length, header


# -- writing a folder without overwriting what is not ours ----------------------------------------------------
#
# save_pretrained knows which files it wrote from config.json: an rl_lightning config lists, under "files", every
# other file the save wrote with its SHA-256. A file of one of SAVED_NAMES is replaced (or removed, where this save
# does not write it) only where it is the one listed there, unchanged; anything else (a user's README.md, a card
# edited by hand, a link) is refused unless overwrite=True. A config.json written before the list existed
# (no "files") vouches for the files of SAVED_NAMES beside it. Other files in the folder are never touched.


#: Every file save_pretrained writes: the only names it replaces or removes in a folder, the only files pushed.
SAVED_NAMES = (CONFIG_NAME, WEIGHTS_NAME, *EXPORT_NAMES.values(), VIDEO_NAME, CARD_NAME)
#: config.json's key listing the other files the save wrote, each with its SHA-256.
MANIFEST_KEY = "files"
_OVERWRITE = (
    "pass overwrite=True (from the command line: --overwrite) to replace it, or save into a new or empty folder"
)


def sha256(path: Path) -> str:
    """The file's SHA-256 as hex, read in 1 MiB chunks."""
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as file:
        for chunk in iter(lambda: file.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_replaceable(directory: Path, overwrite: bool) -> None:
    """Raise ``FileExistsError`` where ``directory`` holds, under one of :data:`SAVED_NAMES`, a file a save did not
    write or that changed since (unless ``overwrite``), or something that is not a plain file (a link only with
    ``overwrite``: the link is replaced, its target untouched; a folder never). Checked before anything is written."""
    if os.path.lexists(directory) and not directory.is_dir():
        raise NotADirectoryError(f"directory {directory} exists and is not a folder: nothing was written")
    if not directory.is_dir():
        return
    listed = _listed_files(directory)
    for name in SAVED_NAMES:
        path = directory / name
        if not os.path.lexists(path):
            continue
        if path.is_symlink():
            if overwrite:
                continue
            raise FileExistsError(
                f"save_pretrained would replace {path}, a symbolic link, which it never writes through: nothing was "
                f"written; {_OVERWRITE} (the link, not its target)"
            )
        if not path.is_file():
            raise FileExistsError(f"save_pretrained would replace {path}, which is not a file: nothing was written")
        if overwrite or (listed is not None and name in listed and listed[name] in (None, sha256(path))):
            continue
        why = (
            "no config.json of rl_lightning's beside it says so"
            if listed is None
            else f"it changed since, or {CONFIG_NAME} does not list it"
        )
        raise FileExistsError(
            f"save_pretrained would overwrite {path}, which it did not write ({why}): nothing was written; {_OVERWRITE}"
        )


def _listed_files(directory: Path) -> dict[str, str | None] | None:
    """The files a previous save wrote, by name, with their SHA-256 (None: any content, a config.json of before the
    list); None where ``directory`` holds no config.json of rl_lightning's."""
    path = directory / CONFIG_NAME
    if path.is_symlink() or not path.is_file():
        return None
    try:
        config = read_json(path, CONFIG_NAME, str(directory))
    except (ValueError, OSError):
        return None
    if not isinstance(config, dict) or config.get("library") != LIBRARY_NAME:
        return None
    listed = config.get(MANIFEST_KEY)
    if listed is None:  # written before the list: the files of save_pretrained's names are its
        return dict.fromkeys(SAVED_NAMES)
    if not isinstance(listed, dict):
        return {CONFIG_NAME: None}
    return {CONFIG_NAME: None, **{name: digest for name, digest in listed.items() if isinstance(digest, str)}}


@contextlib.contextmanager
def staging_folder(directory: Path) -> Iterator[Path]:
    """A new hidden folder inside ``directory`` (created if need be) to write the files in, removed afterwards:
    :func:`move_into` then moves them (on the same file system: each move replaces a name at once)."""
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".rl_lightning-save-", dir=directory))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def move_into(staging: Path, directory: Path) -> list[str]:
    """Move the files of :data:`SAVED_NAMES` written in ``staging`` into ``directory`` (``os.replace``: a link of
    the same name is replaced, never written through), ``config.json`` last; remove those it does not hold (a
    previous save's). Returns the names moved."""
    written = [name for name in SAVED_NAMES if (staging / name).is_file()]
    for name in SAVED_NAMES:
        if name not in written and os.path.lexists(directory / name):
            (directory / name).unlink()
    for name in sorted(written, key=lambda name: name == CONFIG_NAME):
        os.replace(staging / name, directory / name)
    return written
