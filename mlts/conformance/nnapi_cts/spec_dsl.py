"""Our implementation of the Python DSL that NNAPI's test specs (`*.mod.py`) are written in.

The spec files are Python: they build models from Input/Output/Parameter/Internal operands (spec_model),
attach Examples, and ask for variations (spec_variations). This module provides Example, the namespace a
spec file runs in, and the expansion of every example into test cases named, ordered and valued as
NNAPI's generator makes them. Build time only: mlts reads the converted data (store.py), never the specs."""
from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from . import spec_model
from .spec_model import (BoolScalar, Float16Scalar, Float32Scalar, Float32Vector, IgnoredOutput, Input,
                         Int32Scalar, Int32Vector, Internal, Model, Operand, OperandKind, Operation, Output,
                         Parameter, SkipVariation, SubgraphReference, SymmPerChannelQuantParams, _joined, _unique,
                         quantize)
from .spec_variations import (ActivationConverter, AllInputsAsInternalCoverter,
                              AllOutputsAsInternalCoverter, AllTensorsAsInputsConverter, AxisConverter,
                              DataLayoutConverter, DataTypeConverter, DefaultVariation, ModelVariation,
                              RelaxedModeConverter, _as_variation)

# The DSL's names (spec_namespace) and what the converter reads.
__all__ = ["ActivationConverter", "AllInputsAsInternalCoverter", "AllOutputsAsInternalCoverter",
           "AllTensorsAsInputsConverter", "AxisConverter", "BoolScalar", "Configuration", "DataLayoutConverter",
           "DataTypeConverter", "DefaultVariation", "Example", "Float16Scalar", "Float32Scalar", "Float32Vector",
           "IgnoredOutput", "Input", "Int32Scalar", "Int32Vector", "Internal", "Model", "Operand", "OperandKind",
           "Operation", "Output", "Parameter", "RelaxedModeConverter", "SpecCase", "SubgraphReference",
           "SymmPerChannelQuantParams", "quantize", "run_spec_file", "run_spec_source", "spec_namespace"]

@dataclass
class SpecCase:
    """One generated test: its name and the variated, fed model (`Model` objects of this module)."""

    name: str
    model: Model
    version: str | None
    expect_failure: bool
    multinomial_tolerance: float = 0.0
    variation_names: list[str] = field(default_factory=list)
    declared_operations: list[str] = field(default_factory=list)  # the spec model's, before variations


class Example:
    """Input/expected-output values of a model, and the groups of variations to expand them with."""

    def __init__(self, *feeds: Any, model: Model | None = None, name: str | None = None) -> None:
        self.model = spec_model.current().models[-1] if model is None else model
        self.name = name
        self.expectedMultinomialDistributionTolerance = 0.0
        self.expectFailure = False
        self.testLifeTimeVariation = True
        self.feedDicts: list[Any] = []
        for feed in feeds:
            if isinstance(feed, (list, tuple)):
                self.feedDicts.append(feed)
            else:
                assert isinstance(feed, dict)
                self.feedDicts.append(({i: feed[i] for i in self.model.GetInputs()},
                                       {o: feed[o] for o in self.model.GetOutputs()}))
        self.variations: list[list[ModelVariation]] = []
        spec_model.current().examples.append(self)

    @staticmethod
    def SetVersion(version: str, *test_names: str) -> None:
        for n in test_names:
            spec_model.current().version_overrides[n] = version

    def AddVariations(self, *args: Any, includeDefault: bool = True, defaultName: str | None = None) -> "Example":
        group: list[ModelVariation] = [DefaultVariation(defaultName)] if includeDefault else []
        group.extend(_as_variation(a) for a in args)
        self.variations.append(group)
        return self

    def AddNchw(self, *args: Operand, includeDefault: bool = True, defaultName: str = "nhwc") -> "Example":
        return self.AddVariations(DataLayoutConverter("nchw").Identify(args), includeDefault=includeDefault,
                                  defaultName=defaultName)

    def AddRelaxed(self, isRelaxed: bool = True, includeDefault: bool = True,
                   defaultName: str | None = None) -> "Example":
        return self.AddVariations(RelaxedModeConverter(isRelaxed), includeDefault=includeDefault,
                                  defaultName=defaultName)

    def AddRelu(self, *args: Operand, includeDefault: bool = True, defaultName: str | None = None) -> "Example":
        return self.AddVariations(ActivationConverter("relu").Identify(args), includeDefault=includeDefault,
                                  defaultName=defaultName)

    def AddAllActivations(self, *args: Operand) -> "Example":
        return self.AddVariations(*[ActivationConverter(a).Identify(args) for a in sorted(ActivationConverter.activations)],
                                  includeDefault=False)

    def _axis_and_rank(self, *args: Operand) -> tuple[int, int]:
        origin, dim = None, None
        for a in args:
            if a.type.type == "INT32":
                origin = a.value[0]
            else:
                assert dim is None or dim == len(a.type.dimensions)
                dim = len(a.type.dimensions)
        assert dim is not None
        origin = dim - 1 if origin is None else origin
        return (origin + dim if origin < 0 else origin), dim

    def AddAxis(self, axis: Any, *args: Operand, includeDefault: bool = True,
                defaultName: str | None = None) -> "Example":
        origin, dim = self._axis_and_rank(*args)
        axes = [axis] if isinstance(axis, int) else list(axis)
        return self.AddVariations(*[AxisConverter(origin, a, dim).Identify(args) for a in axes],
                                  includeDefault=includeDefault, defaultName=defaultName)

    def AddAllPositiveAxis(self, *args: Operand) -> "Example":
        origin, dim = self._axis_and_rank(*args)
        return self.AddVariations(*[AxisConverter(origin, a, dim).Identify(args) for a in range(dim)],
                                  includeDefault=False)

    def AddAllAxis(self, *args: Operand) -> "Example":
        origin, dim = self._axis_and_rank(*args)
        return self.AddVariations(*[AxisConverter(origin, a, dim).Identify(args) for a in range(-dim, dim)],
                                  includeDefault=False)

    def AddDims(self, dims: Any, *args: Operand, includeDefault: bool = True,
                defaultName: str | None = None) -> "Example":
        origin, dim = self._axis_and_rank(*args)
        dims = [dims] if isinstance(dims, int) else list(dims)
        others = [i for i in range(dim) if i != origin]
        return self.AddVariations(*[AxisConverter(origin, origin, dim, others[0:dim - d]).Identify(args) for d in dims],
                                  includeDefault=includeDefault, defaultName=defaultName)

    def AddAllDims(self, *args: Operand) -> "Example":
        origin, dim = self._axis_and_rank(*args)
        others = [i for i in range(dim) if i != origin]
        return self.AddVariations(*[AxisConverter(origin, origin, dim, others[0:i]).Identify(args) for i in range(dim)],
                                  includeDefault=False)

    def AddAllDimsAndPositiveAxis(self, *args: Operand) -> "Example":
        origin, dim = self._axis_and_rank(*args)
        return self.AddVariations(*[AxisConverter(origin, j, dim, range(i)).Identify(args)
                                    for i in range(dim) for j in range(i, dim)], includeDefault=False)

    def AddAllDimsAndAxis(self, *args: Operand) -> "Example":
        origin, dim = self._axis_and_rank(*args)
        return self.AddVariations(*[AxisConverter(origin, k, dim, range(i)).Identify(args)
                                    for i in range(dim) for j in range(i, dim) for k in (j, j - dim)],
                                  includeDefault=False)

    def WithMultinomialDistributionTolerance(self, tolerance: float) -> "Example":
        self.expectedMultinomialDistributionTolerance = tolerance
        return self

    def ExpectFailure(self) -> "Example":
        self.expectFailure = True
        return self

    def DisableLifeTimeVariation(self) -> "Example":
        self.testLifeTimeVariation = False
        return self

    def expand(self) -> list[SpecCase]:
        """Every (feed, combination of variations) as a SpecCase, named as NNAPI's generator names tests."""
        if (self.testLifeTimeVariation and len(self.model.operations) == 1
                and self.expectedMultinomialDistributionTolerance == 0):
            self.AddVariations(AllTensorsAsInputsConverter())
            self.AddVariations(AllInputsAsInternalCoverter())
        for group in self.variations:
            for v in group:
                if v.name is None:
                    v.SetToDefaultName()
        cases = []
        for feed in self.feedDicts:
            self.model.Feed(feed)
            for combination in itertools.product(*self.variations):
                model = copy.deepcopy(self.model)
                try:
                    for variation in combination:
                        model = variation.ApplyTo(model)
                except SkipVariation:
                    continue
                names = [v.name for v in combination]
                test_name = _unique(_joined(spec_model.current().spec_name, model.name, self.name, *names),
                                    spec_model.current().test_names, "_", 1)
                version = spec_model.current().version_overrides.get(test_name, model.version)
                if model.isRelaxed:  # NNAPI checks no minimum version for relaxed tests
                    version = None
                cases.append(SpecCase(test_name, model, version, self.expectFailure,
                                      float(self.expectedMultinomialDistributionTolerance),
                                      [n for n in names if n],
                                      list(dict.fromkeys(op.optype for op in self.model.operations))))
        return cases


class Configuration:
    """Spec files may ask for weights in shared memory; the data set records constants either way."""

    use_shm_for_weights = False


def spec_namespace() -> dict[str, Any]:
    """The names a spec file may use, bound to this module's implementation."""
    names = ("ActivationConverter AllInputsAsInternalCoverter AllOutputsAsInternalCoverter AllTensorsAsInputsConverter "
             "AxisConverter BoolScalar Configuration DataLayoutConverter DataTypeConverter DefaultVariation Example "
             "Float16Scalar Float32Scalar Float32Vector IgnoredOutput Input Int32Scalar Int32Vector Internal Model "
             "Operand Output Parameter RelaxedModeConverter SubgraphReference SymmPerChannelQuantParams").split()
    module = globals()
    return {"__name__": "__nnapi_spec__", **{n: module[n] for n in names}}


def version_of_path(path: str) -> str | None:
    """The version a spec path stands for: its one /V<d>_<d>/ component (V1_3_cts_only has none)."""
    found = re.findall(r"/(V\d_\d)/", path)
    return found[0] if len(found) == 1 else None


def run_spec_source(source: str, spec_name: str, version: str | None, filename: str = "<spec>") -> list[SpecCase]:
    """Execute one spec file's text and expand all its examples (examples with the same model, name
    and variations are merged first, as the generator does)."""
    spec_model.reset(spec_name, version)
    Configuration.use_shm_for_weights = False
    exec(compile(source, filename, "exec"), spec_namespace())
    merged: dict[tuple, Example] = {}
    examples = []
    for ex in spec_model.current().examples:
        key = (id(ex.model), ex.name, tuple(tuple(id(v) for v in g) for g in ex.variations))
        if key in merged:
            merged[key].feedDicts.extend(ex.feedDicts)
        else:
            merged[key] = ex
            examples.append(ex)
    cases = []
    for ex in examples:
        cases.extend(ex.expand())
    return cases


def run_spec_file(path: str) -> list[SpecCase]:
    """Execute a `.mod.py` spec file: name from the file, version from its V1_x directory."""
    import os

    spec_name = re.sub(r"\..*", "", os.path.basename(path))
    with open(path, encoding="utf-8") as f:
        source = f.read()
    return run_spec_source(source, spec_name, version_of_path(os.path.abspath(path)), path)
