"""ctypes binding of the C API in include/celtune/celtune.h.

The package binds the C ABI, not PyTorch's C++ ABI, so one build of libceltune
works with any recent torch. The library is found, in this order:
  1. $CELTUNE_LIBRARY, a path to libceltune.so (a build tree: build/src/runtime/libceltune.so);
  2. libceltune.so installed inside this package (pip install .).
The shipped database is found by the library itself, beside libceltune.so.
"""
from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, Structure, c_char_p, c_float, c_int, c_int64, c_size_t, c_void_p
from pathlib import Path

# The enums of celtune.h (C enums are ints on every ABI we build for).
BF16, FP16, FP32 = 0, 1, 2
INT32, INT64 = 0, 1
MEAN, SUM, NONE = 0, 1, 2
FORWARD, FORWARD_BACKWARD = 0, 1
OK, INVALID_ARGUMENT, ENVIRONMENT, INTERNAL = 0, 2, 3, 4
REDUCTIONS = {"mean": MEAN, "sum": SUM, "none": NONE}


class CeltuneError(RuntimeError):
    """A failed libceltune call; the message is the library's (celtune_last_error)."""


class CeltuneInvalidArgument(CeltuneError, ValueError):
    """Bad input: shape, option, dtype, config or target (CELTUNE_ERROR_INVALID_ARGUMENT)."""


class LossOptions(Structure):
    _fields_ = [("ignore_index", c_int64), ("reduction", c_int), ("label_smoothing", c_float),
                ("softcap", c_float), ("z_loss", c_float)]


class FlceArgs(Structure):
    _fields_ = [("tokens", c_int64), ("hidden", c_int64), ("vocab", c_int64), ("dtype", c_int),
                ("target_dtype", c_int), ("options", LossOptions), ("mode", c_int),
                ("x", c_void_p), ("w", c_void_p), ("bias", c_void_p), ("targets", c_void_p),
                ("grad_scale", c_void_p), ("grad_tokens", c_void_p), ("loss", c_void_p),
                ("token_loss", c_void_p), ("lse", c_void_p), ("dx", c_void_p), ("dw", c_void_p),
                ("db", c_void_p), ("bad_target", c_void_p), ("config_json", c_char_p)]


class CeArgs(Structure):
    _fields_ = [("tokens", c_int64), ("vocab", c_int64), ("dtype", c_int), ("target_dtype", c_int),
                ("options", LossOptions), ("mode", c_int), ("logits", c_void_p), ("targets", c_void_p),
                ("grad_scale", c_void_p), ("grad_tokens", c_void_p), ("loss", c_void_p),
                ("token_loss", c_void_p), ("lse", c_void_p), ("dz", c_void_p), ("bad_target", c_void_p),
                ("config_json", c_char_p)]


def library_path() -> Path:
    env = os.environ.get("CELTUNE_LIBRARY")
    if env:
        p = Path(env)
        if not p.exists():
            raise ImportError(f"CELTUNE_LIBRARY={env}: no such file")
        if not p.is_file():
            raise ImportError(f"CELTUNE_LIBRARY={env}: not a file (set it to libceltune.so itself)")
        return p
    here = Path(__file__).resolve().parent
    for name in ("libceltune.so", "libceltune.dylib"):
        if (here / name).is_file():
            return here / name
    raise ImportError("libceltune not found: install the package (pip install .) or set "
                      "CELTUNE_LIBRARY to a built libceltune.so (e.g. build/src/runtime/libceltune.so)")


_lib = None
_lib_lock = threading.Lock()


def lib() -> ctypes.CDLL:
    """The loaded library, loaded on first use (so importing celtune never fails for want of it)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _load(library_path())
        return _lib


def _load(path: Path) -> ctypes.CDLL:
    # One exception for any file that is not a loadable libceltune: ctypes says
    # OSError for a non-library and AttributeError for a library without our
    # symbols (a helper's probe, sixty-third session).
    try:
        L = ctypes.CDLL(str(path))
        L.celtune_create  # noqa: B018 (the lookup is the check)
    except (OSError, AttributeError) as e:
        raise ImportError(f"{path} is not a loadable libceltune ({e})") from e
    ctx_pp = POINTER(c_void_p)
    L.celtune_create.argtypes = [ctx_pp, c_char_p]
    L.celtune_create_cpu.argtypes = [ctx_pp, c_char_p]
    L.celtune_destroy.argtypes = [c_void_p]
    L.celtune_destroy.restype = None
    for f, a in ((L.celtune_flce, FlceArgs), (L.celtune_ce, CeArgs)):
        f.argtypes = [c_void_p, POINTER(a), c_void_p]
    for f, a in ((L.celtune_flce_config, FlceArgs), (L.celtune_ce_config, CeArgs)):
        f.argtypes = [c_void_p, POINTER(a), c_char_p, c_size_t, c_char_p, c_size_t]
    L.celtune_scale.argtypes = [c_void_p, c_void_p, c_void_p, c_int64, c_int, c_void_p, c_void_p]
    L.celtune_last_error.argtypes = [c_void_p]
    L.celtune_last_error.restype = c_char_p
    L.celtune_version.restype = c_char_p
    L.celtune_context_device.argtypes = [c_void_p]
    L.celtune_sizeof.argtypes = [c_char_p]
    L.celtune_sizeof.restype = c_size_t
    # A struct laid out differently here and in the library would be read as
    # garbage: refuse to run rather than pass it.
    for name, cls in ((b"celtune_flce_args", FlceArgs), (b"celtune_ce_args", CeArgs),
                      (b"celtune_loss_options", LossOptions)):
        if L.celtune_sizeof(name) != ctypes.sizeof(cls):
            raise ImportError(f"{path}: {name.decode()} is {L.celtune_sizeof(name)} bytes in the library and "
                              f"{ctypes.sizeof(cls)} in celtune._lib: a mismatched build")
    return L


def version() -> str:
    return lib().celtune_version().decode()


class Context:
    """One celtune context: device >= 0 for that CUDA device (made current by
    the caller around creation and calls), or -1 for the CPU backend."""

    def __init__(self, device: int, db_path: str | None = None):
        L = lib()
        h = c_void_p()
        create = L.celtune_create_cpu if device < 0 else L.celtune_create
        st = create(ctypes.byref(h), db_path.encode() if db_path else None)
        if st != OK:
            # The context that held the message is gone: the library keeps it
            # for celtune_last_error(NULL) (a malformed CELTUNE_MAX_SCRATCH).
            why = L.celtune_last_error(None).decode(errors="replace")
            msg = f"celtune: cannot create a context for {'the CPU' if device < 0 else f'cuda:{device}'}: {why}"
            raise CeltuneInvalidArgument(msg) if st == INVALID_ARGUMENT else CeltuneError(msg)
        self.handle = h
        self.device = device
        if device >= 0 and L.celtune_context_device(h) != device:
            L.celtune_destroy(h)
            raise CeltuneError(f"celtune: the context was created on CUDA device "
                               f"{L.celtune_context_device(h)}, not {device}: is this build without CUDA?")

    def _check(self, st: int) -> None:
        if st == OK:
            return
        msg = lib().celtune_last_error(self.handle).decode(errors="replace")
        if st == INVALID_ARGUMENT:
            raise CeltuneInvalidArgument(f"celtune: {msg}")
        raise CeltuneError(f"celtune: {msg}")

    def flce(self, args: FlceArgs, stream: int = 0) -> None:
        self._check(lib().celtune_flce(self.handle, ctypes.byref(args), c_void_p(stream or None)))

    def scale(self, dst: int, src: int, n: int, dtype: int, scale: int, stream: int = 0) -> None:
        """dst = src * (*scale), n elements of dtype (celtune_scale); raw pointers."""
        self._check(lib().celtune_scale(self.handle, c_void_p(dst), c_void_p(src), n, dtype, c_void_p(scale),
                                        c_void_p(stream or None)))

    def ce(self, args: CeArgs, stream: int = 0) -> None:
        self._check(lib().celtune_ce(self.handle, ctypes.byref(args), c_void_p(stream or None)))

    def config(self, args) -> tuple[str, str]:
        js = ctypes.create_string_buffer(4096)
        tag = ctypes.create_string_buffer(64)
        f = lib().celtune_flce_config if isinstance(args, FlceArgs) else lib().celtune_ce_config
        self._check(f(self.handle, ctypes.byref(args), js, len(js), tag, len(tag)))
        return js.value.decode(), tag.value.decode()
