"""ServiceDriver: a HAL driver whose real implementation runs in a child process (a driver service).

To the runtime it is a driver like any other (`hosting == "service"`); behind it, every HAL call is
a round trip to the service, with memory pools crossing as file descriptors. A crash in the driver
kills only the service: its calls fail with DEAD_OBJECT, and the runtime's fallback rules apply.
A dead service is restarted by the next model-level call (get_supported_operations, prepare_model)
up to `max_restarts` times; models prepared by the dead one stay dead (DEAD_OBJECT), as their
state was lost with it.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

from .. import vlog
from ..enums import DeviceType, Preference, Priority, ResultCode
from ..errors import MltsError, bad_data
from ..hal import (AllocatedBuffer, BufferDesc, CacheHandles, Capabilities, DeviceBuffer, ExecutionResult, HalModel,
                   IExecution, Request)
from ..drivers.base import BurstContext, Driver, ExecutionCallback, PreparedModel
from ..hal.validation import validate_deadline, validate_fence_fds, validate_timeout_after_fence
from ..hal.memory import Memory
from .build import build_driver
from .client import Connection
from .pools import StagedPools, model_pools
from .protocol import Description, strip_model
from .runs import BurstRuns, create_execution, run_remote

DEFAULT_START_TIMEOUT_S = 60.0  # a loaded CI machine can take seconds to import numpy
#: the share of the call timeout the service waits for an asynchronous execution's callback, so that
#: a callback never notified is answered as a failed execution before the client kills the service
ASYNC_WAIT_SHARE = 0.8


class ServiceDriver(Driver):
    """Hosts `import_factory(factory_ref)(*args, **kwargs)` (the driver named `name` if it makes several)
    in a child process. Starts at construction, so that device listings know its identity; raises
    MltsError naming the reference if the service cannot start."""

    hosting = "service"

    def __init__(self, factory_ref: str, args: tuple = (), kwargs: dict | None = None, *, name: str | None = None,
                 start_timeout: float = DEFAULT_START_TIMEOUT_S, call_timeout: float | None = None,
                 restart: bool = True, max_restarts: int = 3) -> None:
        if not isinstance(factory_ref, str) or not factory_ref:
            raise bad_data(f"ServiceDriver: driver reference must be a non-empty string, got {factory_ref!r}")
        self.factory_ref = factory_ref
        self._args = tuple(args)
        self._kwargs = dict(kwargs or {})
        self._wanted_name = name
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.restart = restart
        self.max_restarts = max_restarts
        self.restarts = 0
        self._lock = threading.Lock()
        self._holder: list[Connection] = []  # the live connection, for the finalizer (which must not hold self)
        self._conn = self._start()
        d = self.description
        self.name, self.version, self.feature_level = d.name, d.version, d.feature_level
        self.device_type = DeviceType(d.device_type)
        weakref.finalize(self, _close_quietly, self._holder)

    # -- the service process --------------------------------------------------------------------
    def _start(self) -> Connection:
        label = self._wanted_name or self.factory_ref
        conn = Connection(label, call_timeout=self.call_timeout)
        try:
            description, _, _ = conn.call("start", (self.factory_ref, self._args, self._kwargs, self._wanted_name),
                                          timeout=self.start_timeout)
        except MltsError as e:
            conn.close()
            raise MltsError(e.code, f"driver service for {self.factory_ref!r} failed to start: {e.message}") from None
        if not isinstance(description, Description):
            conn.close()
            raise MltsError(ResultCode.OP_FAILED, f"driver service for {self.factory_ref!r} sent no description")
        conn.label = description.name
        self.description = description
        self._holder[:] = [conn]
        return conn

    def _live(self, call: str) -> Connection:
        """The connection for a model-level call, restarting a dead service when allowed."""
        with self._lock:
            conn = self._conn
            if conn.dead and self.restart and self.restarts < self.max_restarts:
                self.restarts += 1
                vlog.log("driver", f"{self.name}: restarting its service (it {conn.death}); "
                                   f"restart {self.restarts} of {self.max_restarts}")
                try:
                    self._conn = conn = self._start()
                except MltsError as e:
                    raise MltsError(ResultCode.DEAD_OBJECT, f"{self.name}: {call}: the service {conn.death} and "
                                                            f"could not be restarted: {e.message}") from None
            if conn.dead:
                raise conn.dead_error(call)
            return conn

    @property
    def pid(self) -> int:
        """The service process id (it changes when the service is restarted)."""
        return self._conn.pid

    @property
    def alive(self) -> bool:
        return not self._conn.dead

    def channel_stats(self) -> dict[str, int]:
        """Bytes, descriptors and messages through the current service's channel (for tests and reports)."""
        return self._conn.channel.stats()

    def service_stats(self) -> dict[str, object]:
        """What the service holds: prepared models, bursts, mapped pools (after the releases queued so far),
        and its priority queue's yields and finished runs."""
        value, _, _ = self._live("service_stats").call("ping")
        return dict(value)

    def close(self) -> None:
        """Stop the service process; later calls fail with DEAD_OBJECT (no restart after close)."""
        self.restart = False
        self._conn.close()

    # -- Driver ---------------------------------------------------------------------------------
    def get_capabilities(self) -> Capabilities:
        return self.description.capabilities

    def get_supported_extensions(self) -> list[str]:
        return list(self.description.extensions)

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return tuple(self.description.cache_files)  # type: ignore[return-value]

    def wait_for_ready(self) -> None:
        self._live("wait_for_ready").call("ping")

    def get_supported_operations(self, model: HalModel) -> list[bool]:
        conn = self._live("get_supported_operations")
        value, _, _ = self._call(conn, "get_supported_operations", (strip_model(model),), model_pools(model.pools))
        return list(value)

    def prepare_model(self, model: HalModel, preference: Preference, priority: Priority, deadline: float | None,
                      cache: CacheHandles | None) -> PreparedModel:
        validate_deadline(deadline, f"{self.name}: prepare_model")  # the proxy waits by it (the rest: the driver's)
        conn = self._live("prepare_model")
        remote_id, _, _ = self._call(conn, "prepare_model", (strip_model(model), preference, priority, deadline, cache),
                                     model_pools(model.pools), deadline=deadline)
        return ServicePreparedModel(self, conn, remote_id)

    def prepare_model_from_cache(self, deadline: float | None, cache: CacheHandles) -> PreparedModel:
        validate_deadline(deadline, f"{self.name}: prepare_model_from_cache")
        conn = self._live("prepare_model_from_cache")
        remote_id, _, _ = self._call(conn, "prepare_model_from_cache", (deadline, cache), deadline=deadline)
        return ServicePreparedModel(self, conn, remote_id)

    def allocate(self, desc: BufferDesc, prepared_models, input_roles, output_roles) -> AllocatedBuffer:
        """Memory domains: the service's driver allocates; the token is bound to this connection."""
        models = list(prepared_models) if isinstance(prepared_models, (list, tuple)) else []
        if not models or any(not isinstance(p, ServicePreparedModel) or p.driver is not self for p in models):
            raise bad_data(f"{self.name}: allocate: the prepared models must be this driver's")
        conn = models[0].conn
        if any(p.conn is not conn for p in models) or conn.dead:
            raise MltsError(ResultCode.DEAD_OBJECT, f"{self.name}: allocate: the models were prepared by a "
                                                    f"service that is gone")
        token, _, _ = self._call(conn, "allocate", (desc, [p.remote_id for p in models], list(input_roles),
                                                    list(output_roles)))
        if isinstance(token, bool) or not isinstance(token, int) or token <= 0:
            raise MltsError(ResultCode.OP_FAILED, f"{self.name}: allocate returned an invalid token")
        return AllocatedBuffer(ServiceBuffer(self.name, conn, token), token)

    def _call(self, conn: Connection, method: str, args: tuple, pools: list | tuple = (), *,
              deadline: float | None = None) -> tuple[Any, int, int]:
        try:
            return conn.call(method, args, pools, deadline=deadline)
        except MltsError as e:
            if self.name in e.message:
                raise
            raise MltsError(e.code, f"{self.name}: {method}: {e.message}", output_shapes=e.output_shapes) from None

    def __repr__(self) -> str:
        state = "alive" if self.alive else self._conn.death
        return f"<ServiceDriver {self.name} ({self.factory_ref}) pid {self.pid} {state}>"


class ServicePreparedModel(PreparedModel):
    """The client's handle on a model prepared in the service; the service drops it when this is collected."""

    def __init__(self, driver: ServiceDriver, conn: Connection, remote_id: int) -> None:
        self.driver = driver  # keeps the service running while the model is in use
        self.conn = conn
        self.remote_id = remote_id
        self._finalizer = weakref.finalize(self, conn.release_later, "prepared", remote_id)

    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        return run_remote(self.conn, "execute", self.remote_id, request, measure, deadline, loop_timeout_ns)

    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> ExecutionCallback:
        """The service's driver runs its own execute(); the service answers when the driver's callback is
        notified, and this callback is notified with that answer once the outputs are copied back."""
        callback = ExecutionCallback()
        timeout = self.conn.call_timeout
        wait_s = None if timeout is None else timeout * ASYNC_WAIT_SHARE

        def run() -> None:
            try:
                result = run_remote(self.conn, "execute_async", self.remote_id, request, measure, deadline,
                                    loop_timeout_ns, wait_s)
            except Exception as e:  # run_remote reports failures in its result; this is a last resort
                result = ExecutionResult(ResultCode.OP_FAILED, [], message=f"{self.driver.name}: execute: "
                                                                           f"{type(e).__name__}: {e}")
            callback.notify(result)

        threading.Thread(target=run, name="mlts-service-async", daemon=True).start()
        return callback

    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: bool, deadline: float | None,
                       loop_timeout_ns: int, timeout_after_fence_ns: int | None) -> ExecutionResult:
        """The service's driver waits for the fences (they cross as descriptors), so that a driver that
        gets fenced execution wrong is seen to get it wrong, hosted or not."""
        try:
            fences = validate_fence_fds(wait_for, f"{self.driver.name}: execute_fenced")
            timeout_after_fence_ns = validate_timeout_after_fence(timeout_after_fence_ns,
                                                                  f"{self.driver.name}: execute_fenced")
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message)
        return run_remote(self.conn, "execute_fenced", self.remote_id, request, measure, deadline, loop_timeout_ns,
                          timeout_after_fence_ns, fences=fences)

    def configure_execution_burst(self) -> BurstContext:
        return ServiceBurstContext(self)

    def create_reusable_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> IExecution:
        """The service creates the driver's own reusable execution (or DefaultExecution) over the request,
        its pools mapped there once; each run is then one command on a shared-memory ring."""
        return create_execution(self, request, measure, loop_timeout_ns)

    def close(self) -> None:
        """Release the service's prepared model now rather than at garbage collection."""
        if self._finalizer.detach() is not None:
            self.conn.release_later("prepared", self.remote_id)
            if not self.conn.dead:
                try:
                    self.conn.call("ping")
                except MltsError:
                    pass


class ServiceBurstContext(BurstContext):
    """A burst whose server side lives in the service; opened there on its first execution, with a
    shared-memory ring that its executions take when they can (runs.BurstRuns), the channel otherwise."""

    def __init__(self, prepared: ServicePreparedModel) -> None:
        super().__init__(prepared)
        self._remote_id: int | None = None
        self._runs: BurstRuns | None = None
        self._lock = threading.Lock()

    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> ExecutionResult:
        prepared: ServicePreparedModel = self.prepared  # type: ignore[assignment]
        remote_id, runs = self._remote_id, self._runs
        if remote_id is None:
            with self._lock:
                if self._remote_id is None:
                    try:
                        self._open(prepared, deadline)
                    except MltsError as e:
                        return ExecutionResult(e.code, [], message=e.message)
                remote_id, runs = self._remote_id, self._runs
        if runs is not None:
            result = runs.execute(remote_id, request, measure, deadline, loop_timeout_ns)
            if result is not None:
                return result
        return run_remote(prepared.conn, "burst_execute", remote_id, request, measure, deadline, loop_timeout_ns)

    def _open(self, prepared: ServicePreparedModel, deadline: float | None) -> None:
        conn = prepared.conn
        try:
            runs: BurstRuns | None = BurstRuns(conn)
        except OSError:  # no memfd or eventfd left: the channel serves
            runs = None
        try:
            self._remote_id, _, _ = conn.call("burst_open", (prepared.remote_id,), deadline=deadline,
                                              descriptors=runs.ring.ring.fds if runs is not None else ())
        except MltsError:
            if runs is not None:
                runs.close()
            raise
        self._runs = runs
        weakref.finalize(self, conn.release_later, "burst", self._remote_id)

    def close(self) -> None:
        """The service closes the driver's BurstContext now (the release rides on a ping)."""
        with self._lock:
            remote_id, self._remote_id = self._remote_id, None
            runs, self._runs = self._runs, None
        if runs is not None:
            runs.close()
        if remote_id is None:
            return
        conn = self.prepared.conn  # type: ignore[attr-defined]
        conn.release_later("burst", remote_id)
        if not conn.dead:
            try:
                conn.call("ping")
            except MltsError:
                pass


class ServiceBuffer(DeviceBuffer):
    """The client's handle on a buffer in the service; copies cross as memory pools (application arrays
    are staged through shared memory); the service frees the buffer when this is freed or collected."""

    def __init__(self, driver_name: str, conn: Connection, token: int) -> None:
        self.driver_name, self.conn, self.token = driver_name, conn, token
        self._finalizer = weakref.finalize(self, conn.release_later, "buffer", token)

    def _copy(self, method: str, memory: Memory, args: tuple) -> None:
        if not isinstance(memory, Memory):
            raise bad_data(f"{self.driver_name}: {method}: expected a Memory, got {type(memory).__name__}")
        staged = StagedPools([memory], self.conn.scratch)
        ok = False
        try:
            self.conn.call(method, (self.token, *args), staged.pools)
            ok = True
        except MltsError as e:
            raise MltsError(e.code, e.message if self.driver_name in e.message
                            else f"{self.driver_name}: {method}: {e.message}") from None
        finally:
            if ok and method == "buffer_copy_to":
                staged.copy_back()
            staged.release(reusable=True)

    def copy_to(self, dst: Memory) -> None:
        self._copy("buffer_copy_to", dst, ())

    def copy_from(self, src: Memory, dimensions: tuple[int, ...]) -> None:
        self._copy("buffer_copy_from", src, (tuple(dimensions),))

    def free(self) -> None:
        self._finalizer()


def _close_quietly(holder: list[Connection]) -> None:
    for conn in holder:
        try:
            conn.close()
        except Exception:
            pass


def host_driver(factory_ref: str, args: tuple = (), kwargs: dict | None = None, *, name: str | None = None,
                hosting: str = "service", **service_options: Any) -> Driver:
    """The per-driver hosting setting: the same reference built in this process or in a service."""
    if hosting == "service":
        return ServiceDriver(factory_ref, args, kwargs, name=name, **service_options)
    if hosting == "in-process":
        if service_options:
            raise bad_data(f"host_driver: options {sorted(service_options)} apply only to hosting='service'")
        return build_driver(factory_ref, args, kwargs, name)
    raise bad_data(f"host_driver: hosting must be 'service' or 'in-process', got {hosting!r}")
