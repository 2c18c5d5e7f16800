"""celtune.torch against F.cross_entropy (fp32 logits) for every option, dtype
and gradient, on the CPU backend and, where present, on CUDA."""
import contextlib
import json
import math
import os

import pytest
import torch
import torch.nn.functional as F

from conftest import devices

ct = pytest.importorskip("celtune.torch")

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}


@pytest.fixture(autouse=True)
def no_bad_target_left_unread():
    """Every test leaves no bad-target flag unread (CELTUNE_CHECK_TARGETS=async
    reads them at a later call): one would fail the next test's first call."""
    yield
    ct.check_targets()


@contextlib.contextmanager
def raises_bad_target(match):
    """A bad target raises at the call on the CPU and under
    CELTUNE_CHECK_TARGETS=sync; under the default (async) on CUDA, by
    check_targets() at the latest: within this block either way."""
    with pytest.raises(ct.CeltuneInvalidArgument, match=match):
        yield
        ct.check_targets()


# Option sets: (name, kwargs); each is also run with every reduction.
OPTIONS = [
    ("plain", {}),
    ("ignored", {"ignore": 0.3}),
    ("smoothing+ignored", {"label_smoothing": 0.1, "ignore": 0.3}),
    ("softcap+zloss", {"softcap": 3.0, "z_loss": 1e-2, "ignore": 0.1}),
    ("zloss", {"z_loss": 1e-3}),
    ("ignore_index=3 (inside V)", {"ignore_index": 3, "ignore": 0.2}),
]


def every_case(test):
    """Each device x dtype x reduction x option set."""
    for mark in (pytest.mark.parametrize("name,opts", OPTIONS, ids=[o[0] for o in OPTIONS]),
                 pytest.mark.parametrize("reduction", ["mean", "sum", "none"]),
                 pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16]),
                 pytest.mark.parametrize("device", devices())):
        test = mark(test)
    return test


def reference_loss(logits, target, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                   softcap=None, z_loss=0.0):
    """F.cross_entropy on fp32 logits, plus softcap and z-loss as flce-math.md defines them."""
    z = logits.float()
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    tl = F.cross_entropy(z, target, ignore_index=ignore_index, reduction="none", label_smoothing=label_smoothing)
    if z_loss:
        valid = (target != ignore_index).float()
        tl = tl + z_loss * torch.logsumexp(z, dim=-1) ** 2 * valid
    if reduction == "none":
        return tl
    if reduction == "sum":
        return tl.sum()
    return tl.sum() / (target != ignore_index).sum()


def make(device, dtype, N=37, H=24, V=61, ignore=0.0, ignore_index=-100, bias=False, seed=0, lead=()):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, N, H, generator=g)
    w = torch.randn(V, H, generator=g) * 0.5
    b = torch.randn(V, generator=g) if bias else None
    t = torch.randint(0, V, (*lead, N), generator=g)
    if N:
        t[0 if not lead else (0,) * len(lead) + (0,)] = V - 1
    t[torch.rand(t.shape, generator=g) < ignore] = ignore_index
    cvt = lambda a: None if a is None else a.to(device=device, dtype=dtype).requires_grad_()
    return cvt(x), cvt(w), cvt(b), t.to(device)


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def loss_kwargs(opts, reduction):
    kw = {k: v for k, v in opts.items() if k != "ignore"}
    kw["reduction"] = reduction
    return kw


@every_case
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_linear_cross_entropy_matches_pytorch(device, dtype, reduction, name, opts, bias):
    kw = loss_kwargs(opts, reduction)
    x, w, b, t = make(device, dtype, ignore=opts.get("ignore", 0.0), ignore_index=kw.get("ignore_index", -100),
                      bias=bias)
    loss = ct.linear_cross_entropy(x, w, t, b, **kw)
    # The reference: fp32 logits from the same (dtype-valued) inputs.
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    br = b.detach().float().requires_grad_() if bias else None
    ref = reference_loss(F.linear(xr, wr, br), t, **kw)
    assert loss.dtype == torch.float32 and loss.shape == ref.shape
    tol = TOL[dtype]
    assert rel(loss.detach(), ref.detach()) < tol, (loss, ref)
    # A non-uniform upstream gradient, so a kernel that ignores it cannot pass.
    gout = torch.rand(ref.shape, generator=torch.Generator().manual_seed(1)).to(device) + 0.5
    loss.backward(gout)
    ref.backward(gout)
    # The kernels round dZ to the input dtype before the gradient GEMMs.
    gtol = 4 * tol if dtype != torch.float32 else 1e-4
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    assert rel(x.grad, xr.grad) < gtol
    assert rel(w.grad, wr.grad) < gtol
    if bias:
        assert rel(b.grad, br.grad) < gtol


@every_case
@pytest.mark.parametrize("inplace", [False, True], ids=["outofplace", "inplace"])
def test_cross_entropy_matches_pytorch(device, dtype, reduction, name, opts, inplace):
    kw = loss_kwargs(opts, reduction)
    g = torch.Generator().manual_seed(2)
    N, V = 29, 67
    base = (torch.randn(N, V, generator=g) * 3).to(device=device, dtype=dtype).requires_grad_()
    t = torch.randint(0, V, (N,), generator=g)
    t[torch.rand(N, generator=g) < opts.get("ignore", 0.0)] = kw.get("ignore_index", -100)
    t = t.to(device)
    logits = base * 1  # a non-leaf, as a model's logits are (in place needs one)
    loss = ct.cross_entropy(logits, t, inplace_backward=inplace, **kw)
    zr = base.detach().float().requires_grad_()
    ref = reference_loss(zr, t, **kw)
    tol = TOL[dtype]
    assert rel(loss.detach(), ref.detach()) < tol
    gout = torch.rand(ref.shape, generator=torch.Generator().manual_seed(3)).to(device) + 0.5
    loss.backward(gout)
    ref.backward(gout)
    assert base.grad.dtype == dtype
    assert rel(base.grad, zr.grad) < (4 * tol if dtype != torch.float32 else 1e-4)


@pytest.mark.parametrize("device", devices())
def test_leading_dims_and_noncontiguous_input(device):
    x, w, b, t = make(device, torch.float32, N=9, lead=(3,), bias=True)
    xt = x.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()  # [3, 9, H], non-contiguous
    assert not xt.is_contiguous()
    loss = ct.linear_cross_entropy(xt, w, t, b)
    xr = xt.detach().clone().requires_grad_()
    ref = F.cross_entropy(F.linear(xr, w.detach(), b.detach()).flatten(0, 1), t.flatten())
    assert rel(loss.detach(), ref.detach()) < 2e-5
    loss.backward(), ref.backward()
    assert xt.grad.shape == xt.shape and rel(xt.grad, xr.grad) < 1e-4
    none = ct.linear_cross_entropy(xt, w, t, b, reduction="none")
    assert none.shape == t.shape


@pytest.mark.parametrize("device", devices())
def test_all_ignored_mean_is_zero(device):
    # The one deliberate difference: PyTorch gives NaN (0/0), celtune 0.
    x, w, _, t = make(device, torch.float32, N=5)
    t = torch.full_like(t, -100)
    loss = ct.linear_cross_entropy(x, w, t)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.all(x.grad == 0) and torch.all(w.grad == 0)
    assert math.isnan(F.cross_entropy(F.linear(x, w), t).item())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ignored_rows_with_nonfinite_logits_add_nothing(device, dtype, reduction):
    # An ignored token contributes no loss and no gradient (flce-math.md), even
    # where its logits are a masked padding row (all -inf) or hold a NaN.
    # PyTorch writes NaN into such a row's gradient (log_softmax's backward
    # multiplies exp(NaN) by 0); the CUDA ce paths did too before the fiftieth
    # session. The reference is F.cross_entropy with those rows zeroed, which
    # it ignores alike.
    g = torch.Generator().manual_seed(11)
    N, V = 23, 1031
    z = (torch.randn(N, V, generator=g) * 3)
    t = torch.randint(0, V, (N,), generator=g)
    bad = {2: float("-inf"), 9: float("nan"), 16: None}  # None: a NaN of either sign in a few columns
    for r, fill in bad.items():
        if fill is None:
            z[r, 5], z[r, 700], z[r, 1030] = float("nan"), -float("nan"), float("-inf")
        else:
            z[r] = fill
        t[r] = -100
    kw = {"reduction": reduction, "label_smoothing": 0.1, "z_loss": 1e-3}
    base = z.clone().to(device=device, dtype=dtype).requires_grad_()  # a copy: z.to() may return z itself
    loss = ct.cross_entropy(base * 1, t.to(device), **kw)
    zr = z.clone()
    zr[list(bad)] = 0.0
    zr = zr.to(dtype).float().requires_grad_()  # the same rounded logits elsewhere
    ref = reference_loss(zr, t, **kw)
    assert torch.isfinite(loss).all()
    tol = TOL[dtype]
    assert rel(loss.detach().cpu(), ref.detach()) < tol
    if reduction == "none":
        assert torch.all(loss.detach().cpu()[list(bad)] == 0)
    gout = torch.rand(ref.shape, generator=torch.Generator().manual_seed(5)) + 0.5
    loss.backward(gout.to(device))
    ref.backward(gout)
    grad = base.grad.float().cpu()
    assert torch.all(grad[list(bad)] == 0), "an ignored row's gradient must be zero"
    keep = [r for r in range(N) if r not in bad]
    assert torch.isfinite(grad[keep]).all()
    assert rel(grad[keep], zr.grad[keep]) < (4 * tol if dtype != torch.float32 else 1e-4)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_empty_batch(device, reduction):
    # No tokens (the last, empty micro-batch of a loader): the loss of nothing,
    # zero gradients of the right shapes, as F.cross_entropy gives for sum and
    # none (and 0 for mean, as when every target is ignored). It used to raise.
    x, w, b, t = make(device, torch.float32, N=0, lead=(2,), bias=True)
    loss = ct.linear_cross_entropy(x, w, t, b, reduction=reduction)
    assert loss.shape == (t.shape if reduction == "none" else ())
    if reduction != "none":
        assert loss.item() == 0.0
    loss.sum().backward()
    assert x.grad.shape == x.shape and torch.all(w.grad == 0) and torch.all(b.grad == 0)
    z = torch.randn(0, 7, device=device, requires_grad=True)
    ce = ct.cross_entropy(z, torch.zeros(0, dtype=torch.int64, device=device), reduction=reduction)
    assert ce.shape == ((0,) if reduction == "none" else ())
    ce.sum().backward()
    assert z.grad.shape == z.shape


@pytest.mark.parametrize("device", devices())
def test_backward_twice_with_retain_graph(device):
    for reduction in ("mean", "none"):
        x, w, b, t = make(device, torch.float32, bias=True)
        loss = ct.linear_cross_entropy(x, w, t, b, reduction=reduction).sum()
        loss.backward(retain_graph=True)
        first = (x.grad.clone(), w.grad.clone(), b.grad.clone())
        loss.backward()
        for g1, g2 in zip(first, (x.grad, w.grad, b.grad)):
            assert torch.allclose(g2, 2 * g1, rtol=1e-6, atol=1e-7)
    z = (torch.randn(8, 33, device=device) * 1).requires_grad_()
    t = torch.randint(0, 33, (8,), device=device)
    for reduction in ("mean", "none"):
        z.grad = None
        loss = ct.cross_entropy(z * 1, t, reduction=reduction).sum()
        loss.backward(retain_graph=True)
        g1 = z.grad.clone()
        loss.backward()
        assert torch.allclose(z.grad, 2 * g1)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_backward_scales_the_saved_gradients_in_place(device, dtype):
    # flce's mean and sum keep the gradients the forward computed; a backward
    # whose graph is not retained scales them in place and hands them to
    # autograd, which makes them .grad without a copy: no second gradient-sized
    # buffer (1002 MiB at Llama-3-8B's dW). A retained graph scales a copy (the
    # test above reads the saved ones twice).
    for bias in (False, True):
        x, w, b, t = make(device, dtype, bias=bias)
        loss = ct.linear_cross_entropy(x, w, t, b)
        saved = [s.data_ptr() if s is not None else None for s in loss.grad_fn.saved_tensors]
        (loss * 0.37).backward()
        got = [x.grad.data_ptr(), w.grad.data_ptr()] + ([b.grad.data_ptr()] if bias else [])
        assert got == saved[:len(got)]
        xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
        br = b.detach().float().requires_grad_() if bias else None
        (F.cross_entropy(F.linear(xr, wr, br), t) * 0.37).backward()
        tol = dict(rtol=2e-2, atol=1e-3) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(x.grad.float(), xr.grad, **tol)
        torch.testing.assert_close(w.grad.float(), wr.grad, **tol)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("config", [None, {"impl": "cublaslt"}], ids=["default", "cublaslt"])
@pytest.mark.parametrize("shift", [1, 3])
def test_inputs_off_the_16_byte_grid(device, config, shift):
    # Slices of packed buffers start wherever the slice does: F.linear and
    # F.cross_entropy take them, so celtune must too, though TMA and cuBLASLt
    # read rows in 16-byte pieces. H = 768 takes the fused path's defaults on
    # Hopper (forward and forward+backward), the other config the cuBLASLt one.
    N, H, V = 96, 768, 1000
    g = torch.Generator().manual_seed(5)
    bx = torch.randn(N * H + shift, generator=g).to(device, torch.bfloat16)
    bw = (torch.randn(V * H + shift, generator=g) * 0.05).to(device, torch.bfloat16)
    bz = (torch.randn(N * V + shift, generator=g) * 3).to(device, torch.bfloat16)
    t = torch.randint(0, V, (N,), generator=g).to(device)
    x, w = bx[shift:].view(N, H), bw[shift:].view(V, H)
    assert x.data_ptr() % 16 and w.data_ptr() % 16
    x.requires_grad_(), w.requires_grad_()
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    ref = F.cross_entropy(F.linear(xr, wr), t)
    with torch.no_grad():
        assert rel(ct.linear_cross_entropy(x, w, t, config=config), ref.detach()) < TOL[torch.bfloat16]
    loss = ct.linear_cross_entropy(x, w, t, config=config)
    assert rel(loss.detach(), ref.detach()) < TOL[torch.bfloat16]
    loss.backward()
    ref.backward()
    assert rel(x.grad, xr.grad) < 4 * TOL[torch.bfloat16] and rel(w.grad, wr.grad) < 4 * TOL[torch.bfloat16]
    # ce on logits off the grid (its kernels take a ragged head before their
    # 16-byte vectors), dZ out of place and in place.
    zr = bz[shift:].view(N, V).float().requires_grad_()
    refz = F.cross_entropy(zr, t)
    refz.backward()
    for inplace in (False, True):
        zl = bz.clone().requires_grad_()
        z = (zl * 1)[shift:].view(N, V)  # computed logits: in place may write over them
        assert z.data_ptr() % 16
        lz = ct.cross_entropy(z, t, inplace_backward=inplace)
        assert rel(lz.detach(), refz.detach()) < TOL[torch.bfloat16]
        lz.backward()
        assert rel(zl.grad[shift:].view(N, V), zr.grad) < 4 * TOL[torch.bfloat16]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_upstream_gradient_scales_in_fp32(device, dtype):
    # Mean and sum compute their gradients in the forward with an upstream
    # gradient of 1; backward multiplies them by the real one (celtune_scale):
    # the product in fp32, rounded once. Not (t * g).to(t.dtype): on CUDA that
    # rounds g to t's dtype first (0.37 becomes 0.369140625 in bf16, every
    # gradient 0.2% off). The 4097-element bias and odd sizes give the CUDA
    # kernel a ragged tail after its 16-byte vectors, and a misaligned one, off
    # a view.
    x, w, b, t = make(device, dtype, N=37, H=24, V=4097, bias=True, seed=3)
    for scale in (0.37, -3.0, 1.0):
        grads = []
        for g in (1.0, scale):
            for a in (x, w, b):
                a.grad = None
            (ct.linear_cross_entropy(x, w, t, b) * g).backward()
            grads.append([a.grad.clone() for a in (x, w, b)])
        g = torch.tensor(scale, device=device)
        for one, scaled in zip(*grads):
            assert scaled.dtype == dtype and torch.equal(scaled, (one.float() * g).to(dtype))
    # ce forms dZ in backward with the upstream gradient inside the kernel's
    # fp32 arithmetic: within the dtype's rounding of PyTorch's fp64 gradient.
    z = (torch.randn(9, 4097, device=device) * 2).to(dtype).requires_grad_()
    tz = torch.randint(0, 4097, (9,), device=device)
    (ct.cross_entropy(z, tz, reduction="sum") * 0.37).backward()
    zr = z.detach().double().requires_grad_()
    (F.cross_entropy(zr, tz, reduction="sum") * 0.37).backward()
    rtol = 2.0 ** -8 if dtype == torch.bfloat16 else 1e-5
    assert torch.all((z.grad.double() - zr.grad).abs() <= rtol * zr.grad.abs() + 1e-12)
    # The kernel itself on a view that starts one element (2 or 4 bytes) past
    # the 16-byte grid.
    base = torch.randn(4101, device=device).to(dtype)
    view = base[1:]
    assert torch.equal(torch.ops.celtune.scale(view, torch.tensor(-0.3, device=device)),
                       (view.float() * torch.tensor(-0.3, device=device)).to(dtype))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_padding_batch_over_its_count_leaves_zero_gradients(device, dtype):
    # loss.sum() / n_valid with no valid token: the upstream gradient is inf.
    # PyTorch leaves every ignored token's gradient zero whatever it is; mean and
    # sum here compute gradients with 1 and scale them in backward, where 0·inf
    # was NaN and a padding batch put NaN into the weights.
    x, w, b, t = make(device, dtype, N=6, bias=True)
    t = torch.full_like(t, -100)
    n = (t != -100).sum()
    (ct.linear_cross_entropy(x, w, t, b, reduction="sum") / n).backward()
    for a in (x, w, b):
        assert torch.all(a.grad == 0)
    z = torch.randn(6, 61).to(device=device, dtype=dtype).requires_grad_()
    (ct.cross_entropy(z * 1, t, reduction="sum") / n).backward()
    assert torch.all(z.grad == 0)
    # Some tokens valid, an upstream gradient of inf: the ignored rows stay zero,
    # as in PyTorch, and the valid rows are not finite, as there.
    t2 = t.clone()
    t2[::2] = 3
    z.grad = None
    (ct.cross_entropy(z * 1, t2, reduction="mean") * float("inf")).backward()
    assert torch.all(z.grad[1::2] == 0) and not torch.isfinite(z.grad[::2]).any()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_c_api_refuses_gemm_operands_off_the_16_byte_grid():
    # The package copies such inputs (_gemm_operand); through the C API each of
    # X, W, dX and dW off the 16-byte grid is refused by name before any launch:
    # the outputs keep their poison, and the context's next call runs.
    from celtune import _lib
    N, H, V = 16, 64, 128
    t = torch.randint(0, V, (N,), device="cuda")
    x = torch.randn(N * H + 8, device="cuda").to(torch.bfloat16)
    w = torch.randn(V * H + 8, device="cuda").to(torch.bfloat16)
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    one = torch.ones((), device="cuda")

    def call(off, loss):  # element offsets of x, w, dx, dw
        xs, ws = x[off[0]:off[0] + N * H].view(N, H), w[off[1]:off[1] + V * H].view(V, H)
        a = ct._flce_args(xs, ws, t, None, -100, 0, 0.0, 0.0, 0.0, None, _lib.FORWARD_BACKWARD)
        token_loss, lse = torch.empty(N, device="cuda"), torch.empty(N, device="cuda")
        a.x, a.w, a.targets, a.grad_scale = xs.data_ptr(), ws.data_ptr(), t.data_ptr(), one.data_ptr()
        a.loss, a.token_loss, a.lse = loss.data_ptr(), token_loss.data_ptr(), lse.data_ptr()
        a.dx, a.dw = dx[off[2]:].data_ptr(), dw[off[3]:].data_ptr()
        ct._run(_lib.Context.flce, torch.cuda.current_device(), a)

    for i, name in enumerate(("x", "w", "dx", "dw")):
        off = [0, 0, 0, 0]
        off[i] = 1
        loss = torch.full((), float("nan"), device="cuda")
        with pytest.raises(ct.CeltuneInvalidArgument, match=f"{name} must be 16-byte aligned"):
            call(off, loss)
        assert torch.isnan(loss).item()
    loss = torch.full((), float("nan"), device="cuda")
    call([8, 8, 8, 8], loss)  # 16 bytes on: aligned
    assert torch.isfinite(loss).item()


@pytest.mark.parametrize("device", devices())
def test_scale_kernel_edges(device):
    # celtune_scale itself, through the binding: every dtype (fp16 never reaches
    # it from the autograd paths), fewer elements than one 16-byte vector, a
    # ragged tail, src and dst off the 16-byte grid by the same element count
    # (and by different ones), and in place; bit for bit the fp32 product
    # rounded once.
    def scale(dst, src, g):
        ct._run(lambda c, _, stream: c.scale(dst.data_ptr(), src.data_ptr(), src.numel(), ct._dtype_code(src, "t"),
                                            g.data_ptr(), stream), ct._device_index(src.device), None)

    g = torch.tensor(-0.37, device=device)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        base = (torch.randn(4200, device=device) * 3).to(dtype)
        for n in (1, 3, 7, 8, 9, 31, 4097):
            for so, do in ((0, 0), (1, 1), (3, 3), (0, 1), (2, 0)):
                src = base[so:so + n]
                out = torch.full((4200,), float("nan"), device=device, dtype=dtype)
                scale(out[do:do + n], src, g)
                want = (src.float() * g).to(dtype)
                assert torch.equal(out[do:do + n], want), (dtype, n, so, do)
                assert out[:do].isnan().all() and out[do + n:].isnan().all()  # nothing written outside
            inplace = base[1:1 + n].clone()
            scale(inplace, inplace, g)
            assert torch.equal(inplace, (base[1:1 + n].float() * g).to(dtype))
    # In place by 1 (loss.backward() on a mean or sum) leaves the memory alone,
    # bit for bit: a signalling NaN stays one, where the product by 1 quiets it
    # (so a kernel that multiplied fails here); out of place it is the copy.
    one = torch.tensor(1.0, device=device)
    for dtype, idt, snan in ((torch.bfloat16, torch.int16, 0x7F81), (torch.float16, torch.int16, 0x7C01),
                             (torch.float32, torch.int32, 0x7F800001)):
        bits = torch.tensor([snan, 0, 1, -1, snan, 7] * 700, dtype=idt, device=device)
        t = bits.clone().view(dtype)
        scale(t, t, one)
        assert torch.equal(t.view(idt), bits), dtype
        out = torch.zeros_like(t)
        scale(out, t, one)
        finite = torch.isfinite(t)
        assert torch.equal(out[finite], t[finite]) and out[~finite].isnan().all()
        assert not torch.equal(out.view(idt), bits)  # the NaNs quietened: the product ran


@pytest.mark.parametrize("device", devices())
def test_double_backward_refused(device):
    x, w, _, t = make(device, torch.float32)
    loss = ct.linear_cross_entropy(x, w, t)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(loss, x, create_graph=True)
    z = torch.randn(4, 9, device=device, requires_grad=True)
    loss = ct.cross_entropy(z, torch.randint(0, 9, (4,), device=device))
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(loss, z, create_graph=True)


@pytest.mark.filterwarnings("ignore:Input #.*double precision")
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck_cpu(reduction):
    # gradcheck wants float64, and the CPU backend computes in fp32, so this is
    # gradcheck in fp32 with a central-difference step (eps) and tolerances
    # sized for fp32: truncation error ~eps^2, rounding ~1e-7/eps. It checks
    # the analytic gradients against finite differences of our own forward,
    # independently of PyTorch's implementation.
    x, w, b, t = make("cpu", torch.float32, N=6, H=5, V=7, ignore=0.2, bias=True, seed=4)
    kw = {"reduction": reduction, "label_smoothing": 0.1, "softcap": 4.0, "z_loss": 1e-2}

    def f(x, w, b):
        return ct.linear_cross_entropy(x, w, t, b, **kw)

    assert torch.autograd.gradcheck(f, (x, w, b), eps=1e-2, atol=2e-3, rtol=1e-2, nondet_tol=0.0,
                                    check_undefined_grad=False)
    z = (torch.randn(6, 7, generator=torch.Generator().manual_seed(5)) * 2).requires_grad_()
    assert torch.autograd.gradcheck(lambda z: ct.cross_entropy(z, t, **kw), (z,), eps=1e-2, atol=2e-3, rtol=1e-2,
                                    check_undefined_grad=False)


@pytest.mark.parametrize("device", devices())
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    x, w, b, t = make(device, torch.float32, bias=True)
    z = torch.randn(11, 23, device=device, requires_grad=True)
    tz = torch.randint(0, 23, (11,), device=device)

    def step(x, w, b, z):
        a = ct.linear_cross_entropy(x * 2, w, t, b, label_smoothing=0.1)
        c = ct.cross_entropy(z * 1, tz, reduction="none").sum()
        return a + c

    backend = "inductor" if device == "cuda" else "aot_eager"  # aot_eager: no C++ compile on a CPU-only CI
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    out = compiled(x, w, b, z)
    out.backward()
    grads = [a.grad.clone() for a in (x, w, b, z)]
    for a in (x, w, b, z):
        a.grad = None
    eager = step(x, w, b, z)
    eager.backward()
    assert torch.allclose(out, eager, rtol=1e-5)
    for g, a in zip(grads, (x, w, b, z)):
        assert torch.allclose(g, a.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", devices())
def test_eager_calls_skip_the_dispatcher_and_tracers_see_the_ops(device):
    # Eager calls run the ops' bodies directly (the dispatcher's Python cost
    # ~0.1 ms a forward+backward with torch 2.11); a compiled graph must still
    # call the custom ops, whose fake kernels gave the tracer shapes. The
    # profiler records each call through the dispatcher under the op's name.
    from torch.profiler import ProfilerActivity, profile

    def ops_called(fn):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn(x, w, t).backward()
        return {e.key for e in prof.key_averages() if e.key.startswith("celtune::")}

    x, w, _, t = make(device, torch.float32, N=5)
    assert ops_called(ct.linear_cross_entropy) == set()
    eager = (x.grad.clone(), w.grad.clone())
    torch._dynamo.reset()
    x.grad = w.grad = None
    f = torch.compile(lambda x, w, t: ct.linear_cross_entropy(x, w, t), fullgraph=True, backend="aot_eager")
    assert ops_called(f) == {"celtune::flce_forward", "celtune::scale"}
    assert torch.equal(eager[0], x.grad) and torch.equal(eager[1], w.grad)


@pytest.mark.parametrize("device", devices())
def test_torch_compile_with_a_config_and_an_empty_batch(device):
    # An empty batch's argument check calls the library through ctypes, which
    # dynamo cannot trace: it broke fullgraph=True part-way through a
    # dynamic-shape run. A dict config goes through json.dumps, a graph break:
    # fullgraph=True takes the JSON string (README), the default mode either.
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    cfg = {"block_size": 32, "threads": 32}  # a config every device runs
    x, w, _, t = make(device, torch.float32, N=5)
    ref = ct.linear_cross_entropy(x, w, t, config=cfg)
    cs = json.dumps(cfg)
    f = torch.compile(lambda x, w, t: ct.linear_cross_entropy(x, w, t, config=cs), fullgraph=True, backend=backend)
    assert torch.allclose(f(x, w, t), ref)
    d = torch.compile(lambda x, w, t, c: ct.linear_cross_entropy(x, w, t, config=c), backend=backend)
    assert torch.allclose(d(x, w, t, cfg), ref)
    assert torch.allclose(d(x, w, t, {"block_size": 32, "threads": 32, "v_chunk": 32}), ref)
    with pytest.raises(ct.CeltuneInvalidArgument, match="config"):  # not dynamo's error
        d(x, w, t, {"threads": {1, 2}})
    m = torch.compile(ct.CrossEntropy(config=cs), fullgraph=True, backend=backend)
    z = torch.randn(5, 61, device=device)
    assert torch.allclose(m(z, t), ct.cross_entropy(z, t))
    g = torch.compile(lambda x, w, t: ct.linear_cross_entropy(x, w, t, reduction="sum"), fullgraph=True,
                      dynamic=True, backend=backend)
    h = torch.compile(lambda z, t: ct.cross_entropy(z * 1, t), fullgraph=True, dynamic=True, backend=backend)
    for n in (5, 0, 7):
        x, w, _, t = make(device, torch.float32, N=n)
        loss = g(x, w, t)
        loss.backward()
        assert torch.allclose(loss, ct.linear_cross_entropy(x, w, t, reduction="sum"))
        assert x.grad.shape == x.shape and (n or torch.all(w.grad == 0))
        z = torch.randn(n, 61, device=device, requires_grad=True)
        lz = h(z, t)
        lz.backward()
        assert torch.allclose(lz, ct.cross_entropy(z, t)) and z.grad.shape == z.shape


@pytest.mark.parametrize("device", devices())
def test_modules(device):
    x, w, b, t = make(device, torch.float32, bias=True)
    m = ct.LinearCrossEntropy(label_smoothing=0.1)
    ref = F.cross_entropy(F.linear(x, w, b), t, label_smoothing=0.1)
    assert rel(m(x, w, t, b).detach(), ref.detach()) < 2e-5
    logits = F.linear(x, w, b)
    assert rel(ct.CrossEntropy(reduction="sum")(logits, t).detach(), F.cross_entropy(logits, t, reduction="sum")) < 2e-5


@pytest.mark.parametrize("device", devices())
def test_autocast_casts_like_linear(device):
    x, w, _, t = make(device, torch.float32)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = ct.linear_cross_entropy(x, w, t)
        ref_logits = F.linear(x, w)
    assert ref_logits.dtype == torch.bfloat16
    ref = F.cross_entropy(ref_logits.float(), t)
    assert rel(loss.detach(), ref.detach()) < 2e-2
    loss.backward()
    assert x.grad.dtype == torch.float32 and w.grad.dtype == torch.float32
    # fp64 is not cast (F.linear under autocast stays fp64), so it is refused as
    # outside autocast, not silently run in bf16.
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        assert F.linear(x.double(), w.double()).dtype == torch.float64
        with pytest.raises(ct.CeltuneInvalidArgument, match="float64"):
            ct.linear_cross_entropy(x.double(), w.double(), t)
    with pytest.raises(ct.CeltuneInvalidArgument, match="bias"):  # explain's ce form takes no bias
        ct.explain(torch.randn(4, 10, device=device), None, t[:4], bias=torch.randn(10, device=device))


@pytest.mark.parametrize("device", devices())
def test_explain_sources(device, monkeypatch):
    x, w, _, t = make(device, torch.float32)
    e = ct.explain(x, w, t)
    assert e["family"] == "flce" and e["source"] in ("exact", "nearest", "same-arch", "default")
    assert "v_chunk" in e["config"]
    e = ct.explain(x, w, t, config={"v_chunk": 32, "block_size": 32, "threads": 32})
    assert e["source"] == "explicit" and e["config"]["v_chunk"] == 32
    if device == "cpu":
        # A config the device cannot run (impl fused, bf16: the sm_90 GPU path)
        # is refused here as the call refuses it, not returned as the answer.
        xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
        with pytest.raises(ct.CeltuneInvalidArgument, match="config_json cannot run .*impl fused is the sm_90"):
            ct.explain(xb, wb, t, config={"impl": "fused"})
        with pytest.raises(ct.CeltuneInvalidArgument, match="impl fused is the sm_90"):
            ct.linear_cross_entropy(xb, wb, t, config={"impl": "fused"})
    monkeypatch.setenv("CELTUNE_CONFIG", '{"row_chunk": 8}')
    e = ct.explain(x @ w.T, None, t)
    assert e["family"] == "ce" and e["source"] == "env"
    monkeypatch.delenv("CELTUNE_CONFIG")
    # An explicit config runs: two passes over the vocabulary in chunks of 32, row chunks of 8.
    loss = ct.linear_cross_entropy(x, w, t, config={"v_chunk": 32, "block_size": 32, "threads": 32, "row_chunk": 8})
    assert rel(loss.detach(), F.cross_entropy(F.linear(x, w), t).detach()) < 2e-5


@pytest.mark.parametrize("device", devices())
def test_bad_input_raises_library_message(device):
    x, w, _, t = make(device, torch.float32)
    with raises_bad_target("target 9999 at token 2 is outside"):
        bad = t.clone()
        bad[2] = 9999
        ct.linear_cross_entropy(x, w, bad)
    with raises_bad_target("outside"):
        bad = t.clone()
        bad[1] = -7
        ct.cross_entropy(x @ w.T, bad)
    with pytest.raises(ValueError, match="dtype"):
        ct.linear_cross_entropy(x.double(), w.double(), t)
    with pytest.raises(ValueError, match="share a dtype"):
        ct.linear_cross_entropy(x, w.half(), t)
    with pytest.raises(ValueError, match="last dimension"):
        ct.linear_cross_entropy(x[:, :5], w, t)
    with pytest.raises(ValueError, match="elements"):
        ct.linear_cross_entropy(x, w, t[:3])
    with pytest.raises(ValueError, match="target has dtype"):
        ct.linear_cross_entropy(x, w, t.to(torch.int16))
    # From the library itself (celtune_last_error): options and configs.
    with pytest.raises(ValueError, match="label smoothing must be in"):
        ct.linear_cross_entropy(x, w, t, label_smoothing=1.5)
    with pytest.raises(ValueError, match="z-loss"):
        ct.linear_cross_entropy(x, w, t, z_loss=-1.0)
    with pytest.raises(ValueError, match="block_size"):
        ct.linear_cross_entropy(x, w, t, config={"block_size": 3})
    with pytest.raises(ValueError, match="reduction"):
        ct.linear_cross_entropy(x, w, t, reduction="avg")
    if torch.cuda.is_available():
        other = "cpu" if device == "cuda" else "cuda"
        with pytest.raises(ValueError, match="one device"):
            ct.linear_cross_entropy(x, w.to(other), t)


def test_int32_targets_and_cpu_context_is_cached():
    x, w, _, t = make("cpu", torch.float32)
    a = ct.linear_cross_entropy(x, w, t.int())
    b = ct.linear_cross_entropy(x, w, t)
    assert a.item() == b.item()
    assert ct._context(-1) is ct._context(-1)


@pytest.mark.parametrize("device", devices())
def test_int32_targets_with_an_ignore_index_past_int32(device):
    # No int32 target can equal it, so nothing is ignored, as in PyTorch; the
    # library refuses the pair as given, so the binding passes its own sentinel.
    # A target holding that sentinel is still out of range, not ignored.
    g = torch.Generator().manual_seed(4)
    z = (torch.randn(6, 9, generator=g)).to(device)
    y = torch.randint(0, 9, (6,), generator=g)
    y[0], y[1] = 0, 1  # 2**40 and 2**32 + 1 wrap to these in an int32 comparison
    y = y.to(device)
    for ii in (-2**40, 2**40, 2**31, 2**32 + 1):
        ref = F.cross_entropy(z, y, ignore_index=ii)
        assert torch.allclose(ct.cross_entropy(z, y.int(), ignore_index=ii).cpu(), ref.cpu(), rtol=2e-6)
        x, w, _, t = make(device, torch.float32, N=6)
        lr = F.cross_entropy(F.linear(x.detach(), w.detach()), t, ignore_index=ii)
        assert torch.allclose(ct.linear_cross_entropy(x, w, t.int(), ignore_index=ii).cpu(), lr.cpu(), rtol=2e-5)
    bad = y.int().clone()
    bad[2] = torch.iinfo(torch.int32).min
    with raises_bad_target("target"):
        ct.cross_entropy(z, bad, ignore_index=-2**40)


def scaled_backward_fp16(device, kind, inplace=False, S=8192.0, seed=6):
    """The gradients of loss * S (a loss scale) in fp16, and the reference's: fp32
    logits from the same fp16 values, F.cross_entropy, the same scale."""
    g = torch.Generator().manual_seed(seed)
    N, H, V = (256, 0, 2048) if kind == "ce" else (1024, 64, 4096)
    t = torch.randint(0, V, (N,), generator=g).to(device)
    if kind == "ce":
        base = (torch.randn(N, V, generator=g) * 3).half().to(device).requires_grad_()
        (ct.cross_entropy(base * 1, t, inplace_backward=inplace) * S).backward()
        ref = base.detach().float().requires_grad_()
        (F.cross_entropy(ref, t) * S).backward()
        return [(base.grad, ref.grad)]
    x = torch.randn(N, H, generator=g).half().to(device).requires_grad_()
    w = torch.randn(V, H, generator=g).half().to(device).requires_grad_()
    (ct.linear_cross_entropy(x, w, t) * S).backward()
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    (F.cross_entropy(F.linear(xr, wr), t) * S).backward()
    return [(x.grad, xr.grad), (w.grad, wr.grad)]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind,inplace", [("ce", False), ("ce", True), ("flce", False)])
def test_fp16_gradients_survive_a_loss_scale(device, kind, inplace):
    # A loss scale (GradScaler) keeps small fp16 gradients from underflowing only
    # if it is applied before they are rounded to fp16. Applied after (dZ formed
    # in the forward call), 52% of this dZ rounded to zero against PyTorch's
    # 0.2%, and 4211 of dW's 262144 elements against 1; so fp16 waits for backward.
    for got, want in scaled_backward_fp16(device, kind, inplace):
        assert got.dtype == torch.float16
        # flce: dZ's fp16 rounding before two GEMMs, at logits of std 8.
        assert rel(got, want) < (1e-3 if kind == "ce" else 2.5e-3)
        # No more zeros than the reference's gradient rounded once to fp16 has.
        assert (got == 0).sum().item() <= (want.half() == 0).sum().item() * 1.02 + 16


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_inplace_backward_is_done_in_backward(device, dtype):
    # In place: the logits hold dZ only after the backward that is their last
    # reader. One that retains its graph, or that hands the saved logits back
    # through identity hooks, or that torch.compile records, writes dZ apart:
    # a second backward read dZ as logits there, silently (0.48 relative
    # error under torch.compile's eager backend; a helper's probe).
    t = torch.randint(0, 33, (8,), device=device)
    base = torch.randn(8, 33, device=device).to(dtype).requires_grad_()
    ref = base.detach().float().requires_grad_()
    F.cross_entropy(ref, t).backward()
    tol = dict(rtol=1e-5, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-4)

    def check(got, times=1):
        torch.testing.assert_close(got.float(), times * ref.grad, **tol)

    logits = base * 1
    before = logits.detach().clone()
    loss = ct.cross_entropy(logits, t, inplace_backward=True)
    assert torch.equal(logits.detach(), before)
    loss.backward()
    assert not torch.equal(logits.detach(), before)  # dZ went over them
    check(base.grad)
    base.grad = None
    logits = base * 1
    loss = ct.cross_entropy(logits, t, inplace_backward=True)
    loss.backward(retain_graph=True)
    assert torch.equal(logits.detach(), before)  # retained: written apart
    loss.backward()
    check(base.grad, 2)
    with pytest.raises(RuntimeError, match="second time|modified by an inplace operation"):
        loss.backward()
    base.grad = None
    with torch.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):
        loss = ct.cross_entropy(base * 1, t, inplace_backward=True)
    (g,) = torch.autograd.grad(loss, base, retain_graph=True)
    check(g)
    loss.backward()
    check(base.grad)
    base.grad = None
    f = torch.compile(lambda z, y: ct.cross_entropy(z * 1, y, inplace_backward=True), backend="eager")
    loss = f(base, t)
    loss.backward(retain_graph=True)
    loss.backward()
    check(base.grad, 2)
    # Strided logits (a slice of a padded vocabulary) are refused at the call.
    wide = torch.randn(8, 40, device=device).to(dtype).requires_grad_()
    with pytest.raises(ct.CeltuneInvalidArgument, match="contiguous"):
        ct.cross_entropy((wide * 1)[:, :33], t, inplace_backward=True)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_ce_forward_holds_no_gradient(device, dtype):
    # ce's forward computes the loss alone: what it keeps for backward is the
    # logits and the targets, the caller's own tensors, so no [N, V] buffer
    # lives from forward to backward (one did, with a scaling pass over it).
    z = torch.randn(64, 1000, device=device).to(dtype).requires_grad_()
    t = torch.randint(0, 1000, (64,), device=device)
    for inplace in (False, True):
        logits = z * 1
        if device == "cuda":
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
        loss = ct.cross_entropy(logits, t, inplace_backward=inplace)
        saved = loss.grad_fn.saved_tensors
        assert len(saved) == 2 and saved[0].data_ptr() == logits.data_ptr() and torch.equal(saved[1], t)
        if device == "cuda":
            assert torch.cuda.memory_allocated() - before < logits.numel() * logits.element_size()
        del saved
        loss.backward()


@pytest.mark.parametrize("device", devices())
def test_bad_target_names_the_callers_values(device):
    z = torch.randn(4, 10, device=device)
    for dt in (torch.int64, torch.int32):
        t = torch.tensor([1, 10, 2, 3], dtype=dt, device=device)
        # ignore_index inside [0, V) is mapped for the library; the message names the caller's.
        with raises_bad_target(r"target 10 at token 1 .*ignore_index \(3\)"):
            ct.cross_entropy(z, t, ignore_index=3)
        # A target equal to the value ignore_index is mapped to is out of range, not ignored.
        low = torch.iinfo(dt).min
        t = torch.tensor([1, 3, low, 4], dtype=dt, device=device)
        with raises_bad_target(f"target {low} at token 2 "):
            ct.cross_entropy(z, t, ignore_index=3, reduction="none")
        # H = 8: fp32 rows on CUDA must be 16-byte aligned, which H = 6 would be refused for first.
        x, w = torch.randn(4, 8, device=device), torch.randn(10, 8, device=device)
        with raises_bad_target(f"target {low} at token 2 "):
            ct.linear_cross_entropy(x, w, t, ignore_index=3)
    # The same targets with ignore_index outside V: token 3's 3 is a real target.
    t = torch.tensor([1, 3, 7, 4], device=device)
    ref = F.cross_entropy(z, t, ignore_index=3, reduction="none")
    assert torch.allclose(ct.cross_entropy(z, t, ignore_index=3, reduction="none"), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", devices())
def test_target_check_modes(device, monkeypatch):
    x, w, _, t = make(device, torch.float32)
    bad = t.clone()
    bad[2] = 9999
    left_out = t.clone()
    left_out[2] = -100
    want = F.cross_entropy(F.linear(x.detach(), w.detach()), left_out)
    # 0: no check; the token is left out of the loss, silently.
    monkeypatch.setenv("CELTUNE_CHECK_TARGETS", "0")
    assert rel(ct.linear_cross_entropy(x, w, bad).detach(), want) < 2e-5
    monkeypatch.setenv("CELTUNE_CHECK_TARGETS", "maybe")
    with pytest.raises(ct.CeltuneInvalidArgument,
                       match=r"CELTUNE_CHECK_TARGETS is 'maybe'; expected async \(the default\), sync \(or 1\), or 0"):
        ct.linear_cross_entropy(x, w, t)
    monkeypatch.setenv("CELTUNE_CHECK_TARGETS", "")  # set empty: the default
    if device == "cpu":
        with pytest.raises(ct.CeltuneInvalidArgument, match="target 9999 at token 2 is outside"):
            ct.linear_cross_entropy(x, w, bad)
    for mode in ("sync", "1"):
        monkeypatch.setenv("CELTUNE_CHECK_TARGETS", mode)
        with pytest.raises(ct.CeltuneInvalidArgument, match="target 9999 at token 2 is outside.*-100[)]$"):
            ct.linear_cross_entropy(x, w, bad)
    monkeypatch.delenv("CELTUNE_CHECK_TARGETS")
    if device == "cpu":  # the default checks at the call on the CPU, where that costs nothing
        with pytest.raises(ct.CeltuneInvalidArgument, match="target 9999 at token 2 is outside"):
            ct.linear_cross_entropy(x, w, bad)
        ct.check_targets()  # nothing pending
        return
    # async, the default on CUDA: the call returns a loss without the token ...
    assert rel(ct.linear_cross_entropy(x, w, bad).detach(), want) < 2e-5
    torch.cuda.synchronize()
    # ... and the next call on the device raises before it launches anything.
    with pytest.raises(ct.CeltuneInvalidArgument, match="target 9999 at token 2 .*in an earlier call"):
        ct.cross_entropy(x.detach() @ w.detach().T, t)
    ct.check_targets()  # read once: nothing left
    # check_targets waits for the GPU: here the stream is still asleep when it is called.
    for dev in (None, "cuda", 0, torch.device("cuda", 0)):
        torch.cuda._sleep(50_000_000)
        ct.cross_entropy(x.detach() @ w.detach().T, bad, inplace_backward=True)
        with pytest.raises(ct.CeltuneInvalidArgument, match="target 9999 at token 2"):
            ct.check_targets(dev)
    # A busy stream does not let an error fall far behind: the host waits for
    # the oldest flag once 8 are unread, so the 10th call raises.
    torch.cuda._sleep(500_000_000)
    ct.linear_cross_entropy(x, w, bad)
    for _ in range(8):
        ct.linear_cross_entropy(x, w, t)
    with pytest.raises(ct.CeltuneInvalidArgument, match="target 9999 at token 2"):
        ct.linear_cross_entropy(x, w, t)
    ct.check_targets()  # the 8 sound calls' flags are read: nothing to raise
    assert rel(ct.linear_cross_entropy(x, w, t).detach(), F.cross_entropy(F.linear(x.detach(), w.detach()), t)) < 2e-5
    # Targets written over in place before the flag is read (a reused label
    # buffer): the token is named, the value it held is not guessed.
    labels = bad.clone()
    torch.cuda._sleep(50_000_000)
    ct.linear_cross_entropy(x, w, labels)
    labels.fill_(3)
    with pytest.raises(ct.CeltuneInvalidArgument, match=r"the target \(written over since, so its value is not "
                                                        r"known\) at token 2 is outside"):
        ct.check_targets()


def test_check_targets_takes_a_device():
    ct.check_targets("cpu")  # the CPU checks at the call: nothing to wait for
    ct.check_targets(torch.device("cpu"))
    ct.check_targets("cuda")  # no CUDA, or no call there yet: nothing to read
    for bad, why in ((True, "takes a device"), (5.5, "takes a device"), ("nowhere", "check_targets: "),
                     ("meta", "tensors on meta are not supported")):
        with pytest.raises(ct.CeltuneInvalidArgument, match=why):
            ct.check_targets(bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.gpu
def test_a_cuda_graph_captures_a_call_with_a_flag_pending(monkeypatch):
    # The last eager call's flag is still unread when the capture starts; the
    # first call inside must not query its event (illegal in a capture), and
    # nothing is recorded there. sync cannot run inside one: refused.
    x, w, _, t = make("cuda", torch.float32)
    xs, ts = x.detach().clone(), t.clone()
    torch.cuda._sleep(50_000_000)
    ct.linear_cross_entropy(xs, w.detach(), ts)  # also allocates the library's scratch before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = ct.linear_cross_entropy(xs, w.detach(), ts)
    xs.copy_(x.detach() * 0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert rel(loss, F.cross_entropy(F.linear(xs, w.detach()), ts)) < 2e-5
    monkeypatch.setenv("CELTUNE_CHECK_TARGETS", "sync")
    with pytest.raises(ct.CeltuneInvalidArgument, match="sync reads a flag at every call, which a CUDA graph"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            ct.linear_cross_entropy(xs, w.detach(), ts)


@pytest.mark.parametrize("device", devices())
def test_special_tensors_are_read_as_their_values(device):
    # Read through data_ptr() directly, a negative view gave +x's loss, an
    # upstream gradient of the wrong sign, and a zero tensor (no storage) or an
    # old-vmap batched gradient (autograd.grad(is_grads_batched=True)) failed.
    x, w, _, t = make(device, torch.float32)
    xd, wd = x.detach(), w.detach()
    want = F.cross_entropy(F.linear(-xd, wd), t)
    assert rel(ct.linear_cross_entropy(torch._neg_view(xd), wd, t), want) < 2e-5
    xg = xd.clone().requires_grad_()
    loss = ct.linear_cross_entropy(xg, wd, t, reduction="none")
    g = torch.full((t.numel(),), 0.5, device=device)
    (got,) = torch.autograd.grad(loss, xg, torch._neg_view(g), retain_graph=True)
    (ref,) = torch.autograd.grad(loss, xg, -g, retain_graph=True)
    assert torch.equal(got, ref)
    (zero,) = torch.autograd.grad(loss, xg, torch._efficientzerotensor(t.numel(), device=device), retain_graph=True)
    assert not zero.any()
    mean = ct.linear_cross_entropy(xg, wd, t)
    gs = torch.tensor([1.0, -2.0, 0.25], device=device)
    (batched,) = torch.autograd.grad(mean, xg, gs, is_grads_batched=True, retain_graph=True)
    for k in range(3):
        (one,) = torch.autograd.grad(mean, xg, gs[k], retain_graph=True)
        assert torch.allclose(batched[k], one, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("device", devices())
def test_inplace_backward_is_refused_under_allow_mutation_on_saved_tensors(device):
    x, w, _, t = make(device, torch.float32)
    with torch.autograd.graph.allow_mutation_on_saved_tensors():
        z = x @ w.T
        with pytest.raises(ct.CeltuneInvalidArgument, match="cannot run under .*allow_mutation_on_saved_tensors"):
            ct.cross_entropy(z, t, inplace_backward=True)
        loss = ct.cross_entropy(z, t) + (z * z).mean()  # out of place: fine
        (gx,) = torch.autograd.grad(loss, x)
    zr = x.detach().double() @ w.detach().double().T
    zr.requires_grad_()
    (gz,) = torch.autograd.grad(F.cross_entropy(zr, t) + (zr * zr).mean(), zr)
    assert rel(gx, (gz @ w.detach().double()).float()) < 1e-5


def test_odd_tensors_and_probabilities_are_refused_clearly():
    w, t = torch.randn(10, 8), torch.tensor([1, 2, 3, 4])
    with pytest.raises(ct.CeltuneInvalidArgument, match="input must be a dense .strided. tensor, got torch.sparse_coo"):
        ct.linear_cross_entropy(torch.randn(4, 8).to_sparse(), w, t)
    with pytest.raises(ct.CeltuneInvalidArgument, match="not probabilities"):
        ct.cross_entropy(torch.randn(5, 7), torch.softmax(torch.randn(5, 7), -1))
    assert repr(ct.LinearCrossEntropy(reduction="sum", softcap=30.0)) == "LinearCrossEntropy(reduction='sum', softcap=30.0)"
    assert repr(ct.CrossEntropy()) == "CrossEntropy()"


@pytest.mark.parametrize("device", [d for d in devices() if d != "cpu"])
def test_a_bad_target_left_unread_is_reported_at_exit(device):
    # A program's last call with a bad target, and no check_targets(): the
    # exit writes it to stderr, and the exit status stays the program's.
    import subprocess
    import sys
    code = ("import torch, celtune.torch as ct\n"
            "z = torch.randn(4, 10, device='cuda')\n"
            "ct.cross_entropy(z, torch.tensor([1, 2, 99, 3], device='cuda'))\n"
            "print('done')\n")
    env = dict(os.environ, CELTUNE_CHECK_TARGETS="async")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout == "done\n", out
    assert "celtune: warning at exit: celtune: target 99 at token 2 is outside [0, 10)" in out.stderr, out.stderr


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_inplace_backward_leaves_logits_alone_on_bad_input(device, dtype, monkeypatch):
    base = torch.randn(4, 10, device=device).to(dtype).requires_grad_()
    logits = base * 1
    before = logits.detach().clone()
    # Checked at the call (the CPU's default; on CUDA, sync), the targets are
    # read before the logits are overwritten. (Under async the error comes
    # later and the logits hold dZ, as asked: test_target_check_modes.)
    monkeypatch.setenv("CELTUNE_CHECK_TARGETS", "sync")
    with pytest.raises(ct.CeltuneInvalidArgument, match="target 99 at token 2"):
        ct.cross_entropy(logits, torch.tensor([1, 2, 99, 3], device=device), inplace_backward=True)
    assert torch.equal(logits.detach(), before)
    monkeypatch.delenv("CELTUNE_CHECK_TARGETS")
    # A leaf that requires grad (a parameter) is never overwritten.
    with pytest.raises(ct.CeltuneInvalidArgument, match="leaf"):
        ct.cross_entropy(base, torch.tensor([1, 2, 3, 4], device=device), inplace_backward=True)
    assert torch.equal(base.detach(), before)
    # Nor through a view of it, which is no leaf itself (dZ replaced the values).
    for view in (lambda: base[:], lambda: base.view(4, 10), lambda: base.reshape(2, 2, 10)):
        with pytest.raises(ct.CeltuneInvalidArgument, match="view of one"):
            ct.cross_entropy(view(), torch.tensor([1, 2, 3, 4], device=device).view(view().shape[:-1]),
                             inplace_backward=True).backward()
    assert torch.equal(base.detach(), before)
    with torch.no_grad():  # no gradient, nothing written: allowed
        ct.cross_entropy(base, torch.tensor([1, 2, 3, 4], device=device), inplace_backward=True)
    assert torch.equal(base.detach(), before)


@pytest.mark.parametrize("device", devices())
def test_more_bad_input_is_invalid_argument(device):
    x, w, _, t = make(device, torch.float32)
    x6, w6, _, t6 = make(device, torch.float32, N=36)
    bad = [
        (lambda: ct.cross_entropy(torch.zeros(3, 0, device=device), t[:3]), "class dimension"),
        (lambda: ct.linear_cross_entropy(x[:, :0], w[:, :0], t), "at least 1"),
        (lambda: ct.linear_cross_entropy(x, w[:0], t), "at least 1"),
        (lambda: ct.linear_cross_entropy(x, w, t, ignore_index=2**63), "int64 range"),
        (lambda: ct.linear_cross_entropy(x, w, t, ignore_index=3.0), "must be an integer"),
        (lambda: ct.linear_cross_entropy(x, w, t, config={1, 2}), "config must be"),
        # a NUL ended the C string: what followed was dropped unread
        (lambda: ct.linear_cross_entropy(x, w, t, config='{}\x00{"block_size": 3}'), "NUL"),
        (lambda: ct.linear_cross_entropy(x, w, t, config={"row_chunk": 99999999999999999999}), "out of range"),
        # explain checks as the calls do
        (lambda: ct.explain(x, w[:, :5], t), "last dimension"),
        (lambda: ct.explain(x, w.half(), t), "share a dtype"),
        (lambda: ct.explain(x, w, t[:3]), "elements"),
        (lambda: ct.explain(x @ w.T, None, t[:3]), "rows"),
        # a target of N elements in another shape paired tokens with the wrong targets
        (lambda: ct.linear_cross_entropy(x6.view(2, 18, -1), w6, t6.view(18, 2)), "leading shape"),
        (lambda: ct.cross_entropy((x6 @ w6.T).view(2, 18, -1), t6.view(18, 2)), "leading shape"),
        (lambda: ct.linear_cross_entropy(x, w, t.view(-1, 1)), "leading shape"),
        # option types F.cross_entropy refuses; a list reduction raised "unhashable"
        (lambda: ct.linear_cross_entropy(x, w, t, reduction=["mean"]), "reduction must be"),
        (lambda: ct.linear_cross_entropy(x, w, t, ignore_index=True), "must be an integer"),
        (lambda: ct.linear_cross_entropy(x, w, t, label_smoothing="0.1"), "label_smoothing must be a number"),
        (lambda: ct.cross_entropy(x @ w.T, t, softcap="30"), "softcap must be a number"),
        (lambda: ct.cross_entropy(x @ w.T, t, z_loss=True), "z_loss must be a number"),
        # past a float's range: the C API's float made it inf, and the message said inf
        (lambda: ct.cross_entropy(x @ w.T, t, z_loss=1e40), "z_loss 1e\\+40 is beyond"),
        # the float the C API holds is said as the number the caller wrote
        (lambda: ct.cross_entropy(x @ w.T, t, label_smoothing=-0.1), "got -0.1$"),
        (lambda: ct.cross_entropy(x @ w.T, t, ignore_index=torch.tensor([3])), "must be an integer"),
        # a list as target raised AttributeError
        (lambda: ct.linear_cross_entropy(x, w, t.tolist()), "target must be a torch.Tensor"),
        (lambda: ct.cross_entropy((x @ w.T).tolist(), t), "logits must be a torch.Tensor"),
    ]
    for f, msg in bad:
        with pytest.raises(ct.CeltuneInvalidArgument, match=msg):
            f()


@pytest.mark.parametrize("device", devices())
def test_targets_take_the_inputs_leading_shape_or_are_flat(device):
    x, w, _, t = make(device, torch.float32, N=36)
    x3, t2 = x.view(2, 18, -1), t.view(2, 18)
    flat = ct.linear_cross_entropy(x, w, t, reduction="none")
    assert torch.equal(ct.linear_cross_entropy(x3, w, t2, reduction="none"), flat.view(t2.shape))
    assert torch.equal(ct.linear_cross_entropy(x3, w, t, reduction="none"), flat)  # flat targets: a flat loss
    z = x @ w.T
    assert torch.equal(ct.cross_entropy(z.view(2, -1, w.shape[0]), t2, reduction="none"),
                       ct.cross_entropy(z, t, reduction="none").view(t2.shape))


@pytest.mark.parametrize("device", devices())
def test_a_strided_view_too_large_is_refused_before_its_copy(device):
    # Expanded views hold one element; contiguous() would ask for 562 TB (ce) and
    # 35 TB (flce's input): the library's size check comes first.
    z = torch.zeros(1, 1, device=device).expand(2**24, 2**23)
    with pytest.raises(ct.CeltuneInvalidArgument, match="problem too large"):
        ct.cross_entropy(z, torch.zeros(2**24, dtype=torch.int64, device=device))
    x = torch.zeros(1, 8, device=device).expand(2**40, 8)
    t = torch.zeros(1, dtype=torch.int64, device=device).expand(2**40)
    with pytest.raises(ct.CeltuneInvalidArgument, match="problem too large"):
        ct.linear_cross_entropy(x, torch.randn(1024, 8, device=device), t)
    # Views that do not flatten without a copy (a transposed expansion): the
    # reshape itself asked the allocator for 1 PB (flce's input) and 512 TB (ce).
    x = torch.zeros(2, 1, 8, device=device).expand(2, 2**44, 8).transpose(0, 1)
    t = torch.zeros(1, 1, dtype=torch.int64, device=device).expand(2**44, 2)
    with pytest.raises(ct.CeltuneInvalidArgument, match=r"problem too large: N x H \(inputs\) = 35184372088832 x 8"):
        ct.linear_cross_entropy(x, torch.randn(1024, 8, device=device), t)
    z = torch.zeros(2, 1, 2**23, device=device).expand(2, 2**23, 2**23).transpose(0, 1)
    t = torch.zeros(1, 1, dtype=torch.int64, device=device).expand(2**23, 2)
    with pytest.raises(ct.CeltuneInvalidArgument, match=r"problem too large: N x V \(logits\) = 16777216 x 8388608"):
        ct.cross_entropy(z, t)
    # The Python side's limit is the library's: 2^46 logits pass its rule, one row more does not.
    from celtune.torch import _MAX_TENSOR_ELEMENTS
    rows = _MAX_TENSOR_ELEMENTS // 2**23
    ct.explain(torch.zeros(1, 1, device=device).expand(rows, 2**23), None,
               torch.zeros(1, dtype=torch.int64, device=device).expand(rows))
    with pytest.raises(ct.CeltuneInvalidArgument, match="problem too large"):
        ct.explain(torch.zeros(1, 1, device=device).expand(rows + 1, 2**23), None,
                   torch.zeros(1, dtype=torch.int64, device=device).expand(rows + 1))
    # Within the rule such a view is copied and computed as its contiguous copy is.
    z = torch.randn(2, 1, 50, device=device).expand(2, 3, 50).transpose(0, 1)
    t = torch.randint(0, 50, (3, 2), device=device)
    assert torch.allclose(ct.cross_entropy(z, t), ct.cross_entropy(z.contiguous(), t))


@pytest.mark.parametrize("device", devices())
def test_empty_batch_checks_its_arguments(device):
    # No tokens runs no kernel, but what a call with tokens refuses is refused too.
    e = torch.zeros(0, dtype=torch.int64, device=device)
    with pytest.raises(ct.CeltuneInvalidArgument, match="dtype"):
        ct.cross_entropy(torch.zeros(0, 10, dtype=torch.int64, device=device), e)
    with pytest.raises(ct.CeltuneInvalidArgument, match="label smoothing"):
        ct.cross_entropy(torch.zeros(0, 10, device=device), e, label_smoothing=5.0)
    with pytest.raises(ct.CeltuneInvalidArgument, match="softcap"):
        ct.linear_cross_entropy(torch.zeros(0, 8, device=device), torch.randn(10, 8, device=device), e, softcap=-1.0)
    with pytest.raises(ct.CeltuneInvalidArgument, match="target has dtype"):
        ct.linear_cross_entropy(torch.zeros(0, 8, device=device), torch.randn(10, 8, device=device), e.float())
    with pytest.raises(ct.CeltuneInvalidArgument, match="target has dtype"):  # an index inside [0, V) too
        ct.linear_cross_entropy(torch.zeros(0, 8, device=device), torch.randn(10, 8, device=device), e.float(),
                                ignore_index=3)
    with pytest.raises(ct.CeltuneInvalidArgument, match="block_size"):
        ct.cross_entropy(torch.zeros(0, 10, device=device), e, config={"block_size": 3})


@pytest.mark.parametrize("device", devices())
def test_fake_kernels_give_the_real_strides(device):
    # The ops make their inputs contiguous before the call, so their outputs are
    # contiguous; the fakes said otherwise for a transposed input (empty_like of
    # it), which torch.compile's inductor refused as an incorrect fake kernel.
    g = torch.Generator(device=device).manual_seed(3)
    x = torch.randn(16, 11, device=device, generator=g).t()  # [11, 16], not contiguous
    w = torch.randn(16, 23, device=device, generator=g).t()  # [23, 16], not contiguous
    b = torch.randn(46, device=device, generator=g)[::2]  # [23], stride 2
    t = torch.randint(0, 23, (11,), device=device, generator=g)
    z = torch.randn(23, 11, device=device, generator=g).t()  # logits [11, 23], not contiguous
    one = torch.ones((), device=device)
    cases = [
        (torch.ops.celtune.flce_forward.default, (x, w, t, b, -100, 0, 0.0, 0.0, 0.0, None, True)),
        (torch.ops.celtune.flce_backward.default, (x, w, t, b, one, 0, -100, 0.0, 0.0, 0.0, None)),
        (torch.ops.celtune.ce_forward.default, (z, t, -100, 0, 0.0, 0.0, 0.0, None)),
        (torch.ops.celtune.ce_backward.default, (z, t, one, 0, -100, 0.0, 0.0, 0.0, None)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args, test_utils=("test_faketensor",))


def test_meta_tensors_are_refused_as_unsupported():
    m = torch.device("meta")
    with pytest.raises(ct.CeltuneInvalidArgument, match="not supported"):
        ct.linear_cross_entropy(torch.randn(3, 4, device=m), torch.randn(5, 4, device=m),
                                torch.zeros(3, dtype=torch.long, device=m))
    with pytest.raises(ct.CeltuneInvalidArgument, match="not supported"):
        ct.cross_entropy(torch.randn(3, 5, device=m), torch.zeros(3, dtype=torch.long, device=m))


@pytest.mark.parametrize("device", devices())
def test_explain_answers_an_empty_batch_as_the_call_runs_it(device):
    # The call accepts an empty batch (no kernel runs); explain answered "tokens
    # (N) must be positive". It answers as for one token, and still refuses
    # what the call refuses.
    x, w = torch.randn(0, 8, device=device), torch.randn(13, 8, device=device)
    e = torch.zeros(0, dtype=torch.long, device=device)
    assert ct.linear_cross_entropy(x, w, e).item() == 0.0
    assert ct.explain(x, w, e)["family"] == "flce"
    assert ct.explain(torch.randn(0, 13, device=device), None, e)["family"] == "ce"
    with pytest.raises(ct.CeltuneInvalidArgument, match="softcap"):
        ct.explain(x, w, e, softcap=-1.0)


def test_tiny_lm_example_runs_on_the_cpu():
    # The README's training example, a few steps on the CPU backend: both losses
    # printed, and equal to the printed precision at the first step.
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "examples" / "train_tiny_lm.py"), "--device", "cpu",
                          "--steps", "3", "--layers", "1", "--vocab", "256", "--hidden", "32"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["0"]]
    assert len(rows) == 1 and rows[0][1] == rows[0][2], out
    assert "max |loss difference| over 3 steps" in out and "celtune" in out.splitlines()[-1], out


def test_torch_func_transforms_are_refused_clearly():
    x, w, _, t = make("cpu", torch.float32)
    xd, wd = x.detach(), w.detach()
    for transform in (lambda: torch.func.grad(lambda a: ct.linear_cross_entropy(a, wd, t))(xd),
                      lambda: torch.func.vmap(lambda a: ct.cross_entropy(a, t))(torch.randn(3, 37, 61)),
                      lambda: torch.func.jacrev(lambda a: ct.linear_cross_entropy(a, wd, t))(xd),
                      lambda: torch.func.jvp(lambda a: ct.linear_cross_entropy(a, wd, t), (xd,), (xd,))):
        with pytest.raises(ct.CeltuneInvalidArgument, match="torch.func transforms .* are not supported"):
            transform()


@pytest.mark.parametrize("value", ["garbage", "63MiB", "-1"])
def test_a_bad_scratch_budget_is_refused_with_its_reason(monkeypatch, value):
    # The library refuses the context; its message outlived it only through
    # celtune_last_error(NULL): before, Python raised "cannot create a context
    # (status 2)", a plain CeltuneError naming nothing.
    monkeypatch.setattr(ct, "_contexts", {})  # a fresh context reads the variable
    monkeypatch.setenv("CELTUNE_MAX_SCRATCH", value)
    x, w, _, t = make("cpu", torch.float32)
    with pytest.raises(ct.CeltuneInvalidArgument, match="CELTUNE_MAX_SCRATCH"):
        ct.linear_cross_entropy(x, w, t)
    monkeypatch.setenv("CELTUNE_MAX_SCRATCH", "256MiB")
    loss = ct.linear_cross_entropy(x.detach(), w.detach(), t)  # once fixed, the next call creates it
    assert rel(loss, F.cross_entropy(F.linear(x.detach(), w.detach()), t)) < 2e-5


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_tensors_on_a_device_other_than_the_current_one():
    # Model-parallel code keeps the loss's tensors on a GPU other than the
    # current one. Each call must run on its tensors' device (that device's
    # context, scratch and current stream), give there what it gives on the
    # current device (bit for bit: the same kernels on the same GPU type), and
    # leave the current device as it was; a bad target is that device's to
    # report.
    prev = torch.cuda.current_device()
    torch.cuda.set_device(0)
    try:
        got = {}
        for dev in ("cuda:1", "cuda:0", "cuda:1"):
            # H = 768, N = 600: the fused path's defaults on Hopper in both modes.
            x, w, b, t = make(dev, torch.bfloat16, N=600, H=768, V=1000, bias=True, seed=7)
            with torch.no_grad():
                fwd = ct.linear_cross_entropy(x, w, t, b)
            loss = ct.linear_cross_entropy(x, w, t, b, reduction="sum")
            loss.backward()
            z = (torch.randn(300, 5003, generator=torch.Generator().manual_seed(8)) * 3).to(dev, torch.bfloat16)
            z.requires_grad_()
            lz = ct.cross_entropy(z, t[:300] * 5, label_smoothing=0.1)
            lz.backward()
            assert torch.cuda.current_device() == 0
            outs = (fwd, loss, x.grad, w.grad, b.grad, lz, z.grad)
            assert all(o.device == torch.device(dev) for o in outs)
            got.setdefault(dev, []).append([o.detach().cpu() for o in outs])
        ref = F.cross_entropy(F.linear(x.detach().float(), w.detach().float(), b.detach().float()), t)
        assert rel(got["cuda:1"][0][0], ref.cpu()) < TOL[torch.bfloat16]
        for a, c in zip(got["cuda:1"][0], got["cuda:0"][0]):
            assert torch.equal(a, c)
        for a, c in zip(got["cuda:1"][0], got["cuda:1"][1]):
            assert torch.equal(a, c)
        # A bad target on cuda:1 (async: read later) is cuda:1's, not cuda:0's.
        x, w, _, t = make("cuda:1", torch.bfloat16, N=600, H=768, V=1000, seed=9)
        bad = t.clone()
        bad[2] = 9999
        ct.linear_cross_entropy(x, w, bad)
        ct.check_targets("cuda:0")
        with pytest.raises(ct.CeltuneInvalidArgument, match="target 9999 at token 2"):
            ct.check_targets("cuda:1")
        assert torch.cuda.current_device() == 0
    finally:
        torch.cuda.set_device(prev)


def test_a_bad_library_path_is_one_clear_import_error(tmp_path, monkeypatch):
    # ctypes says OSError for a file that is no library and AttributeError for
    # a library without celtune's symbols; a folder read as "no such file".
    from pathlib import Path

    from celtune import _lib as lib_mod

    monkeypatch.setenv("CELTUNE_LIBRARY", str(tmp_path))
    with pytest.raises(ImportError, match="not a file"):
        lib_mod.library_path()
    monkeypatch.setenv("CELTUNE_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(ImportError, match="no such file"):
        lib_mod.library_path()
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not a library")
    with pytest.raises(ImportError, match="not a loadable libceltune"):
        lib_mod._load(junk)
    libm = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                             "/lib64/libm.so.6") if Path(p).is_file()), None)
    if libm:
        with pytest.raises(ImportError, match="not a loadable libceltune"):
            lib_mod._load(Path(libm))


def test_bools_are_not_numbers_and_tiny_options_not_zero():
    # np.bool_ and torch bools slipped through as 1 (ignore_index=torch.tensor(True)
    # ignored class 1); a softcap of 1e-46 arrived as 0, off, where 1e-45 is refused.
    np = pytest.importorskip("numpy")
    x, w = torch.randn(4, 8), torch.randn(5, 8)
    y = torch.tensor([0, 1, 4, 2])
    for yes in (True, np.bool_(True), torch.tensor(True)):
        for name in ("label_smoothing", "z_loss", "softcap"):
            with pytest.raises(ct.CeltuneInvalidArgument, match=f"{name} must be a number"):
                ct.linear_cross_entropy(x, w, y, **{name: yes})
        with pytest.raises(ct.CeltuneInvalidArgument, match="ignore_index must be an integer"):
            ct.linear_cross_entropy(x, w, y, ignore_index=yes)
    for name in ("label_smoothing", "z_loss", "softcap"):
        with pytest.raises(ct.CeltuneInvalidArgument, match=f"{name} 1e-46 is below the range of a float"):
            ct.linear_cross_entropy(x, w, y, **{name: 1e-46})
    # The smallest float itself arrives whole, and the library judges it.
    with pytest.raises(ct.CeltuneInvalidArgument, match="z-loss scale must be 0 or from 1.2e-38"):
        ct.linear_cross_entropy(x, w, y, z_loss=2.0**-149)
    ct.cross_entropy(torch.randn(4, 10, requires_grad=True) * 1, torch.randint(0, 10, (4,)),
                     inplace_backward=np.bool_(True)).backward()


def test_version_attribute_is_the_librarys():
    import celtune
    assert celtune.__version__ == celtune.version()


def test_yes_no_options_take_bools_only():
    # inplace_backward="no" was truthy, and so in place.
    z = torch.randn(4, 10, requires_grad=True)
    y = torch.randint(0, 10, (4,))
    with pytest.raises(ct.CeltuneInvalidArgument, match="inplace_backward must be True or False"):
        ct.cross_entropy(z * 1, y, inplace_backward="no")
    ct.cross_entropy(z * 1, y, inplace_backward=0).backward()
    x, w = torch.randn(4, 8), torch.randn(10, 8)
    with pytest.raises(ct.CeltuneInvalidArgument, match="backward must be True or False"):
        ct.explain(x, w, y, backward="no")
