"""Compilation caching, the runtime's side (what NNAPI's runtime does around prepareModelFromCache).

For each partition the application's token is hashed with the device's name and version, the
preference, the priority and the partition itself, so each (device, partition) has cache files of its
own and a driver update or another setting never picks up a stale cache. When the driver needs cache
files and all of them exist, `prepare_model_from_cache` is tried first; whatever goes wrong there
(a missing, corrupt, truncated or foreign file, a driver that raises or returns nonsense) only costs
the shortcut: the runtime then calls `prepare_model` with the same handles, and the driver (re)writes
the cache. Every preparation leaves a CacheReport saying which of these happened.
"""
from __future__ import annotations

import enum
import hashlib
import os
import struct
from dataclasses import dataclass

from .. import vlog
from ..enums import MAX_NUMBER_OF_CACHE_FILES, Preference, Priority, ResultCode
from ..errors import MltsError
from ..hal import CacheHandles, HalModel, IPreparedModel



class CacheStatus(str, enum.Enum):
    """What caching did for one preparation (its value is what reports and records show)."""

    DISABLED = "disabled"  # set_caching was not called
    UNSUPPORTED = "unsupported"  # the driver needs no cache files
    FROM_CACHE = "prepared-from-cache"
    SAVED = "saved"  # compiled, and the driver wrote every cache file
    NOT_SAVED = "not-saved"  # compiled with cache handles, but the driver left no complete cache


@dataclass(frozen=True)
class CacheReport:
    """One preparation: the device, the partition, what caching did, the files, and why the cache
    was not used when it was there (`message`)."""

    device: str
    part: str
    status: CacheStatus
    files: tuple[str, ...] = ()
    message: str = ""



def cache_files_needed(device) -> tuple[int, int]:
    """The driver's answer, checked; a driver that answers nonsense (or raises) gets no caching."""
    try:
        answer = device.driver.get_number_of_cache_files_needed()
        n_model, n_data = answer
        if any(isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_NUMBER_OF_CACHE_FILES
               for n in (n_model, n_data)):
            raise ValueError(f"answered {answer!r}")
        return n_model, n_data
    except Exception as e:
        vlog.log("compilation", f"{device.name}: get_number_of_cache_files_needed failed ({e}); no caching")
        return 0, 0


def partition_token(token: bytes, device, preference: Preference, priority: Priority, part: str) -> bytes:
    """The token a driver sees for one partition (NNAPI's TokenHasher over the same inputs)."""
    h = hashlib.sha256(token)
    for text in (device.name, device.version, part):
        raw = str(text).encode()
        h.update(struct.pack("<I", len(raw)) + raw)
    h.update(struct.pack("<ii", int(preference), int(priority)))
    return h.digest()


def cache_handles(cache_dir: str, token: bytes, device, preference: Preference, priority: Priority,
                  part: str, needed: tuple[int, int]) -> CacheHandles:
    step_token = partition_token(token, device, preference, priority, part)
    stem = os.path.join(cache_dir, step_token.hex())
    return CacheHandles(tuple(f"{stem}.model{k}" for k in range(needed[0])),
                        tuple(f"{stem}.data{k}" for k in range(needed[1])), step_token)


def _files(handles: CacheHandles) -> tuple[str, ...]:
    return handles.model_cache + handles.data_cache


def _stamp(path: str) -> tuple[int, int, int] | None:
    """Identity of a file's current contents (a rewrite by rename changes the inode)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _prepared_or_raise(device, value: object, call: str) -> IPreparedModel:
    if not isinstance(value, IPreparedModel):
        raise MltsError(ResultCode.OP_FAILED, f"{device.name}: {call} returned no prepared model")
    return value


def prepare_with_cache(device, model: HalModel, preference: Preference, priority: Priority,
                       deadline: float | None, cache_dir: str | None, token: bytes | None, part: str,
                       reports: list[CacheReport]) -> IPreparedModel:
    """Prepare `model` on `device`, from the cache when possible; appends one CacheReport to `reports`.
    Raises what `prepare_model` raises (a failure to prepare from cache never surfaces)."""
    driver = device.driver
    if cache_dir is None or token is None:
        prepared = driver.prepare_model(model, preference, priority, deadline, None)
        reports.append(CacheReport(device.name, part, CacheStatus.DISABLED))
        return prepared
    needed = cache_files_needed(device)
    if needed == (0, 0):
        prepared = driver.prepare_model(model, preference, priority, deadline, None)
        reports.append(CacheReport(device.name, part, CacheStatus.UNSUPPORTED))
        return prepared
    handles = cache_handles(cache_dir, token, device, preference, priority, part, needed)
    files = _files(handles)
    why = "no cache files yet"
    if all(os.path.isfile(f) for f in files):
        try:
            prepared = _prepared_or_raise(device, driver.prepare_model_from_cache(deadline, handles),
                                          "prepare_model_from_cache")
        except Exception as e:  # any failure here only means a full compile
            why = e.message if isinstance(e, MltsError) else f"{type(e).__name__}: {e}"
            vlog.log("compilation", f"{device.name}: {part}: not prepared from cache ({why}); compiling")
        else:
            vlog.log("compilation", f"{device.name}: {part}: prepared from cache")
            reports.append(CacheReport(device.name, part, CacheStatus.FROM_CACHE, files))
            return prepared
    before = [_stamp(f) for f in files]
    prepared = driver.prepare_model(model, preference, priority, deadline, handles)
    saved = all(_stamp(f) not in (None, old) for f, old in zip(files, before))
    reports.append(CacheReport(device.name, part, CacheStatus.SAVED if saved else CacheStatus.NOT_SAVED, files,
                               why))
    return prepared


def summary_status(reports: list[CacheReport]) -> str:
    """One word for a compilation: the status shared by its preparations that could cache
    ("prepared-from-cache", "saved", "not-saved"), "mixed", or "disabled"/"unsupported"."""
    if not reports:
        return CacheStatus.DISABLED.value
    caching = {r.status for r in reports if r.status not in (CacheStatus.DISABLED, CacheStatus.UNSUPPORTED)}
    if not caching:
        return reports[0].status.value if len({r.status for r in reports}) == 1 else CacheStatus.UNSUPPORTED.value
    return caching.pop().value if len(caching) == 1 else "mixed"


def cache_size_bytes(reports: list[CacheReport]) -> int:
    """Bytes of the cache files of these preparations (those that exist)."""
    total = 0
    for f in {f for r in reports for f in r.files}:
        try:
            total += os.path.getsize(f)
        except OSError:
            pass
    return total
