"""mlts.models (see SPEC.md section 1)."""
from .onnx_import import ImportedModel, import_onnx

__all__ = ["ImportedModel", "import_onnx"]
