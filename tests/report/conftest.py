import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from sample_runs import write_sample_runs  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run directories (run with stress records, baseline, a second machine), written once per module."""
    return write_sample_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def runs_without_stress(tmp_path_factory):
    return write_sample_runs(tmp_path_factory.mktemp("runs_plain"), stress=False)
