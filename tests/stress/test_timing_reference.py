"""The reference a stress test times a driver against is hosted as the driver is: a service-hosted
driver is paired with nnapi-reference in a service of its own (disk and memory pressure slow a process
round trip more than a computation, so an in-process reference would not cancel the load out of the ratio).
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import MltsError, get_device
from mlts.stress.drivers import REFERENCE, SERVICE_REFERENCE
from stress_context import make_context

import partial_drivers  # noqa: E402  (tests/partial_drivers.py, on the path through conftest)


def test_a_service_hosted_driver_is_timed_against_nnapi_reference_in_a_service(tmp_path, no_strays):
    ctx = make_context("npu-correct", spec=partial_drivers.spec("correct"), hosting="service", out_dir=tmp_path)
    try:
        assert ctx.device.hosting == "service"
        m = ctx.usable_models(["conv_add_f32"])[0]
        timing = ctx.timing_reference(m.model)
        assert [s.device.name for s in timing.plan.steps] == [SERVICE_REFERENCE]
        assert get_device(SERVICE_REFERENCE).hosting == "service"
        # the same kernels in another process: the same bits as nnapi-reference here
        expected = ctx.run(ctx.compile(m.model, reference=True), m.inputs)
        for got, want in zip(ctx.run(timing, m.inputs), expected):
            np.testing.assert_array_equal(got, want)
        assert ctx.timing_reference(m.model).plan.steps[0].device is timing.plan.steps[0].device  # one service
    finally:
        ctx.close()
    with pytest.raises(MltsError, match=SERVICE_REFERENCE):  # unregistered; no_strays: its service stopped
        get_device(SERVICE_REFERENCE)


def test_an_in_process_driver_is_timed_against_nnapi_reference_in_process(tmp_path, no_strays):
    ctx = make_context("sample-all", spec="sample", out_dir=tmp_path)
    try:
        m = ctx.usable_models(["conv_add_f32"])[0]
        timing = ctx.timing_reference(m.model)
        assert [(s.device.name, s.device.hosting) for s in timing.plan.steps] == [(REFERENCE, "in-process")]
    finally:
        ctx.close()
    with pytest.raises(MltsError):
        get_device(SERVICE_REFERENCE)  # never opened
