"""mlts.models (see SPEC.md section 1): the ONNX importer and the bundled MobileNet zoo."""
from .onnx_import import ImportedModel, import_onnx
from .zoo_registry import load, zoo

__all__ = ["ImportedModel", "import_onnx", "load", "zoo"]
