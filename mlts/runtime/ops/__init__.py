"""Operations: one module per NNAPI operation (or small family), each registered in `registry`."""
from .base import Operation, OperationContext, SubgraphSignature, ValueUnknown
from .registry import get_operation, implemented_operations, register

__all__ = ["Operation", "OperationContext", "SubgraphSignature", "ValueUnknown", "get_operation",
           "implemented_operations", "register"]
