"""environment.json: what a run measured on, written atomically."""
import json
import os
import re

import mlts
from mlts.benchmark.environment import collect_environment, git_info, write_environment


def test_collect_environment_has_the_issue_fields():
    env = collect_environment()
    json.dumps(env, allow_nan=False)
    assert env["schema_version"] == 1
    assert env["cpu"]["model"] and env["cpu"]["logical_cores"] >= 1 and env["cpu"]["usable_cores"] >= 1
    assert env["memory"]["total_bytes"] > 0
    assert env["os"]["system"] and env["python"]["version"].count(".") == 2
    assert env["numpy"]["version"]
    assert "blas" in env["numpy"]
    assert env["mlts"]["version"] == mlts.__version__
    commit = env["mlts"]["commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    assert env["mlts"]["dirty"] in (None, True, False)


def test_git_info_outside_a_checkout(tmp_path):
    pkg = tmp_path / "site-packages" / "mlts"
    pkg.mkdir(parents=True)
    assert git_info(pkg) == {"commit": None, "dirty": None}


def test_write_environment_is_atomic_and_valid(tmp_path):
    path = write_environment(tmp_path / "run", {"hostname": "h", "x": float("inf")})
    assert json.loads(path.read_text()) == {"hostname": "h", "x": None}
    assert os.listdir(tmp_path / "run") == ["environment.json"]
