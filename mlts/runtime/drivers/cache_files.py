"""Compilation-cache files of the kernel drivers: a checked header, then a payload.

Header (little-endian), padded with zeros to a multiple of 64 bytes so that the payload is aligned:

    magic "MLTSCCH\\0" | format version u32 | kind u8 (1 model, 2 data) | 3 zero bytes
    | mlts version, driver name, driver version (each u16 length + UTF-8)
    | token (32 bytes) | payload length u64 | sha256 of the payload (32 bytes)

A file is written to a temporary name in its directory and renamed over the final name, so a reader
sees a whole old file or a whole new one, never a half-written one. A reader checks everything: the
magic and format, that the file is exactly header + payload long (truncated or padded files are
refused), the mlts version, the driver's name and version, the token and the checksum. The model
cache also records the length and digest of the data payload it was written with, so a model cache
paired with another compilation's data cache is refused too. Any failure is an MltsError
(OP_FAILED, naming the file and what was wrong): the runtime then compiles from scratch.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass

import numpy as np

from ... import __version__
from ...fileio import atomic_write
from ..enums import ResultCode
from ..errors import MltsError
from .. import vlog
from ..hal import CacheHandles, HalModel
from ..hal.validation import validate_cache_handles
from .model_codec import ALIGNMENT, decode_model, encode_model

MAGIC = b"MLTSCCH\0"
FORMAT_VERSION = 1
MODEL, DATA = 1, 2
_KIND_NAMES = {MODEL: "model cache", DATA: "data cache"}
_FIXED = struct.Struct("<8sIB3x")
_TAIL = struct.Struct("<32sQ32s")
_MAX_TEXT = 1024
_HEADER_MAX = _FIXED.size + 3 * (2 + _MAX_TEXT) + _TAIL.size


@dataclass(frozen=True)
class Identity:
    """Who may read a cache file: the mlts version and the driver that wrote it."""

    driver_name: str
    driver_version: str
    mlts_version: str = __version__


@dataclass(frozen=True)
class Header:
    kind: int
    format_version: int
    mlts_version: str
    driver_name: str
    driver_version: str
    token: bytes
    payload_length: int
    digest: bytes
    size: int  # bytes of header, padding included


def _failed(path: str, why: str) -> MltsError:
    return MltsError(ResultCode.OP_FAILED, f"compilation cache file {path!r}: {why}")


def _text(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > _MAX_TEXT:
        raise MltsError(ResultCode.BAD_DATA, f"compilation cache: {value[:40]!r}... is too long for a header")
    return struct.pack("<H", len(raw)) + raw


def encode_header(kind: int, identity: Identity, token: bytes, payload: bytes | memoryview,
                  digest: bytes | None = None) -> bytes:
    digest = hashlib.sha256(payload).digest() if digest is None else digest
    head = (_FIXED.pack(MAGIC, FORMAT_VERSION, kind) + _text(identity.mlts_version) + _text(identity.driver_name)
            + _text(identity.driver_version) + _TAIL.pack(token, len(payload), digest))
    return head + bytes(-len(head) % ALIGNMENT)


def write_cache_file(path: str, kind: int, identity: Identity, token: bytes, payload: bytes | memoryview,
                     digest: bytes | None = None) -> int:
    """Write atomically (temporary file, then rename; no fsync: a file cut short by a power loss fails
    its length or checksum check and is rewritten); returns the file's size."""
    header = encode_header(kind, identity, token, payload, digest)
    atomic_write(path, [header, payload], fsync=False)
    return len(header) + len(payload)


def parse_header(path: str, raw: bytes | memoryview, file_size: int) -> Header:
    """The header of a file whose first bytes are `raw`; checks its framing, not whom it belongs to."""
    if len(raw) < _FIXED.size:
        raise _failed(path, f"{file_size} bytes is too short for a header (empty or truncated)")
    magic, version, kind = _FIXED.unpack_from(raw, 0)
    if magic != MAGIC:
        raise _failed(path, "not an mlts compilation cache (bad magic)")
    if version != FORMAT_VERSION:
        raise _failed(path, f"format version {version}, this mlts reads {FORMAT_VERSION}")
    pos = _FIXED.size
    texts = []
    for _ in range(3):
        if pos + 2 > len(raw):
            raise _failed(path, "truncated header")
        (n,) = struct.unpack_from("<H", raw, pos)
        if n > _MAX_TEXT or pos + 2 + n > len(raw):
            raise _failed(path, "truncated or malformed header")
        try:
            texts.append(bytes(raw[pos + 2:pos + 2 + n]).decode())
        except UnicodeDecodeError:
            raise _failed(path, "malformed header text") from None
        pos += 2 + n
    if pos + _TAIL.size > len(raw):
        raise _failed(path, "truncated header")
    token, length, digest = _TAIL.unpack_from(raw, pos)
    pos += _TAIL.size
    size = pos + (-pos % ALIGNMENT)
    if file_size != size + length:
        raise _failed(path, f"{file_size} bytes, but its header says {size + length} (truncated or extended)")
    return Header(kind, version, texts[0], texts[1], texts[2], token, length, digest, size)


def read_cache_file(path: str, kind: int, identity: Identity, token: bytes, *,
                    verify: bool = True) -> tuple[Header, np.ndarray]:
    """The header and the payload (uint8, aligned). The header is checked before the payload is read,
    so a foreign file costs no more than its header. `verify=False` checks only the framing: that is
    what a driver that trusts its cache does (the `stale-cache` fault), never what a driver should do."""
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            header = parse_header(path, f.read(min(file_size, _HEADER_MAX)), file_size)
            if header.kind != kind:
                raise _failed(path, f"is a {_KIND_NAMES.get(header.kind, f'kind {header.kind}')} file, "
                                    f"expected a {_KIND_NAMES[kind]} file")
            if verify:
                _check_owner(path, header, identity, token)
            payload = np.empty(header.payload_length, np.uint8)
            f.seek(header.size)
            if f.readinto(memoryview(payload)) != header.payload_length:
                raise _failed(path, "changed while being read")
    except FileNotFoundError:
        raise _failed(path, "missing") from None
    except IsADirectoryError:
        raise _failed(path, "is a directory") from None
    except OSError as e:
        raise _failed(path, f"cannot be read: {e.strerror or e}") from None
    if verify and hashlib.sha256(payload).digest() != header.digest:
        raise _failed(path, "checksum mismatch (corrupt)")
    return header, payload


def _check_owner(path: str, header: Header, identity: Identity, token: bytes) -> None:
    wrote = Identity(header.driver_name, header.driver_version, header.mlts_version)
    if wrote != identity:
        raise _failed(path, f"written by {wrote.driver_name} {wrote.driver_version} (mlts {wrote.mlts_version}), "
                            f"not by {identity.driver_name} {identity.driver_version} (mlts {identity.mlts_version})")
    if header.token != token:
        raise _failed(path, "written for another cache token")


# -- a whole prepared model -----------------------------------------------------------------------
def check_handles(cache: CacheHandles, needed: tuple[int, int], who: str) -> None:
    """The handles a driver was given must be the number of files it asked for."""
    if (len(cache.model_cache), len(cache.data_cache)) != tuple(needed):
        raise MltsError(ResultCode.BAD_DATA, f"{who}: got {len(cache.model_cache)} model-cache and "
                                             f"{len(cache.data_cache)} data-cache files, needs {needed[0]} and "
                                             f"{needed[1]}")


def save_model(identity: Identity, model: HalModel, cache: CacheHandles) -> int:
    """Write `model` (validated) to a 1 model + 1 data cache; returns the bytes written.
    The data file goes first: a model cache is only ever next to the data it describes."""
    structure, data = encode_model(model)
    digest = hashlib.sha256(data).digest()
    bound = json.dumps({"data_length": len(data), "data_sha256": digest.hex()}).encode()
    size = write_cache_file(cache.data_cache[0], DATA, identity, cache.token, data, digest)
    return size + write_cache_file(cache.model_cache[0], MODEL, identity, cache.token, bound + b"\n" + structure)


def load_model(identity: Identity, cache: CacheHandles, *, verify: bool = True) -> HalModel:
    """The model `save_model` wrote under the same identity and token; MltsError (OP_FAILED) otherwise."""
    _, model_payload = read_cache_file(cache.model_cache[0], MODEL, identity, cache.token, verify=verify)
    data_header, data = read_cache_file(cache.data_cache[0], DATA, identity, cache.token, verify=verify)
    raw = model_payload.tobytes()
    bound_line, newline, structure = raw.partition(b"\n")
    if not newline:
        raise _failed(cache.model_cache[0], "malformed payload")
    if verify:
        try:
            bound = json.loads(bound_line)
            ok = bound["data_length"] == data.size and bound["data_sha256"] == data_header.digest.hex()
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise _failed(cache.data_cache[0], "does not belong with its model cache (another compilation's data)")
    return decode_model(structure, data)


# -- what a kernel driver calls -------------------------------------------------------------------
def identity_of(driver) -> Identity:
    return Identity(str(driver.name), str(driver.version))


def save_for_driver(driver, model: HalModel, cache: CacheHandles) -> int | None:
    """prepare_model's side job: cache the model it just prepared. A cache that cannot be written costs
    the next compilation its shortcut, never this one its result: failures are logged, not raised."""
    try:
        validate_cache_handles(cache, f"{driver.name}: prepare_model")
        check_handles(cache, driver.get_number_of_cache_files_needed(), f"{driver.name}: prepare_model")
        size = save_model(identity_of(driver), model, cache)
    except (MltsError, OSError) as e:
        vlog.log("driver", f"{driver.name}: not cached: {e}")
        return None
    vlog.log("driver", f"{driver.name}: cached the prepared model ({size} bytes)")
    return size


def load_for_driver(driver, deadline: float | None, cache: CacheHandles, *, verify: bool = True) -> HalModel:
    """prepare_model_from_cache's work: the checked handles, the deadline, then the verified model."""
    validate_cache_handles(cache, f"{driver.name}: prepare_model_from_cache")
    check_handles(cache, driver.get_number_of_cache_files_needed(), f"{driver.name}: prepare_model_from_cache")
    if deadline is not None and time.monotonic() > deadline:
        raise MltsError(ResultCode.MISSED_DEADLINE_PERSISTENT,
                        f"{driver.name}: preparation deadline already passed")
    return load_model(identity_of(driver), cache, verify=verify)
