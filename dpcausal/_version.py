"""The package's version (kept apart so that any module can import it without the API)."""

__version__ = "0.1.0"
