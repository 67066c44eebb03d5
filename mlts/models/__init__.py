"""mlts.models (see SPEC.md section 1)."""
