"""celtune for PyTorch: fused (linear) cross-entropy as autograd ops.

    import celtune.torch as ct
    loss = ct.linear_cross_entropy(hidden, lm_head.weight, labels)   # instead of F.cross_entropy(lm_head(hidden), labels)
    loss.backward()

The kernels are libceltune's (bound through its C API with ctypes, so no build
against PyTorch's C++ ABI): CUDA tensors run the CUDA backend on the current
stream of their device, CPU tensors the CPU backend (for tests and small work,
not for speed). One celtune context per device is created on first use and
cached. Each call's kernel config comes from `config=`, else $CELTUNE_CONFIG,
else the tuned database, else the built-in default; `explain` says which.

Semantics are F.cross_entropy's for every option, with one deliberate
difference: reduction "mean" over zero valid tokens (all ignored) gives 0, where
PyTorch gives NaN (0/0), so a batch of padding does not poison training.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import inspect
import json
import math
import operator
import os
import sys
import threading
from typing import Optional

import torch
from torch import Tensor
from torch.utils._python_dispatch import _get_current_dispatch_mode

from . import _lib
from ._lib import CeltuneError, CeltuneInvalidArgument

# The C API's option fields are floats: a double from 2^128 - 2^103 up rounds to
# inf in one (3.4028235e38, NumPy's FLT_MAX as printed, still rounds to FLT_MAX).
_FLT_OVERFLOW = 3.4028235677973366e38
# ... and one of magnitude 2^-150 or less rounds to 0, which turns an option off.
_FLT_UNDERFLOW = 2.0**-150

__all__ = ["linear_cross_entropy", "cross_entropy", "explain", "check_targets", "LinearCrossEntropy", "CrossEntropy",
           "CeltuneError", "CeltuneInvalidArgument"]

_DTYPES = {torch.bfloat16: _lib.BF16, torch.float16: _lib.FP16, torch.float32: _lib.FP32}
_TARGET_DTYPES = {torch.int32: _lib.INT32, torch.int64: _lib.INT64}

# ---- contexts: one per device, created lazily ------------------------------

_contexts: dict[int, _lib.Context] = {}
_contexts_lock = threading.Lock()


def _boolish(value) -> bool:
    """A Python, NumPy or torch bool: what F.cross_entropy refuses as a number."""
    # NumPy's bool type is numpy.bool_ before 2.0 and numpy.bool since.
    return (isinstance(value, bool) or type(value).__name__ in ("bool", "bool_")
            or (isinstance(value, Tensor) and value.dtype == torch.bool))


def _flag(value, name: str) -> bool:
    """A yes/no option as a bool: any non-empty string is truthy, so
    inplace_backward="no" used to mean yes (a helper's probe, sixty-third session)."""
    if (_boolish(value) and not isinstance(value, Tensor)) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise CeltuneInvalidArgument(f"celtune: {name} must be True or False, got {value!r}")


def _device_index(dev: torch.device) -> int:
    if dev.type == "cpu":
        return -1
    if dev.type == "cuda":
        return dev.index if dev.index is not None else torch.cuda.current_device()
    raise CeltuneInvalidArgument(f"celtune: tensors on {dev} are not supported (CUDA or CPU)")


def _dense_like(t: Tensor) -> Tensor:
    """An uninitialised tensor of t's shape, dtype and device, contiguous whatever
    t's strides. The ops make their inputs contiguous before the call, and their
    fake kernels must give the strides the real ones give: empty_like of a
    transposed input failed torch.compile's inductor ("incorrect fake kernel")."""
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _context(index: int) -> _lib.Context:
    with _contexts_lock:
        ctx = _contexts.get(index)
        if ctx is None:
            if index < 0:
                ctx = _lib.Context(-1)
            else:
                # A context belongs to the CUDA device current at its creation.
                with torch.cuda.device(index):
                    ctx = _lib.Context(index)
            _contexts[index] = ctx
        return ctx


def _gemm_operand(t: Tensor) -> Tensor:
    """t contiguous and, on a GPU, 16-byte aligned: the library's GEMMs (cuBLASLt's
    and the fused path's TMA) read X and W in 16-byte pieces, and the C API
    refuses other pointers. A slice of a packed buffer can start anywhere, and
    F.linear takes it; such an input is copied (fresh allocations are aligned)."""
    t = t.contiguous()
    return t.clone() if t.is_cuda and t.data_ptr() % 16 else t


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    return None if t is None or t.numel() == 0 else t.data_ptr()


def _run(fn, index: int, args, check: bool = False) -> str:
    """Runs a C API call on the right device and stream, after reading the
    target flags of earlier calls there that the GPU has passed (_settle).
    check: the call's own targets are to be checked; returns how (_check_mode),
    decided before anything runs, so that a bad setting leaves nothing half done.
    One device switch and one capture query serve both: a call's host time
    before its first launch is an idle GPU's wait (scripts/probe/idle_latency.py)."""
    mode = _check_setting() if check else "off"
    ctx = _context(index)
    if index < 0:
        fn(ctx, args, 0)
        return "sync" if mode == "async" else mode  # the CPU checks at the call: it costs nothing there
    with torch.cuda.device(index):
        capturing = torch.cuda.is_current_stream_capturing()
        mode = _check_mode(mode, capturing)
        if not capturing:  # an event query would break a capture
            _settle(index, wait=False)
        fn(ctx, args, torch._C._cuda_getCurrentRawStream(index))
    return mode


# ---- target checks --------------------------------------------------------------
# The kernels treat a target outside [0, V) that is not ignore_index as ignored
# and write the first such token's index to a flag; here it becomes an
# exception, as F.cross_entropy's is. Reading the flag on a GPU at the call
# would synchronise the stream once a call, and the GPU then idles while the
# host launches the backward: on an H200 that cost the tiny-LM example 1.5 ms
# of a 9.6 ms step (fifty-fifth session). So by default the flag is copied to
# pinned memory behind the kernels and read once the GPU has passed it: at a
# later celtune call on that device (before it launches anything), or at
# check_targets(), which waits. CELTUNE_CHECK_TARGETS=sync reads it at the
# call; 0 skips the check (such targets are then silently ignored). On the CPU
# both checking modes raise at the call, which costs nothing there. Inside a
# CUDA graph capture nothing is read or recorded (a flag copied there is
# written only at replay), and sync is refused.
_CHECK_MODES = {"": "async", "async": "async", "sync": "sync", "1": "sync", "0": "off", "off": "off"}
# A flag is read at most this many calls after its own: beyond it the host
# waits for the oldest, so an error is never more than a few calls late.
_MAX_PENDING = 8


def _check_setting() -> str:
    """CELTUNE_CHECK_TARGETS as a mode: async, sync or off."""
    value = os.environ.get("CELTUNE_CHECK_TARGETS", "async")
    mode = _CHECK_MODES.get(value.strip().lower())
    if mode is None:
        raise CeltuneInvalidArgument(f"celtune: CELTUNE_CHECK_TARGETS is {value!r}; expected async (the "
                                     f"default), sync (or 1), or 0 (or off: no check)")
    return mode


def _check_mode(mode: str, capturing: bool) -> str:
    """The target check for a call on a GPU whose stream is (or is not) being captured."""
    if mode != "off" and capturing:
        if mode == "sync":
            raise CeltuneInvalidArgument("celtune: CELTUNE_CHECK_TARGETS=sync reads a flag at every call, which "
                                         "a CUDA graph capture cannot; use async (nothing is checked inside "
                                         "the capture) or 0")
        return "off"
    return mode


def _capturing(index: int) -> bool:
    with torch.cuda.device(index):
        return torch.cuda.is_current_stream_capturing()


class _Flags:
    """One device's bad-target flags on their way to the host, oldest first:
    a pinned slot and an event each, reused once read (a pinned allocation
    and a new event a call cost the host more than the check saved)."""
    SLOTS = 2 * _MAX_PENDING

    def __init__(self):
        self.host = torch.full((self.SLOTS,), -1, dtype=torch.int64, pin_memory=True)
        self.slots = [self.host[i] for i in range(self.SLOTS)]
        self.events = [torch.cuda.Event() for _ in range(self.SLOTS)]
        self.free = list(range(self.SLOTS))
        # (slot, target, its version then, vocab, ignore_index)
        self.queue: collections.deque = collections.deque()

    def push(self, bad: Tensor, target: Tensor, vocab: int, ignore_index: int) -> None:
        error = None
        if not self.free:  # only when threads share the device: read them all first
            try:
                self.settle(wait=True)
            except CeltuneInvalidArgument as e:  # an earlier call's, raised once this one's is queued
                error = e
        slot = self.free.pop()
        self.slots[slot].copy_(bad, non_blocking=True)
        self.events[slot].record(torch.cuda.current_stream(bad.device))
        # The target is held for the message (N integers, until the flag is
        # read), with its version: written over in place by then (a reused
        # label buffer), its value is not named.
        self.queue.append((slot, target, target._version, vocab, ignore_index))
        if error is not None:
            raise error

    def settle(self, wait: bool) -> None:
        """Reads the flags the GPU has passed (wait: all of them, waiting for
        it), oldest first, and raises for the first bad target found; the
        flags after it stay for the next check."""
        while self.queue:
            slot, target, version, vocab, ignore_index = self.queue[0]
            event = self.events[slot]
            if not (wait or len(self.queue) > _MAX_PENDING or event.query()):
                return
            event.synchronize()
            self.queue.popleft()
            i = int(self.slots[slot].item())
            self.free.append(slot)
            if i >= 0:
                raise _bad_target_error(target if target._version == version else None, i, vocab, ignore_index,
                                        " (in an earlier call, which left that token out of its loss and "
                                        "gradients; CELTUNE_CHECK_TARGETS=sync raises at the call itself)")


_flags: dict[int, _Flags] = {}
_flags_lock = threading.Lock()


def _settle(index: int, wait: bool) -> None:
    flags = _flags.get(index)
    if flags is not None and flags.queue:
        with _flags_lock:
            flags.settle(wait)


@atexit.register
def _settle_at_exit() -> None:
    # A bad target in a program's last calls would otherwise go unsaid: at
    # exit it is written to stderr (an exception raised here would be lost).
    for index in list(_flags):
        while True:
            try:
                _settle(index, wait=True)
                break
            except CeltuneInvalidArgument as e:
                print(f"celtune: warning at exit: {e}", file=sys.stderr)
            except Exception:  # a GPU already gone at exit: nothing left to read
                break


def check_targets(device=None) -> None:
    """Waits for the GPU and raises CeltuneInvalidArgument if an earlier call on
    `device` (a CUDA device, name or index; None: every device used) had a
    target outside [0, V) that was not ignore_index. Under the default
    CELTUNE_CHECK_TARGETS=async such a target is found without stalling the
    stream and raised at a later call on that device, or here: call it where a
    step must be known sound (before a checkpoint, at the end of training).
    The CPU checks at the call: nothing waits here for it."""
    if device is None:
        indices = list(_flags)
    else:
        if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
            raise CeltuneInvalidArgument(f"celtune: check_targets takes a device, its name or a CUDA index, "
                                         f"got {device!r}")
        try:
            dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        except RuntimeError as e:
            raise CeltuneInvalidArgument(f"celtune: check_targets: {e}") from None
        if dev.type == "cuda" and not _flags:  # no call there yet (or no CUDA at all): nothing to read
            return
        index = _device_index(dev)  # refuses a device type the ops refuse
        indices = [index] if index >= 0 else []
    for index in indices:
        _settle(index, wait=True)


def _bad_target_error(target: Optional[Tensor], i: int, vocab: int, ignore_index: int,
                      where: str = "") -> CeltuneInvalidArgument:
    what = f"target {int(target.reshape(-1)[i].item())}" if target is not None else \
        "the target (written over since, so its value is not known)"
    return CeltuneInvalidArgument(f"celtune: {what} at token {i} is outside [0, {vocab}) "
                                  f"and is not ignore_index ({ignore_index}){where}")


def _raise_bad_target(mode: str, bad: Tensor, target: Tensor, vocab: int, ignore_index: int) -> None:
    # mode: _run's, decided before the call. `target` and `ignore_index`
    # are the caller's, not _kernel_targets' (the message names what the caller
    # passed).
    if mode == "async":
        with _flags_lock:
            flags = _flags.get(bad.device.index)
            if flags is None:
                flags = _flags[bad.device.index] = _Flags()
            flags.push(bad, target, vocab, ignore_index)
    elif mode == "sync":
        i = int(bad.item())
        if i >= 0:
            raise _bad_target_error(target, i, vocab, ignore_index)


def _holds(dtype: torch.dtype, value: int) -> bool:
    """Whether an integer dtype holds value (a float dtype: taken as holding it)."""
    if dtype.is_floating_point:
        return True
    info = torch.iinfo(dtype)
    return info.min <= value <= info.max


def _is_ignored(target: Tensor, ignore_index: int) -> Tensor:
    """target == ignore_index, elementwise, where the target dtype can hold the
    index; nowhere otherwise. (target == 2**40 on int32 targets wrapped the index
    to the dtype, 0, and took every target 0 for ignored.)"""
    if not _holds(target.dtype, ignore_index):
        return torch.zeros_like(target, dtype=torch.bool)
    return target == ignore_index


def _kernel_ignore(ignore_index: int, vocab: int, target_dtype: torch.dtype) -> int:
    # The library refuses an ignore_index inside [0, V) (it would hide real
    # targets); PyTorch allows it (e.g. a padding id). Such a call gives the
    # library the most negative value of the target dtype instead, which no
    # target in range can take. So does an ignore_index the target dtype cannot
    # hold (int32 targets, an index past int32): no target equals it, as in
    # PyTorch, where the library would refuse the pair.
    if target_dtype not in _TARGET_DTYPES:
        return ignore_index  # refused by _target_code, with its message
    inside = 0 <= ignore_index < vocab
    return torch.iinfo(target_dtype).min if inside or not _holds(target_dtype, ignore_index) else ignore_index


def _kernel_targets(target: Tensor, ignore_index: int, vocab: int) -> Tensor:
    """The targets the library is given for the caller's (see _kernel_ignore)."""
    ign = _kernel_ignore(ignore_index, vocab, target.dtype)
    if ign == ignore_index:
        return target.contiguous()
    t = torch.where(_is_ignored(target, ignore_index), torch.full_like(target, ign), target)
    # A target that already held that value is out of range, not ignored: it
    # becomes V, which the kernels report like any other (the message reads the
    # caller's tensor, so it names the value passed).
    return torch.where(target == ign, torch.full_like(target, vocab), t)


def _dtype_code(t: Tensor, what: str) -> int:
    if t.dtype not in _DTYPES:
        raise CeltuneInvalidArgument(f"celtune: {what} has dtype {t.dtype}; expected bfloat16, float16 or float32")
    return _DTYPES[t.dtype]


def _target_code(t: Tensor) -> int:
    if t.dtype not in _TARGET_DTYPES:
        raise CeltuneInvalidArgument(f"celtune: target has dtype {t.dtype}; expected int64 or int32")
    return _TARGET_DTYPES[t.dtype]


def _common(a, data: Tensor, what: str, target: Tensor, ignore_index, reduction, label_smoothing, softcap,
            z_loss, config, mode):
    """The fields celtune_flce_args and celtune_ce_args share."""
    a.dtype = _dtype_code(data, what)
    a.target_dtype = _target_code(target)
    a.options = _lib.LossOptions(ignore_index, reduction, label_smoothing, softcap, z_loss)
    a.mode = mode
    a.config_json = config.encode() if config is not None else None
    return a


def _flce_args(x, w, target, bias, ignore_index, *opts):
    a = _lib.FlceArgs()
    a.tokens, a.hidden = x.shape
    a.vocab = w.shape[0]
    return _common(a, x, "input", target, _kernel_ignore(ignore_index, a.vocab, target.dtype), *opts)


def _ce_args(logits, target, ignore_index, *opts):
    a = _lib.CeArgs()
    a.tokens, a.vocab = logits.shape
    return _common(a, logits, "logits", target, _kernel_ignore(ignore_index, a.vocab, target.dtype), *opts)


def _f32(shape, like: Tensor) -> Tensor:
    return torch.empty(shape, dtype=torch.float32, device=like.device)


# ---- the custom ops (opaque to torch.compile; fake impls give shapes) -------
# A tracer (torch.compile, export, make_fx, functorch, fake or subclass
# tensors) gets the custom op; an eager call runs its body directly. Skipping
# the dispatcher's Python saved ~0.1 ms of host time a forward+backward (three
# op calls) with torch 2.11 on the H200's host, 9-12% of a small shape's
# (fifty-fifth session), and eager autograd needs none of it: the
# autograd.Functions below call the ops with grad mode off, as the dispatcher
# would. A body that writes over an argument moves its version counter, as the
# dispatcher does for mutates_args.


def _key_bits(*names: str) -> int:
    bits = 0
    for name in names:
        if hasattr(torch._C.DispatchKey, name):
            bits |= torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, name)).raw_repr()
    return bits


_DENSE_CPU, _DENSE_CUDA = _key_bits("CPU"), _key_bits("CUDA")
# Keys whose tensors the dispatcher resolves before a kernel sees the data: a
# negative or conjugate view, a zero tensor (no storage), a functorch batch;
# read through data_ptr() directly, a negative view gave +x's loss and an
# upstream gradient of the wrong sign (a helper's probe, fifty-fifth session).
_RESOLVED = _key_bits("Python", "Negative", "Conjugate", "ZeroTensor", "FuncTorchBatched", "Functionalize")


def _plain(t: Tensor) -> bool:
    """A dense CPU or CUDA tensor whose data_ptr() holds its values as they read.
    (The old vmap's batched tensors, as autograd.grad(is_grads_batched=True)
    passes, have neither key.)"""
    if type(t) not in (Tensor, torch.nn.Parameter):
        return False
    bits = torch._C._dispatch_keys(t).raw_repr()
    return ((bits & _DENSE_CPU) == _DENSE_CPU or (bits & _DENSE_CUDA) == _DENSE_CUDA) and not bits & _RESOLVED


def _tracing(args) -> bool:
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return True
    if _get_current_dispatch_mode() is not None:
        return True
    return not all(_plain(a) for a in args if isinstance(a, Tensor))


class _Op:
    def __init__(self, name: str, fn, mutates_args: tuple[str, ...]):
        self.fn = fn
        self.op = torch.library.custom_op(name, fn, mutates_args=mutates_args)
        params = list(inspect.signature(fn).parameters)
        self.mutated = [params.index(m) for m in mutates_args]
        self.register_fake = self.op.register_fake

    def __call__(self, *args):
        if _tracing(args):
            return self.op(*args)
        out = self.fn(*args)
        for i in self.mutated:
            torch.autograd.graph.increment_version(args[i])
        return out


def _op(name: str, mutates_args: tuple[str, ...] = ()):
    return lambda fn: _Op(name, fn, mutates_args)


# The upstream gradient of a forward call that computes the gradients: 1, read
# by the kernels and never written; one per device, not a fill kernel a call.
_ones: dict[int, Tensor] = {}


def _one(device: torch.device) -> Tensor:
    index = _device_index(device)
    one = _ones.get(index)
    if one is None:
        one = torch.ones((), dtype=torch.float32, device=device)
        if index >= 0:
            if _capturing(index):
                return one  # filled only at the graph's replay: not one to keep
            torch.cuda.current_stream(index).synchronize()  # written before any stream reads it
        one = _ones.setdefault(index, one)
    return one


# Each op runs one C API call on the caller's targets and ignore_index
# (_kernel_targets maps them for the library inside the op). flce's gradients
# for mean and sum are computed in the forward call with an upstream gradient
# of 1 (one pass over the logits, as the fused kernels intend, where
# recomputing them would repeat the GEMMs) and scaled in backward. Reduction
# none needs the per-token upstream gradient, and fp16 the upstream gradient
# before its dZ is rounded (a loss scale keeps small gradients above fp16's
# underflow only if it is applied first: in the forward call, 52% of a
# [256, 2048] dZ rounded to zero under a loss scale of 8192, against 0.2% in
# PyTorch; tests/python), so their backward recomputes with it (flce_backward).
# ce's backward always does (ce_backward; _CrossEntropy says why).


@_op("celtune::flce_forward")
def _flce_forward(x: Tensor, w: Tensor, target: Tensor, bias: Optional[Tensor], ignore_index: int,
                  reduction: int, label_smoothing: float, softcap: float, z_loss: float,
                  config: Optional[str], with_grad: bool
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    mode = _lib.FORWARD_BACKWARD if with_grad else _lib.FORWARD
    a = _flce_args(x, w, target, bias, ignore_index, reduction, label_smoothing, softcap, z_loss, config, mode)
    a.bias = 1 if bias is not None else None  # its presence, for the check; the pointer is set below
    _check_before_copy(lambda: a, x, w, bias)
    x, w = _gemm_operand(x), _gemm_operand(w)
    bias = bias.contiguous() if bias is not None else None
    N, V = x.shape[0], w.shape[0]
    tgt = _kernel_targets(target, ignore_index, V)
    loss, token_loss, lse = _f32((), x), _f32((N,), x), _f32((N,), x)
    bad = torch.empty((), dtype=torch.int64, device=x.device)
    one = _one(x.device)
    dx = _dense_like(x) if with_grad else x.new_empty(0)
    dw = _dense_like(w) if with_grad else w.new_empty(0)
    db = _dense_like(bias) if with_grad and bias is not None else x.new_empty(0)
    a.x, a.w, a.bias, a.targets = _ptr(x), _ptr(w), _ptr(bias), _ptr(tgt)
    a.grad_scale = _ptr(one)
    a.loss, a.token_loss, a.lse = _ptr(loss), _ptr(token_loss), _ptr(lse)
    a.dx, a.dw, a.db, a.bad_target = _ptr(dx), _ptr(dw), _ptr(db), _ptr(bad)
    check = _run(_lib.Context.flce, _device_index(x.device), a, check=True)
    _raise_bad_target(check, bad, target, V, ignore_index)
    return loss, token_loss, lse, dx, dw, db


@_flce_forward.register_fake
def _(x, w, target, bias, ignore_index, reduction, label_smoothing, softcap, z_loss, config, with_grad):
    N = x.shape[0]
    dx = _dense_like(x) if with_grad else x.new_empty(0)
    dw = _dense_like(w) if with_grad else w.new_empty(0)
    db = _dense_like(bias) if with_grad and bias is not None else x.new_empty(0)
    return _f32((), x), _f32((N,), x), _f32((N,), x), dx, dw, db


def _upstream(a, grad: Tensor, reduction: int) -> Tensor:
    """The upstream gradient as the library takes it: per token (none) or one scalar."""
    g = grad.contiguous().to(torch.float32)
    if reduction == _lib.NONE:
        a.grad_tokens = _ptr(g)
    else:
        a.grad_scale = _ptr(g)
    return g  # the caller holds it until the call returns


@_op("celtune::flce_backward")
def _flce_backward(x: Tensor, w: Tensor, target: Tensor, bias: Optional[Tensor], grad: Tensor, reduction: int,
                   ignore_index: int, label_smoothing: float, softcap: float, z_loss: float,
                   config: Optional[str]) -> tuple[Tensor, Tensor, Tensor]:
    x, w = _gemm_operand(x), _gemm_operand(w)
    bias = bias.contiguous() if bias is not None else None
    a = _flce_args(x, w, target, bias, ignore_index, reduction, label_smoothing, softcap, z_loss, config,
                   _lib.FORWARD_BACKWARD)
    N = x.shape[0]
    tgt = _kernel_targets(target, ignore_index, w.shape[0])
    g = _upstream(a, grad, reduction)
    loss, token_loss, lse = _f32((), x), _f32((N,), x), _f32((N,), x)
    dx, dw = _dense_like(x), _dense_like(w)
    db = _dense_like(bias) if bias is not None else x.new_empty(0)
    a.x, a.w, a.bias, a.targets = _ptr(x), _ptr(w), _ptr(bias), _ptr(tgt)
    a.loss, a.token_loss, a.lse = _ptr(loss), _ptr(token_loss), _ptr(lse)
    a.dx, a.dw, a.db = _ptr(dx), _ptr(dw), _ptr(db)
    _run(_lib.Context.flce, _device_index(x.device), a)
    return dx, dw, db


@_flce_backward.register_fake
def _(x, w, target, bias, grad, reduction, ignore_index, label_smoothing, softcap, z_loss, config):
    db = _dense_like(bias) if bias is not None else x.new_empty(0)
    return _dense_like(x), _dense_like(w), db


@_op("celtune::ce_forward")
def _ce_forward(logits: Tensor, target: Tensor, ignore_index: int, reduction: int, label_smoothing: float,
                softcap: float, z_loss: float, config: Optional[str]) -> tuple[Tensor, Tensor, Tensor]:
    _check_before_copy(lambda: _ce_args(logits, target, ignore_index, reduction, label_smoothing, softcap, z_loss,
                                        config, _lib.FORWARD), logits)
    logits = logits.contiguous()
    return _ce_call(logits, target, logits.new_empty(0), None, ignore_index, reduction, label_smoothing,
                    softcap, z_loss, config, False)


@_ce_forward.register_fake
def _(logits, target, ignore_index, reduction, label_smoothing, softcap, z_loss, config):
    N = logits.shape[0]
    return _f32((), logits), _f32((N,), logits), _f32((N,), logits)


@_op("celtune::ce_backward")
def _ce_backward(logits: Tensor, target: Tensor, grad: Tensor, reduction: int, ignore_index: int,
                 label_smoothing: float, softcap: float, z_loss: float, config: Optional[str]) -> Tensor:
    logits = logits.contiguous()
    dz = _dense_like(logits)
    _ce_call(logits, target, dz, (grad, reduction), ignore_index, reduction, label_smoothing, softcap, z_loss,
             config, True)
    return dz


@_ce_backward.register_fake
def _(logits, target, grad, reduction, ignore_index, label_smoothing, softcap, z_loss, config):
    return _dense_like(logits)


# inplace_backward: dZ over the logits, in backward, from the logits still intact.
@_op("celtune::ce_backward_inplace", mutates_args=("logits",))
def _ce_backward_inplace(logits: Tensor, target: Tensor, grad: Tensor, reduction: int, ignore_index: int,
                         label_smoothing: float, softcap: float, z_loss: float, config: Optional[str]) -> None:
    if not logits.is_contiguous():
        raise CeltuneInvalidArgument("celtune: inplace_backward needs contiguous logits")
    _ce_call(logits, target, logits, (grad, reduction), ignore_index, reduction, label_smoothing, softcap, z_loss,
             config, True)


@_ce_backward_inplace.register_fake
def _(logits, target, grad, reduction, ignore_index, label_smoothing, softcap, z_loss, config):
    return None


# A gradient computed with an upstream gradient of 1, times the real one g
# (flce's mean and sum, in backward; in place or not, as _scaled decides): the
# product in fp32, rounded once to the gradient's dtype, in celtune_scale's
# copy-speed kernel, which leaves the memory alone in place by 1.
# (t * g).to(t.dtype), the form before, took PyTorch's generic mixed-dtype
# kernel for a 16-bit t and a CUDA fp32 g: 2.33 ms of backward for Llama-3-8B's
# dW and dX on an H100 (0.83 here; a copy of dW takes 0.71), and 7.27 ms for
# the dZ of 16384 tokens at V = 128256 (3.01 here); and it rounded g to t's
# dtype first, so a g of 0.37 scaled every bf16 gradient by 0.369140625
# (docs/results.md, fortieth session).
def _scale_into(out: Tensor, src: Tensor, g: Tensor) -> Tensor:
    if src.numel():
        g = g.to(device=src.device, dtype=torch.float32).contiguous()
        code = _dtype_code(src, "gradient")
        _run(lambda ctx, _, stream: ctx.scale(_ptr(out), _ptr(src), src.numel(), code, _ptr(g), stream),
             _device_index(src.device), None)
    return out


@_op("celtune::scale")
def _scale(t: Tensor, g: Tensor) -> Tensor:
    src = t.contiguous()
    return _scale_into(_dense_like(src), src, g)  # as the fake's, whatever src's strides


def _keep_graph() -> bool:
    """Whether the running backward retains its graph (True outside one, or where torch cannot say)."""
    return getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", lambda: True)()


def _scaled(saved: tuple, g: Tensor) -> tuple:
    """The saved gradients times g, for backward to return.

    In place where nothing reads them again: an eager backward whose graph is
    not retained frees its saved tensors once it returns, and autograd then
    takes the returned tensor as the parameter's .grad without a copy. The
    out-of-place product held a second copy of each gradient through backward:
    1002 MiB more peak memory for Llama-3-8B's dW (V = 128256, H = 4096, bf16;
    docs/results.md, fifty-sixth session). A retained graph (retain_graph=True)
    reads them again, and a tracer needs the functional op (asked first: dynamo
    cannot trace _keep_graph): both keep it. Tensors that are not plain dense
    ones (a batched or special upstream gradient) take the op too (_tracing).
    """
    if _tracing((g, *saved)) or _keep_graph() or not all(t.is_contiguous() for t in saved):
        return tuple(_scale(t, g) for t in saved)
    for t in saved:
        _scale_into(t, t, g)
        torch.autograd.graph.increment_version(t)
    return saved


@_scale.register_fake
def _(t, g):
    return _dense_like(t)


def _ce_call(logits, target, dz, upstream, ignore_index, reduction, label_smoothing, softcap, z_loss,
             config, with_grad):
    """One ce call. upstream: None (a gradient scale of 1, and the targets are
    checked), or (grad, reduction) for a backward's recompute."""
    mode = _lib.FORWARD_BACKWARD if with_grad else _lib.FORWARD
    a = _ce_args(logits, target, ignore_index, reduction, label_smoothing, softcap, z_loss, config, mode)
    N, V = logits.shape
    tgt = _kernel_targets(target, ignore_index, V)
    loss, token_loss, lse = _f32((), logits), _f32((N,), logits), _f32((N,), logits)
    bad = torch.empty((), dtype=torch.int64, device=logits.device)
    one = _one(logits.device)
    a.logits, a.targets, a.dz = _ptr(logits), _ptr(tgt), _ptr(dz)
    a.grad_scale = _ptr(one)
    g = _upstream(a, *upstream) if upstream is not None else None
    a.loss, a.token_loss, a.lse, a.bad_target = _ptr(loss), _ptr(token_loss), _ptr(lse), _ptr(bad)
    check = _run(_lib.Context.ce, _device_index(logits.device), a, check=upstream is None)
    _raise_bad_target(check, bad, target, V, ignore_index)
    return loss, token_loss, lse


# ---- autograd -----------------------------------------------------------------

_DOUBLE_BACKWARD = ("celtune: double backward (create_graph=True through a celtune loss) is not supported: "
                    "the kernels compute first derivatives only")


def _refuse_double_backward() -> None:
    # Backward runs with grad mode on only under create_graph=True; the
    # gradients here are not differentiable functions of the inputs, so a
    # second derivative through them would be silently wrong.
    if torch.is_grad_enabled():
        raise RuntimeError(_DOUBLE_BACKWARD)


def _deferred(reduction: int, dtype: torch.dtype) -> bool:
    """Whether the gradients wait for backward's upstream gradient (the ops' comment says why)."""
    return reduction == _lib.NONE or dtype == torch.float16


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, target, bias, ignore_index, reduction, label_smoothing, softcap, z_loss, config,
                with_grad):
        ctx.deferred = _deferred(reduction, x.dtype)
        if ctx.deferred:
            loss, token_loss, _, _, _, _ = _flce_forward(x, w, target, bias, ignore_index, reduction,
                                                         label_smoothing, softcap, z_loss, config, False)
            ctx.save_for_backward(x, w, target, bias)
            ctx.opts = (reduction, ignore_index, label_smoothing, softcap, z_loss, config)
            ctx.mark_non_differentiable(loss if reduction == _lib.NONE else token_loss)
            return loss, token_loss
        loss, token_loss, _, dx, dw, db = _flce_forward(x, w, target, bias, ignore_index, reduction,
                                                        label_smoothing, softcap, z_loss, config, with_grad)
        ctx.save_for_backward(dx, dw, db)
        ctx.has_bias = bias is not None
        ctx.mark_non_differentiable(token_loss)
        return loss, token_loss

    @staticmethod
    def backward(ctx, grad_loss, grad_token_loss):
        _refuse_double_backward()
        if ctx.deferred:  # recompute with the upstream gradient
            x, w, target, bias = ctx.saved_tensors
            grad = grad_token_loss if ctx.opts[0] == _lib.NONE else grad_loss
            dx, dw, db = _flce_backward(x, w, target, bias, grad, *ctx.opts)
            return dx, dw, None, (db if bias is not None else None), *([None] * 7)
        dx, dw, db = ctx.saved_tensors
        if dx.numel() == 0 and dw.numel() == 0:
            raise RuntimeError("celtune: the forward ran without gradients (no input required grad)")
        g = grad_loss.to(torch.float32)
        dx, dw, db = _scaled((dx, dw, db), g) if ctx.has_bias else (*_scaled((dx, dw), g), None)
        return (dx, dw, None, db, *([None] * 7))


class _CrossEntropy(torch.autograd.Function):
    # The gradient waits for backward at every dtype and reduction: the forward
    # reads the logits once for the loss, and backward reads them again and
    # writes dZ with the upstream gradient in it. Formed in the forward with an
    # upstream gradient of 1 (flce's way, which saves recomputing its GEMMs),
    # dZ took a scaling pass in backward, one more read and write of N × V, and
    # was held from forward to backward: 4.71 ms a step at 16384 × 128256 bf16
    # on the H200 where QuACK's cross_entropy takes 3.42 (docs/results.md,
    # fifty-sixth session).
    @staticmethod
    def forward(ctx, logits, target, ignore_index, reduction, label_smoothing, softcap, z_loss, config, inplace):
        loss, token_loss, _ = _ce_forward(logits, target, ignore_index, reduction, label_smoothing, softcap,
                                          z_loss, config)
        ctx.save_for_backward(logits, target)
        # In place (mean, sum): dZ goes over the logits in backward, from the
        # logits saved intact; their version counter moves then, so another
        # user of them is refused.
        ctx.inplace = inplace and reduction != _lib.NONE
        ctx.opts = (reduction, ignore_index, label_smoothing, softcap, z_loss, config)
        ctx.mark_non_differentiable(loss if reduction == _lib.NONE else token_loss)
        return loss, token_loss

    @staticmethod
    def backward(ctx, grad_loss, grad_token_loss):
        _refuse_double_backward()
        logits, target = ctx.saved_tensors
        grad = grad_token_loss if ctx.opts[0] == _lib.NONE else grad_loss
        # Only where nothing reads the logits again: a retained graph's next
        # backward does, and so does a graph a tracer records (torch.compile's
        # eager backend keeps the saved logits in a Python variable that no
        # version counter guards); identity saved-tensor hooks and save_on_cpu
        # on the CPU hand back the same tensor. There dZ written in place was
        # read as logits by the second backward, silently (0.48 relative error;
        # a helper's probe, fifty-sixth session): those write dZ apart.
        if ctx.inplace and not _tracing((logits, grad)) and not _keep_graph():
            _ce_backward_inplace(logits, target, grad, *ctx.opts)
            return (logits, *([None] * 8))
        return (_ce_backward(logits, target, grad, *ctx.opts), *([None] * 8))


# ---- the public functions -----------------------------------------------------


def _reduction_code(reduction: str) -> int:
    # isinstance first: a list was looked up in the dict and raised "unhashable type".
    if not isinstance(reduction, str) or reduction not in _lib.REDUCTIONS:
        raise CeltuneInvalidArgument(f"celtune: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return _lib.REDUCTIONS[reduction]


def _config_json(config) -> Optional[str]:
    # json.dumps is C code dynamo cannot trace: a dict is a graph break under
    # torch.compile, so fullgraph=True takes config as a JSON string (README).
    # Running this at trace time instead (assume_constant_result) failed on a
    # dict argument whose numbers changed, and turned a bad config's
    # CeltuneInvalidArgument into dynamo's InternalTorchDynamoError.
    if isinstance(config, str) and "\x00" in config:
        # ctypes passes a str as a C string: what follows the NUL was dropped unread.
        raise CeltuneInvalidArgument("celtune: config must not contain a NUL character")
    if config is None or isinstance(config, str):
        return config
    try:
        return json.dumps(config)
    except (TypeError, ValueError) as e:
        raise CeltuneInvalidArgument(f"celtune: config must be a JSON string or a dict of JSON values: {e}") from None


def _real(name: str, value) -> float:
    # float() took the string "0.1" and True as numbers, which F.cross_entropy
    # refuses; and NumPy's and torch's bools too (softcap=torch.tensor(True) was 1).
    if isinstance(value, (str, bytes)) or _boolish(value):
        raise CeltuneInvalidArgument(f"celtune: {name} must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise CeltuneInvalidArgument(f"celtune: {name} must be a number, got {value!r}") from None
    # The C API takes the options as floats: 1e40 arrived as inf, and the
    # library's message named inf, not the caller's number.
    # (Comparisons, not math.isfinite: dynamo cannot trace that on a symbolic float.)
    if _FLT_OVERFLOW <= v < math.inf or -math.inf < v <= -_FLT_OVERFLOW:
        raise CeltuneInvalidArgument(f"celtune: {name} {v!r} is beyond the range of a float (3.4e38)")
    # And 1e-46 arrived as 0, which means "off": softcap=1e-46 gave the uncapped
    # loss where the library refuses 1e-45 (a helper's probe).
    if 0 < v <= _FLT_UNDERFLOW or -_FLT_UNDERFLOW <= v < 0:
        raise CeltuneInvalidArgument(f"celtune: {name} {v!r} is below the range of a float (1.4e-45): "
                                     "it would arrive as 0, which turns the option off")
    return v


def _options(label_smoothing, softcap, z_loss, config) -> tuple:
    """The loss options as the library takes them: (ε, s, λ, config JSON)."""
    return (_real("label_smoothing", label_smoothing), 0.0 if softcap is None else _real("softcap", softcap),
            _real("z_loss", z_loss), _config_json(config))


def _ignore_index(ignore_index) -> int:
    try:
        if _boolish(ignore_index):  # operator.index(True) is 1, so is torch.tensor(True)'s
            raise TypeError
        if isinstance(ignore_index, Tensor) and ignore_index.dim() != 0:  # [3] passed operator.index
            raise TypeError
        i = operator.index(ignore_index)
    except TypeError:
        raise CeltuneInvalidArgument(f"celtune: ignore_index must be an integer, got {ignore_index!r}") from None
    if not -(2**63) <= i < 2**63:
        raise CeltuneInvalidArgument(f"celtune: ignore_index {i} is outside the int64 range")
    return i


def _same_device(*named) -> None:
    tensors = [(n, t) for n, t in named if t is not None]
    dev = tensors[0][1].device
    for n, t in tensors[1:]:
        if t.device != dev:
            raise CeltuneInvalidArgument(f"celtune: {n} is on {t.device} but {tensors[0][0]} is on {dev}: "
                                         "all tensors must be on one device")


def _resolve(args, index: int) -> tuple[str, str]:
    """The config JSON and source tag a call with these args would use (no kernel runs)."""
    ctx = _context(index)
    if index < 0:
        return ctx.config(args)
    with torch.cuda.device(index):
        return ctx.config(args)


def _check_before_copy(make_args, *tensors) -> None:
    # contiguous() copies a strided tensor before the library sees its sizes: an
    # expanded [2^24, 2^23] logits view asked the allocator for 562 TB and raised
    # its RuntimeError, where explain on it raised "problem too large". The
    # library's checks run first wherever a copy is due. Inside the op, so
    # torch.compile never traces it.
    if all(t is None or t.is_contiguous() for t in tensors):
        return
    _resolve(make_args(), _device_index(tensors[0].device))


def _check_no_tokens(make_args, device: torch.device) -> None:
    # The library refuses N = 0, so an empty batch never reaches it; its rules
    # for dtypes, options and configs still apply: the same arguments with one
    # token are resolved, which raises what a call would. Not while
    # torch.compile traces: that is a ctypes call dynamo cannot trace (an empty
    # batch broke fullgraph=True), and a graph specialised for N = 0 runs no
    # kernel; the call's first batch with tokens checks the same arguments.
    if torch.compiler.is_compiling():
        return
    args = make_args()
    args.tokens = 1
    _resolve(args, _device_index(device))


def _no_tokens(logits: Tensor, red: int, shape) -> Tensor:
    # An empty batch: the library refuses N = 0 and there is nothing to compute.
    # The loss of no tokens is 0 for "mean" (as when every target is ignored) and
    # "sum", an empty tensor for "none"; summing the empty [0, V] logits keeps
    # autograd connected, so the gradients come out as zeros of the right shapes.
    per_token = logits.float().sum(dim=-1)
    return per_token.view(shape) if red == _lib.NONE else per_token.sum()


def _autocast_dtype(device: torch.device) -> Optional[torch.dtype]:
    if device.type in ("cuda", "cpu") and torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None


def _tensors(*named) -> None:
    # A list as target raised AttributeError ('list' object has no attribute 'numel');
    # a sparse, mkldnn or nested tensor a bare RuntimeError from PyTorch; and a
    # torch.func transform PyTorch's own error about setup_context.
    if torch._C._are_functorch_transforms_active():
        raise CeltuneInvalidArgument("celtune: torch.func transforms (grad, vmap, jacrev, jvp, ...) are not "
                                     "supported: the ops give first derivatives through torch.autograd only")
    for name, t in named:
        if t is not None and not isinstance(t, Tensor):
            raise CeltuneInvalidArgument(f"celtune: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t is not None and (t.layout != torch.strided or t.is_nested):
            raise CeltuneInvalidArgument(f"celtune: {name} must be a dense (strided) tensor, got "
                                         f"{'a nested tensor' if t.is_nested else t.layout}")


def _target_rows(target: Tensor, lead, rows: int, what: str) -> Tensor:
    """The targets, flat: given with the input's leading shape, or flat with one a row.
    Another shape of as many elements (a [S, B] target for a [B, S, ...] input)
    paired tokens with the wrong targets, where F.cross_entropy refuses it."""
    if target.numel() != rows:
        raise CeltuneInvalidArgument(f"celtune: target has {target.numel()} elements but {what}")
    if target.dim() != 1 and tuple(target.shape) != tuple(lead):
        raise CeltuneInvalidArgument(f"celtune: target must have the input's leading shape {tuple(lead)} or be "
                                     f"flat [{rows}], got {tuple(target.shape)}")
    return target if target.dim() == 1 else target.reshape(-1)


# The library's size rule (src/model/problem.hpp, kMaxTensorBytes): each tensor a
# problem implies, counted as fp32, within 2^48 bytes.
_MAX_TENSOR_ELEMENTS = 2**46


def _flatten(t: Tensor, cols: int, what: str) -> Tensor:
    """t as [rows, cols]: a view where its strides allow one, else a copy. A copy
    is asked for only within the library's size rule: reshape of a transposed,
    expanded [2^44, 2, 8] input asked the allocator for 1 PB and raised its
    RuntimeError, before any check of ours had run (_check_before_copy catches
    the views that flatten without a copy). Within the rule, memory that is not
    there is the allocator's to refuse, as for any tensor."""
    if t.dim() == 2:  # already [rows, cols]
        return t
    try:
        return t.view(-1, cols)
    except RuntimeError:
        pass
    rows = t.numel() // cols
    if rows * cols > _MAX_TENSOR_ELEMENTS:
        raise CeltuneInvalidArgument(f"celtune: problem too large: {what} = {rows} x {cols} elements exceeds the "
                                     f"limit of 2^46 elements (2^48 bytes in fp32) per tensor")
    return t.reshape(-1, cols)


def _prepare_flce(input: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor]):
    """linear_cross_entropy's (and explain's) checks: [N, H] input, weight and bias
    as the kernels take them (cast as F.linear casts under autocast), flat targets."""
    _tensors(("input", input), ("weight", weight), ("target", target), ("bias", bias))
    if weight.dim() != 2:
        raise CeltuneInvalidArgument(f"celtune: weight must be [V, H], got shape {tuple(weight.shape)}")
    V, H = weight.shape
    if V == 0 or H == 0:
        raise CeltuneInvalidArgument(f"celtune: weight must be [V, H] with V and H at least 1, got "
                                     f"{tuple(weight.shape)}")
    if input.dim() < 1 or input.shape[-1] != H:
        raise CeltuneInvalidArgument(f"celtune: input's last dimension must be H = {H} (weight is "
                                     f"{tuple(weight.shape)}), got input {tuple(input.shape)}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != V):
        raise CeltuneInvalidArgument(f"celtune: bias must be [V] = [{V}], got {tuple(bias.shape)}")
    x = _flatten(input, H, "N x H (inputs)")
    flat = _target_rows(target, input.shape[:-1], x.shape[0], f"input has {x.shape[0]} tokens")
    _same_device(("input", input), ("weight", weight), ("target", target), ("bias", bias))
    _device_index(x.device)  # a meta tensor failed in torch.autocast with a bare RuntimeError
    cast = _autocast_dtype(x.device)
    if cast is not None:
        # As autocast casts F.linear's: floating tensors but fp64, which it
        # leaves alone (and the dtype check below then refuses, as outside).
        def autocast(t):
            return t.to(cast) if t is not None and t.is_floating_point() and t.dtype != torch.float64 else t
        x, weight, bias = autocast(x), autocast(weight), autocast(bias)
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise CeltuneInvalidArgument(f"celtune: input, weight and bias must share a dtype, got {x.dtype}, "
                                     f"{weight.dtype}, {None if bias is None else bias.dtype}")
    return x, weight, bias, flat


def _prepare_ce(input: Tensor, target: Tensor):
    """cross_entropy's (and explain's) checks: [N, V] logits, flat targets."""
    _tensors(("logits", input), ("target", target))
    if input.dim() < 1 or input.shape[-1] == 0:
        raise CeltuneInvalidArgument(f"celtune: logits must have a class dimension (the last) of at least 1, "
                                     f"got shape {tuple(input.shape)}")
    V = input.shape[-1]
    z = _flatten(input, V, "N x V (logits)")
    if target.is_floating_point():  # before the count: probabilities [N, V] have N·V elements
        raise CeltuneInvalidArgument("celtune: targets must be class indices (int64 or int32), not probabilities")
    flat = _target_rows(target, input.shape[:-1], z.shape[0], f"logits have {z.shape[0]} rows")
    _same_device(("logits", input), ("target", target))
    _device_index(z.device)  # a meta tensor came back as a meta loss, through the fake kernel
    return z, flat


def linear_cross_entropy(input: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor] = None, *,
                         ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                         softcap: Optional[float] = None, z_loss: float = 0.0, config=None) -> Tensor:
    """F.cross_entropy(F.linear(input, weight, bias), target, ...) without the logits.

    input [..., H] (flattened to [N, H]; may be non-contiguous), weight [V, H],
    bias [V] or None, target of int64 or int32 with input's leading shape [...]
    or flat [N]. Gradients
    for input, weight and bias. Options as F.cross_entropy's, plus
    softcap (logits -> softcap * tanh(logits / softcap), Gemma 2) and z_loss
    (adds z_loss * logsumexp^2 per token). config: a dict or JSON string naming a
    kernel config, else $CELTUNE_CONFIG, else the tuned database, else the default.
    Under torch.autocast the inputs are cast as F.linear casts them. Returns the
    loss (fp32): a scalar, or target's shape for reduction "none". With fp16
    inputs the gradients are computed in backward, after the upstream gradient
    (a loss scale) is known, so that they do not underflow.

    Differences from F.cross_entropy: reduction "mean" over zero valid tokens
    (every target ignored) gives 0, not NaN. Double backward is not supported.
    Raises CeltuneInvalidArgument (a ValueError) for bad input.
    """
    red = _reduction_code(reduction)
    ign = _ignore_index(ignore_index)
    x, weight, bias, tgt = _prepare_flce(input, weight, target, bias)
    opts = _options(label_smoothing, softcap, z_loss, config)
    if x.shape[0] == 0:
        _check_no_tokens(lambda: _flce_args(x, weight, tgt, bias, ign, red, *opts, _lib.FORWARD), x.device)
        return _no_tokens(torch.nn.functional.linear(x, weight, bias), red, target.shape)
    with_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or
                                             (bias is not None and bias.requires_grad))
    # Autocast off inside, where it is on (entering its context where it is
    # off cost host time before the first launch, an idle GPU's wait).
    off = torch.autocast(x.device.type, enabled=False) if torch.is_autocast_enabled(x.device.type) \
        else contextlib.nullcontext()
    with off:
        loss, token_loss = _LinearCrossEntropy.apply(x, weight, tgt, bias, ign, red, *opts, with_grad)
    return token_loss.view(target.shape) if red == _lib.NONE else loss


def cross_entropy(input: Tensor, target: Tensor, *, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, softcap: Optional[float] = None, z_loss: float = 0.0,
                  config=None, inplace_backward: bool = False) -> Tensor:
    """F.cross_entropy on logits [..., V] (flattened to [N, V]) and class-index targets [...].

    The classes are the last dimension, as a language model's logits are, not
    dim 1 as F.cross_entropy takes them for inputs of more than two dimensions.
    Options as linear_cross_entropy's. inplace_backward=True (reduction mean or
    sum) writes the logits' gradient over the logits in backward, saving one
    [N, V] buffer, so the logits are destroyed then and nothing may use them
    afterwards (autograd refuses a backward that needs them); a backward that
    retains its graph, or one torch.compile records, writes it apart. The
    logits must be contiguous, and not a leaf that requires grad, nor a view of
    one. The logits keep their dtype under autocast (the kernels accumulate in
    fp32 either way).

    Differences from F.cross_entropy: reduction "mean" over zero valid tokens
    gives 0, not NaN; probabilities as targets and class weights are not supported.
    """
    red = _reduction_code(reduction)
    ign = _ignore_index(ignore_index)
    z, tgt = _prepare_ce(input, target)
    opts = _options(label_smoothing, softcap, z_loss, config)
    if z.shape[0] == 0:
        _check_no_tokens(lambda: _ce_args(z, tgt, ign, red, *opts, _lib.FORWARD), z.device)
        return _no_tokens(z, red, target.shape)
    with_grad = torch.is_grad_enabled() and z.requires_grad
    inplace = _flag(inplace_backward, "inplace_backward") and with_grad
    if inplace and not z.is_contiguous():  # refused here, not first in backward
        raise CeltuneInvalidArgument("celtune: inplace_backward needs contiguous logits (a slice of a padded "
                                     "vocabulary is not): pass contiguous logits, or inplace_backward=False")
    # A view of a parameter (p[:], p.view(...)) is no leaf itself, but dZ written
    # through it replaced the parameter's values: its base is what counts.
    base = input._base
    if inplace and (input.is_leaf or (base is not None and base.is_leaf and base.requires_grad)):
        raise CeltuneInvalidArgument("celtune: inplace_backward writes the gradient over the logits, and these are "
                                     "a leaf tensor that requires grad, or a view of one (a parameter's data would "
                                     "be lost): pass logits computed from it, or inplace_backward=False")
    # Under allow_mutation_on_saved_tensors autograd keeps a copy of a saved
    # tensor before an op writes over it, but a custom op moves the version
    # counter before it runs, so the copy was never made: the backward of
    # whatever saved the logits read dZ, silently (0.89 relative error in dX;
    # a helper's probe, fifty-fifth session). Outside it autograd refuses.
    if inplace and getattr(torch.autograd.graph, "_allow_mutation_on_saved_tensors_enabled", False):
        raise CeltuneInvalidArgument("celtune: inplace_backward cannot run under "
                                     "torch.autograd.graph.allow_mutation_on_saved_tensors() (the logits' saved "
                                     "copy would not be made): pass inplace_backward=False")
    loss, token_loss = _CrossEntropy.apply(z, tgt, ign, red, *opts, inplace)
    return token_loss.view(target.shape) if red == _lib.NONE else loss


def explain(input: Tensor, weight: Optional[Tensor], target: Tensor, bias: Optional[Tensor] = None, *,
            ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
            softcap: Optional[float] = None, z_loss: float = 0.0, config=None, backward: bool = True) -> dict:
    """The kernel config a call would use, and where it came from, without running it.

    explain(input, weight, target, bias, ...) for linear_cross_entropy;
    explain(logits, None, target, ...) for cross_entropy. Checks its arguments as
    those calls do. Returns {"family", "config" (dict), "source" (explicit, env,
    exact, nearest, same-arch or default), "device"}. An empty batch, which runs
    no kernel, is answered as one token.
    """
    red = _reduction_code(reduction)
    ign = _ignore_index(ignore_index)
    mode = _lib.FORWARD_BACKWARD if _flag(backward, "backward") else _lib.FORWARD
    opts = (red, *_options(label_smoothing, softcap, z_loss, config), mode)
    if weight is None:
        if bias is not None:  # accepted unread, where cross_entropy has no bias to check
            raise CeltuneInvalidArgument("celtune: explain(logits, None, target) answers for cross_entropy, "
                                         "which takes no bias; pass weight for linear_cross_entropy's")
        z, tgt = _prepare_ce(input, target)
        args, family, device = _ce_args(z, tgt, ign, *opts), "ce", z.device
    else:
        x, weight, bias, tgt = _prepare_flce(input, weight, target, bias)
        args, family, device = _flce_args(x, weight, tgt, bias, ign, *opts), "flce", x.device
        args.bias = 1 if bias is not None else None  # only its presence matters to the lookup
    index = _device_index(device)
    if args.tokens == 0:
        args.tokens = 1  # an empty batch runs no kernel; its call checks its arguments as one token's (_check_no_tokens)
    js, tag = _resolve(args, index)
    return {"family": family, "config": json.loads(js), "source": tag,
            "device": "cpu" if index < 0 else f"cuda:{index}"}


class _Loss(torch.nn.Module):
    def extra_repr(self) -> str:
        """The options that differ from __init__'s defaults, as nn.CrossEntropyLoss's repr shows them."""
        options = list(inspect.signature(type(self).__init__).parameters.values())[1:]
        return ", ".join(f"{o.name}={getattr(self, o.name)!r}" for o in options
                         if getattr(self, o.name) != o.default)


class LinearCrossEntropy(_Loss):
    """nn.Module form of linear_cross_entropy: forward(input, weight, target, bias=None)."""

    def __init__(self, *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 softcap: Optional[float] = None, z_loss: float = 0.0, config=None):
        super().__init__()
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing
        self.softcap, self.z_loss, self.config = softcap, z_loss, config

    def forward(self, input: Tensor, weight: Tensor, target: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        return linear_cross_entropy(input, weight, target, bias, ignore_index=self.ignore_index,
                                    reduction=self.reduction, label_smoothing=self.label_smoothing,
                                    softcap=self.softcap, z_loss=self.z_loss, config=self.config)


class CrossEntropy(_Loss):
    """nn.Module form of cross_entropy: forward(logits, target)."""

    def __init__(self, *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 softcap: Optional[float] = None, z_loss: float = 0.0, config=None, inplace_backward: bool = False):
        super().__init__()
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing
        self.softcap, self.z_loss, self.config = softcap, z_loss, config
        self.inplace_backward = inplace_backward

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return cross_entropy(input, target, ignore_index=self.ignore_index, reduction=self.reduction,
                             label_smoothing=self.label_smoothing, softcap=self.softcap, z_loss=self.z_loss,
                             config=self.config, inplace_backward=self.inplace_backward)
