"""Partitioning: which device runs each operation, and the steps (sub-models) that result.

For each operation the device with the best declared performance for the operation's operand type
among those that support it (exec time, or power under LOW_POWER; ties go to the CPU) is chosen,
then operations are grouped into steps, one device per step, in a valid run order. Intermediate
tensors that cross steps become step inputs/outputs that the runtime carries between devices.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .. import vlog
from ..drivers.reference import REFERENCE_DEVICE_NAME
from ..enums import OperandCode, OperandLifetime, OperationCode, Preference
from ..errors import MltsError, bad_data
from ..hal import HalModel, HalOperand, PerformanceInfo, IPreparedModel, Subgraph
from .manager import Device
from ..ops.control_flow import with_reachable_subgraphs_only

log = logging.getLogger("mlts.ExecutionPlan")


@dataclass
class Step:
    """One partition: operations (positions in the model's run order) prepared on one device."""

    index: int
    device: Device
    device_index: int
    operations: list[int]
    model: HalModel
    inputs: list[int]  # main-model operand indexes feeding the step, in step-input order
    outputs: list[int]  # main-model operand indexes the step produces for others
    prepared: IPreparedModel | None = None


@dataclass
class ExecutionPlan:
    steps: list[Step]
    log_lines: list[str] = field(default_factory=list)

    @property
    def is_simple(self) -> bool:
        return len(self.steps) == 1

    def device_of_operation(self) -> list[str]:
        names = {}
        for s in self.steps:
            for pos in s.operations:
                names[pos] = s.device.name
        return [names[p] for p in sorted(names)]


def operation_performance(device: Device, model: HalModel, position: int, preference: Preference) -> float:
    """NNAPI getPerformance: the declared performance for the op's input-0 operand type."""
    caps = device.capabilities
    op = model.main.operations[position]
    if op.type == OperationCode.IF:
        perf = caps.if_performance
    elif op.type == OperationCode.WHILE:
        perf = caps.while_performance
    else:
        code = model.main.operands[op.inputs[0]].type.code if op.inputs else None
        if model.relax_computation_float32_to_float16 and code == OperandCode.TENSOR_FLOAT32:
            perf = caps.relaxed_float32_to_float16_performance_tensor
        elif model.relax_computation_float32_to_float16 and code == OperandCode.FLOAT32:
            perf = caps.relaxed_float32_to_float16_performance_scalar
        else:
            perf = caps.performance(code) if code is not None else PerformanceInfo()
    return perf.power_usage if preference == Preference.LOW_POWER else perf.exec_time


def find_best_device_for_each_operation(model: HalModel, devices: list[Device], preference: Preference,
                                        cpu: Device | None, lines: list[str]) -> list[int]:
    """Returns, per operation in run order, the index into `devices` (or -1 = the CPU fallback)."""
    supported: list[list[bool]] = []
    for d in devices:
        try:
            flags = list(d.driver.get_supported_operations(model))
            if len(flags) != len(model.main.operations):
                raise MltsError(5, f"{d.name} answered {len(flags)} flags for {len(model.main.operations)} operations")
        except MltsError as e:
            lines.append(f"getSupportedOperations({d.name}) failed: {e.message}")
            flags = [False] * len(model.main.operations)
        except Exception as e:  # a driver bug must not take the client down
            lines.append(f"getSupportedOperations({d.name}) failed: {type(e).__name__}: {e}")
            flags = [False] * len(model.main.operations)
        supported.append(flags)
    choice = []
    for pos, op in enumerate(model.main.operations):
        best, best_perf = None, float("inf")
        for k, d in enumerate(devices):
            if not supported[k][pos]:
                continue
            try:
                perf = operation_performance(d, model, pos, preference)
            except Exception as e:  # a driver whose capabilities cannot be read is not usable
                lines.append(f"getCapabilities({d.name}) failed: {type(e).__name__}: {e}")
                supported[k] = [False] * len(model.main.operations)
                continue
            # Ties go to the CPU implementation itself (nnapi-reference), not to any CPU-type driver.
            if best is None or perf < best_perf or (perf == best_perf and d.name == REFERENCE_DEVICE_NAME):
                best, best_perf = k, perf
        if best is None:
            for line in lines:
                log.info(line)
            raise bad_data(f"no {'selected ' if cpu is None else ''}device supports operation {pos} "
                           f"({op.type.name})")
        lines.append(f"findBestDeviceForEachOperation({op.type.name}): {best}")
        choice.append(best)
    return choice


def build_step_model(model: HalModel, positions: list[int], external_consumers: set[int]) -> tuple[HalModel, list[int], list[int]]:
    """A sub-model of the operations at `positions` (run order); returns it with its boundary operands."""
    main = model.main
    ops = [main.operations[p] for p in positions]
    produced = {o for op in ops for o in op.outputs}
    used: list[int] = []
    seen = set()
    for op in ops:
        for i in (*op.inputs, *op.outputs):
            if i not in seen:
                seen.add(i)
                used.append(i)
    inputs = []
    for op in ops:
        for i in op.inputs:
            lt = main.operands[i].lifetime
            if i not in produced and lt in (OperandLifetime.SUBGRAPH_INPUT, OperandLifetime.TEMPORARY_VARIABLE,
                                             OperandLifetime.SUBGRAPH_OUTPUT) and i not in inputs:
                inputs.append(i)
    outputs = [i for i in used if i in produced and (
        main.operands[i].lifetime == OperandLifetime.SUBGRAPH_OUTPUT or i in external_consumers)]
    remap = {old: new for new, old in enumerate(used)}
    consumers = {i: 0 for i in used}
    for op in ops:
        for i in op.inputs:
            consumers[i] += 1
    operands = []
    for old in used:
        src = main.operands[old]
        lifetime = src.lifetime
        if old in inputs:
            lifetime = OperandLifetime.SUBGRAPH_INPUT
        elif old in outputs:
            lifetime = OperandLifetime.SUBGRAPH_OUTPUT
        elif lifetime in (OperandLifetime.SUBGRAPH_INPUT, OperandLifetime.SUBGRAPH_OUTPUT):
            lifetime = OperandLifetime.TEMPORARY_VARIABLE
        operands.append(HalOperand(src.type, lifetime, src.location, consumers[old]))
    new_ops = tuple(type(op)(op.type, tuple(remap[i] for i in op.inputs), tuple(remap[o] for o in op.outputs))
                    for op in ops)
    sub = Subgraph(tuple(operands), new_ops, tuple(remap[i] for i in inputs), tuple(remap[o] for o in outputs))
    step_model = HalModel(sub, model.referenced, model.operand_values, model.pools,
                          model.relax_computation_float32_to_float16)
    # An IF/WHILE step carries the subgraphs it references (their constants live in the shared values
    # and pools); a step without control flow carries none.
    return with_reachable_subgraphs_only(step_model), inputs, outputs


def partition(model: HalModel, devices: list[Device], preference: Preference, cpu: Device | None) -> ExecutionPlan:
    """Choose a device per operation and group operations into steps (NNAPI partitionTheWork)."""
    lines: list[str] = []
    choice = find_best_device_for_each_operation(model, devices, preference, cpu, lines)
    resolved = [devices[c] if c >= 0 else cpu for c in choice]
    index_of = {id(d): k for k, d in enumerate(devices)}
    if len({id(d) for d in resolved}) == 1:
        device = resolved[0]
        lines.append(f"partitionTheWork: only one best device: {device.name}")
        step = Step(0, device, index_of.get(id(device), -1), list(range(len(choice))), model,
                    list(model.main.input_indexes), list(model.main.output_indexes))
        plan = ExecutionPlan([step], lines)
    else:
        plan = ExecutionPlan(_group_into_steps(model, resolved, index_of), lines)
        for s in plan.steps:
            lines.append(f"partitionTheWork: step {s.index} on {s.device.name}: operations "
                         f"{[model.main.operations[p].type.name for p in s.operations]}")
    for line in lines:
        log.info(line)
        vlog.log("compilation", line)
    return plan


def _group_into_steps(model: HalModel, resolved: list[Device], index_of: dict[int, int]) -> list[Step]:
    """Greedy topological grouping: keep taking ready operations of the current device."""
    main = model.main
    producer = {o: p for p, op in enumerate(main.operations) for o in op.outputs}
    deps = [{producer[i] for i in op.inputs if i in producer} for op in main.operations]
    done: set[int] = set()
    groups: list[tuple[Device, list[int]]] = []
    current: Device | None = None
    while len(done) < len(main.operations):
        ready = [p for p in range(len(main.operations)) if p not in done and deps[p] <= done]
        same = [p for p in ready if current is not None and resolved[p] is current]
        if not same:
            current = resolved[ready[0]]
            groups.append((current, []))
            same = [p for p in ready if resolved[p] is current]
        # Take one at a time so newly-ready operations of the same device join this step.
        p = same[0]
        groups[-1][1].append(p)
        done.add(p)
    steps = []
    for k, (device, positions) in enumerate(groups):
        inside = set(positions)
        external = {i for p, op in enumerate(main.operations) if p not in inside for i in op.inputs}
        step_model, ins, outs = build_step_model(model, positions, external)
        steps.append(Step(k, device, index_of.get(id(device), -1), positions, step_model, ins, outs))
    return steps
