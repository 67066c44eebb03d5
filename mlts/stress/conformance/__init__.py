"""Conformance tests for drivers (as Android's VTS checks a driver), run per driver by the stress
suite (`mlts conformance`, or `mlts stress --tests conformance`): validation, deadlines, control flow,
memory domains, compilation caching and the execution paths (sync, async, burst, fenced). Each test
runs named checks and reports every one (pass / fail / n/a for optional features the driver lacks);
the test fails when any check failed."""
from .caching import caching
from .control_flow import control_flow
from .deadlines import deadlines
from .execution_paths import execution_paths
from .memory_domains import memory_domains
from .validation import validation

__all__ = ["caching", "control_flow", "deadlines", "execution_paths", "memory_domains", "validation"]
