"""celtune: fused (linear) cross-entropy kernels with tuned configs.

`celtune.torch` holds the PyTorch ops (it imports torch); this package itself
needs nothing beyond the standard library, and loads libceltune on first use.
"""
from ._lib import CeltuneError, CeltuneInvalidArgument, library_path, version

# The project's version (meson.build), without loading the library as version()
# does; a test holds the two equal.
__version__ = "0.1.0"

__all__ = ["CeltuneError", "CeltuneInvalidArgument", "library_path", "version", "__version__"]
