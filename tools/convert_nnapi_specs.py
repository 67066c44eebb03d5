#!/usr/bin/env python3
"""Convert AOSP's NNAPI test specs (runtime/test/specs/V1_*/*.mod.py) into mlts's committed data set.

Build-time tool, run once when the specs change; mlts reads only its output. Each spec file is executed
with our implementation of the spec DSL (mlts.conformance.nnapi_cts.spec_dsl), every variation expanded as
NNAPI's generator does, and every resulting test written to
mlts/conformance/nnapi_cts/vectors/<dir>.nnvec.xz. Files that cannot be run are listed with the reason in
the data set and on stdout.

    python tools/convert_nnapi_specs.py --specs ../shared/aosp-nnapi-1.3/nn/runtime/test/specs
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlts.conformance.nnapi_cts import spec_dsl, store  # noqa: E402

REGENERATE = "python tools/convert_nnapi_specs.py --specs <AOSP frameworks/ml>/nn/runtime/test/specs"
SOURCE = ("AOSP platform/frameworks/ml, Android 11 (NNAPI 1.3): nn/runtime/test/specs/<dir>/*.mod.py, "
          "Copyright The Android Open Source Project, Apache License 2.0")


def _collect_subgraphs(main: spec_dsl.Model) -> list[spec_dsl.Model]:
    """The main model then every model it references, numbered in first-use order (depth first)."""
    models = [main]
    index: dict[int, int] = {id(main): 0}

    def visit(model: spec_dsl.Model) -> None:
        for operand in model.operands:
            if operand.type.type == "SUBGRAPH":
                ref = operand.value[0]
                if id(ref) not in index:
                    index[id(ref)] = len(models)
                    models.append(ref)
                    visit(ref)
    visit(main)
    return models


def _run_order(model: spec_dsl.Model) -> list[spec_dsl.Operation]:
    """Operations sorted so that producers come first (depth first over the declared order)."""
    position = {o.name: i for i, o in enumerate(model.operands)}
    producer = {}
    for operation in model.operations:
        for out in operation.outs:
            producer[position[out.name]] = operation
    ordered, placed = [], set()

    def place(operation: spec_dsl.Operation) -> None:
        if id(operation) in placed:
            return
        placed.add(id(operation))
        for i in operation.ins:
            dep = producer.get(position[i.name])
            if dep is not None:
                place(dep)
        ordered.append(operation)
    for operation in model.operations:
        place(operation)
    return ordered


def _subgraph(model: spec_dsl.Model, is_main: bool, numbering: dict[int, int]) -> store.Subgraph:
    position = {o.name: i for i, o in enumerate(model.operands)}
    operands = []
    for o in model.operands:
        t = o.type
        lifetime = o.lifetime
        data = None
        if lifetime == "SUBGRAPH":
            data = store.values_of("SUBGRAPH", [numbering[id(o.value[0])] - 1])
        elif lifetime == "CONSTANT" or (is_main and lifetime in ("SUBGRAPH_INPUT", "SUBGRAPH_OUTPUT")):
            if o.value is not None:
                data = store.values_of(t.type, o.value)
                omitted_input = lifetime == "SUBGRAPH_INPUT" and len(data) == 0  # CTS: a null buffer
                if len(data) != t.count() and not t.is_scalar() and not omitted_input:
                    raise ValueError(f"operand {o.name}: {len(data)} values for dimensions {t.dimensions}")
        cq = None
        if isinstance(t.extraParams, spec_dsl.SymmPerChannelQuantParams) and not t.extraParams.hide:
            cq = (int(t.extraParams.channelDim), [float(s) for s in t.extraParams.scales])
        operands.append(store.Operand(t.type, list(t.dimensions), float(t.scale), int(t.zeroPoint), lifetime, data, cq,
                                      isinstance(o, spec_dsl.IgnoredOutput)))
    operations = [(op.optype, [position[i.name] for i in op.ins], [position[x.name] for x in op.outs])
                  for op in _run_order(model)]
    inputs = [i for i, o in enumerate(model.operands) if isinstance(o, spec_dsl.Input)]
    outputs = [i for i, o in enumerate(model.operands) if isinstance(o, spec_dsl.Output)]
    return store.Subgraph(operands, operations, inputs, outputs)


def convert_case(case: spec_dsl.SpecCase, spec_name: str, spec_dir: str) -> store.Case:
    models = _collect_subgraphs(case.model)
    numbering = {id(m): i for i, m in enumerate(models)}
    subgraphs = [_subgraph(m, i == 0, numbering) for i, m in enumerate(models)]
    return store.Case(case.name, spec_name, spec_dir, case.version, bool(case.model.isRelaxed), case.expect_failure,
                      case.multinomial_tolerance, case.variation_names, subgraphs, case.declared_operations)


def convert_file(path: str, spec_dir: str) -> list[store.Case]:
    spec_name = re.sub(r"\..*", "", os.path.basename(path))
    return [convert_case(c, spec_name, spec_dir) for c in spec_dsl.run_spec_file(path)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", required=True, help="AOSP nn/runtime/test/specs directory")
    parser.add_argument("--out", default=str(store.VECTORS_DIR), help="output directory (default: %(default)s)")
    parser.add_argument("--dirs", nargs="*", default=list(store.SPEC_DIRS), help="spec directories to convert")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    total_cases, total_bytes = 0, 0
    for spec_dir in args.dirs:
        started = time.time()
        cases, skipped, digests = [], [], {}
        for path in sorted(glob.glob(os.path.join(args.specs, spec_dir, "*.mod.py"))):
            name = os.path.basename(path)
            digests[name] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            try:
                cases.extend(convert_file(path, spec_dir))
            except Exception as e:  # a spec we cannot run is listed, never silently dropped
                reason = "".join(traceback.format_exception_only(type(e), e)).strip()
                skipped.append({"file": name, "reason": reason})
                print(f"{spec_dir}/{name}: skipped: {reason}", file=sys.stderr)
        provenance = {"source": SOURCE.replace("<dir>", spec_dir), "license": "Apache-2.0",
                      "regenerate": REGENERATE, "spec_sha256": digests}
        size = store.write_data_set(store.DataSet(spec_dir, cases, skipped, provenance),
                                    os.path.join(args.out, f"{spec_dir}{store.SUFFIX}"))
        total_cases += len(cases)
        total_bytes += size
        print(f"{spec_dir}: {len(digests)} spec files, {len(cases)} cases, {len(skipped)} skipped, "
              f"{size / 1e6:.2f} MB, {time.time() - started:.0f} s")
    print(f"total: {total_cases} cases, {total_bytes / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
