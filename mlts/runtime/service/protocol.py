"""What crosses a driver-service channel: calls, replies, pool references and the driver's description.

HAL dataclasses are pickled as they are, except that their memory pools are replaced by PoolRefs:
a pool id the service caches its mapping under, plus (the first time only) the index of the file
descriptor that came with the message. So a model's weights or a request's tensors never go
through the channel; only small CONSTANT_COPY values (`operand_values`) do. Sync fences of a fenced
execution cross the same way, as descriptors named by `Call.fences`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..hal import Capabilities, HalModel, Request

#: calls a client may make; "start" must come first and builds the driver
METHODS = ("start", "get_supported_operations", "prepare_model", "prepare_model_from_cache", "execute",
           "execute_async", "execute_fenced", "burst_open", "burst_execute", "allocate", "buffer_copy_to",
           "buffer_copy_from", "ping", "shutdown")


@dataclass(frozen=True)
class PoolRef:
    """One pool as it crosses: mapped from `fds[fd_index]` (first use) or found by `pool_id` (later uses)."""

    pool_id: int
    size: int
    offset: int
    protect: int
    fd_index: int = -1  # -1: the service mapped this pool in an earlier message
    cache: bool = True  # False: map for this call only


@dataclass(frozen=True)
class Call:
    """One HAL call. `forget` and `release` carry what the client dropped since its last call."""

    call_id: int
    method: str
    args: tuple = ()
    pools: tuple[PoolRef, ...] = ()
    forget: tuple[int, ...] = ()  # pool ids
    release: tuple[tuple[str, int], ...] = ()  # ("prepared" | "burst" | "buffer", remote id or buffer token)
    #: indexes of the message's fds that are not pools: sync fences (execute_fenced's wait_for, in order) or a
    #: ring's memory and eventfds (execution_create, burst_open); the service owns them for the call and
    #: closes them after it (a ring's thread keeps duplicates)
    fences: tuple[int, ...] = ()


@dataclass(frozen=True)
class Reply:
    """The answer to one Call: a value or an error (ResultCode value, message); time spent in the driver."""

    call_id: int
    value: Any = None
    error: tuple[int, str] | None = None
    driver_us: int = 0


@dataclass(frozen=True)
class Description:
    """A driver's identity, fetched once at start so that device listings need no further calls."""

    name: str
    version: str
    feature_level: int
    device_type: int
    capabilities: Capabilities
    extensions: tuple[str, ...]
    cache_files: tuple[int, int]
    pid: int


def strip_model(model: HalModel) -> HalModel:
    """The model without its pools (they cross as PoolRefs)."""
    return dataclasses.replace(model, pools=())


def strip_request(request: Request) -> Request:
    return dataclasses.replace(request, pools=())


def attach_pools(value: Any, pools: list) -> Any:
    """Put the service-side mappings back into a stripped model or request."""
    return dataclasses.replace(value, pools=tuple(pools))
