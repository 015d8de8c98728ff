"""The container image's recipe (``python -m image.build``; docs/image.md)."""
