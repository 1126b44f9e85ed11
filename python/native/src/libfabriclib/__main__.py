"""`python -m libfabriclib`: prints the prefix (for CMAKE_PREFIX_PATH)."""

from . import prefix

print(prefix())
