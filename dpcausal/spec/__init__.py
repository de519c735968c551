"""The YAML spec: pydantic models (extra keys forbidden, frozen) and loading with file:field errors."""
