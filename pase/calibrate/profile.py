"""``pase calibrate``: time the kernels and collectives of the GPU it runs on and write a calibration file.

The only module of pase that imports torch (``pip install pase[torch]``), and only inside its functions, so that
``pase calibrate`` on a machine without torch or without a GPU says so in one line. It times, on CUDA device
``LOCAL_RANK`` (0 by default), each case as the median of CUDA-event timings after warm-ups:

* matrix products in BF16, each shape's three products of a layer ``y = x W^T`` (forward), ``dx = dy W``
  (input gradient) and ``dW = dy^T x`` (weight gradient); FP8 products (``torch._scaled_mm``, e4m3 with
  per-tensor scales, BF16 out) where the GPU has them;
* causal fused attention (``scaled_dot_product_attention``, BF16), forward and forward plus backward, over
  sequence lengths and head counts (grouped-query where the key heads are fewer), at DeepSeek-V3's MLA shapes
  (queries and keys 192 wide, values 128) and at GPT-OSS's 64-wide heads, on torch's flash and cuDNN
  backends each (the fit prices by cuDNN's, which Transformer Engine runs:
  :data:`pase.calibrate.fit.ATTENTION_BACKENDS`; its curves from the 128-wide heads, the MLA shapes' rates
  relative to them: :mod:`pase.hardware.attention_kernels`);
* memory-bound kernels: copy, add of two tensors into a third, RMSNorm forward and forward plus backward;
* launch (:func:`profile_launch`): small square products, a small copy and the expert products of the
  mixture-of-experts runs of published-measurements.md (section 3b) as a loop over the local experts, each timed
  five ways (:class:`Timer`): alone as above, with the host's issue hidden behind a held GPU (the GPU's own
  time), back to back from an idle GPU (an eager step's pace), the host's time to issue it, and replayed from a
  CUDA graph. A kernel timed alone on an idle GPU holds the host's time to issue it: the H200 file's products
  of 0.03 and 17 GFLOP take 22-31 us alone, which no GPU's work explains; these rows part the two. The fit
  does not use them (they are reported beside what the calibration prices each kernel at);
* with two or more GPUs: NCCL all-reduce, all-gather, reduce-scatter and all-to-all over message sizes among
  the GPUs of one node (spawned here when not launched by torchrun) and, under torchrun across nodes, among
  one GPU of each node (every GPU's rank of the same local index at once, as data-parallel groups run).

The rows are those of ``pase/hardware/data/h200-kernels.json`` (:data:`pase.calibrate.fit.SECTIONS`), so
:func:`pase.calibrate.fit.calibrate` fits them as it fits that file. The default grid takes a few minutes on
one GPU, ``quick`` under one (by the H200's timings; not yet run on one).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

from pase.errors import ClusterError

__all__ = ["KNOWN_PEAKS", "Timer", "require_gpu", "device_peaks", "profile_kernels", "profile_launch",
           "profile_collectives", "measure"]

# Dense BF16 and FP8 tensor-core peaks (FLOP/s) of GPUs whose names pase recognises, from NVIDIA's datasheets;
# any other GPU needs --peak-tflops (and --fp8-peak-tflops for FP8). First match wins, in this order.
KNOWN_PEAKS = (
    ("H200", 989e12, 1979e12),
    ("H100 PCIe", 756e12, 1513e12),
    ("H100 NVL", 835e12, 1671e12),
    ("H100", 989e12, 1979e12),  # the SXM5 ("NVIDIA H100 80GB HBM3")
    ("B200", 2250e12, 4500e12),
    ("A100", 312e12, None),
)

# (m, n, k) products: squares, and layer shapes of Llama-style models (hidden 4096 and 8192 at tensor-parallel
# sizes 1 to 8) at 2,048 to 16,384 tokens.
_SQUARES = (512, 1024, 2048, 4096, 8192, 16384)
_LAYERS = tuple((m, n, k) for m in (2048, 8192, 16384)
                for n, k in ((4096, 4096), (12288, 4096), (4096, 14336), (1792, 4096), (8192, 8192),
                             (28672, 8192), (8192, 3584), (1280, 8192)))
_QUICK_GEMMS = ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (2048, 4096, 14336),
                (8192, 1280, 8192))
_ATTENTION = ((1, 32, 8, 2048, 128), (1, 32, 8, 4096, 128), (1, 32, 8, 8192, 128), (2, 32, 8, 4096, 128),
              (1, 64, 8, 8192, 128), (1, 8, 2, 8192, 128), (4, 16, 16, 2048, 128), (1, 12, 12, 2048, 128),
              (1, 32, 32, 1024, 128))
_QUICK_ATTENTION = ((1, 32, 8, 2048, 128), (1, 32, 8, 8192, 128), (1, 12, 12, 2048, 128))
# DeepSeek-V3's multi-head latent attention as a device runs it at TP 1 and 2 (128 and 64 heads, queries and keys 192
# wide, values 128), 4,096 tokens: (b, hq, hkv, s, d, dv).
_MLA_ATTENTION = ((1, 128, 128, 4096, 192, 128), (1, 64, 64, 4096, 192, 128))
# GPT-OSS's 64-wide heads (64 query heads, 8 key heads) at TP 1 and 2, 4,096 tokens, causal (scaled_dot_product_attention
# takes no sliding window): their rate relative to the 128-wide rows (pase.hardware.attention_kernels).
_NARROW_ATTENTION = ((1, 64, 8, 4096, 64, 64), (1, 32, 4, 4096, 64, 64))
_MEMORY = ((8192, 4096), (16384, 8192), (8192, 12288))
_QUICK_MEMORY = ((8192, 4096), (16384, 8192))
_COLLECTIVE_MB = (1, 4, 16, 64, 256, 1024)
_QUICK_COLLECTIVE_MB = (4, 64, 512)
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
# The launch section (Timer's five ways): square products, a small copy, and the expert products of section 3b's
# mixture-of-experts rows as Transformer Engine's grouped linear layer issues them, a product per local expert:
# (what, tokens per expert, n, k, local experts), the tokens of one microbatch under balanced routing
# (published-measurements.md, section 3b; benchmarks/validate_today.py's rows).
_LAUNCH_SQUARES = (256, 1024, 2048, 4096)
_QUICK_LAUNCH_SQUARES = (256, 2048)
_LAUNCH_EXPERTS = (
    ("qwen3-30b-a3b fc1 (B200 row)", 2048, 1536, 2048, 16),
    ("qwen3-30b-a3b fc2 (B200 row)", 2048, 2048, 768, 16),
    ("qwen3-30b-a3b fc1 (H100 row)", 4096, 1536, 2048, 16),
    ("qwen3-235b-a22b fc1 (H100 row)", 4096, 3072, 4096, 4),
    ("deepseek-v3 fc1 (H100 row)", 4096, 4096, 7168, 4),
    ("deepseek-v3 fc2 (H100 row)", 4096, 7168, 2048, 4),
)
_QUICK_LAUNCH_EXPERTS = _LAUNCH_EXPERTS[:2]
_LAUNCH_CALLS = 20  # calls per timing of the back-to-back, held and graph ways


def _torch():
    """torch, or ``ClusterError`` saying how to get it."""
    try:
        import torch
    except ImportError:
        raise ClusterError("pase calibrate needs PyTorch with CUDA (pip install 'pase[torch]' with a CUDA build of "
                           "torch); it is not installed") from None
    return torch


def require_gpu():
    """torch, checked to see a CUDA GPU; ``ClusterError`` (one line) otherwise."""
    torch = _torch()
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise ClusterError("pase calibrate needs a CUDA GPU and sees none (torch.cuda.is_available() is False); "
                           "run it on the GPU machine to calibrate")
    return torch


def device_peaks(name: str, peak_tflops: float | None = None,
                 fp8_peak_tflops: float | None = None) -> tuple[float, float | None]:
    """The dense BF16 and FP8 peaks (FLOP/s) of GPU ``name``: the given ones, else :data:`KNOWN_PEAKS`'s.

    Raises ``ClusterError`` for an unknown GPU without ``peak_tflops``.
    """
    known = next(((bf16, fp8) for key, bf16, fp8 in KNOWN_PEAKS if key in name), None)
    if peak_tflops is None and known is None:
        raise ClusterError(f"pase does not know the {name}'s peak: give its dense BF16 tensor-core peak with "
                           "--peak-tflops (and --fp8-peak-tflops if it has FP8), from its datasheet")
    bf16 = peak_tflops * 1e12 if peak_tflops is not None else known[0]
    fp8 = fp8_peak_tflops * 1e12 if fp8_peak_tflops is not None else (known[1] if known else None)
    return bf16, fp8


class Timer:
    """Times a call ``fn()`` on the current CUDA stream, in seconds per call, the median of ``reps`` timings
    after ``warmup`` calls, four ways that part what the GPU spends from what the host does:

    * :meth:`alone`: CUDA events around one call on an idle GPU (how every section but ``launch`` is timed).
      The GPU waits for the host to issue the kernel and, for a kernel shorter than the host's work after
      issuing it, for the end event too, so it holds the host's time before the kernel plus the longer of
      the kernel and the host's time after it;
    * :meth:`gpu`: ``calls`` calls issued while a sleep kernel (``torch.cuda._sleep``) holds the GPU, the events
      around them: the GPU's time alone, the host's hidden as in a step that keeps the GPU's queue full;
    * :meth:`stream`: ``calls`` calls back to back from an idle GPU: an eager step's pace over a run of such
      calls, the slower of the host's issue and the GPU's work;
    * :meth:`host`: the host's time to issue a call (``clock``, seconds), the GPU held busy meanwhile;
    * :meth:`graph`: ``calls`` calls captured in a CUDA graph and replayed from an idle GPU (one launch).

    A hold that ends before the host has issued everything would let the host's time back in: each is checked
    (an event after the sleep must still be pending once the host is done) and doubled until it holds.
    """

    def __init__(self, torch, warmup: int, reps: int, clock: Callable[[], float] = time.perf_counter):
        self.torch, self.warmup, self.reps, self.clock = torch, warmup, reps, clock
        self._cycles_per_s: float | None = None
        self._hold_s = 2e-3

    def _event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def _warm(self, fn: Callable[[], object]) -> None:
        for _ in range(self.warmup):
            fn()
        self.torch.cuda.synchronize()

    def _elapsed_s(self, run: Callable[[], None]) -> float:
        """Seconds between CUDA events recorded before and after ``run()`` (its calls issued between them)."""
        start, end = self._event(), self._event()
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def alone(self, fn: Callable[[], object]) -> float:
        """One call on an idle GPU, CUDA events around it (the class docstring)."""
        self._warm(fn)
        return float(statistics.median(self._elapsed_s(fn) for _ in range(self.reps)))

    @property
    def cycles_per_s(self) -> float:
        """The sleep kernel's clock: two sleeps' difference in time over their difference in cycles, so that the
        host's time around each cancels."""
        if self._cycles_per_s is None:
            sleep = self.torch.cuda._sleep
            short, long = (self.alone(lambda c=c: sleep(c)) for c in (1_000_000, 3_000_000))
            if long <= short:
                raise ClusterError("pase calibrate: the GPU's sleep kernel did not take longer for more cycles; "
                                   "this GPU or driver cannot time kernels with the host hidden")
            self._cycles_per_s = 2_000_000 / (long - short)
        return self._cycles_per_s

    def _held(self, issue: Callable[[], object]) -> object:
        """``issue()``'s result with the GPU held by a sleep kernel while the host issues its calls, the hold
        doubled until it outlasts the host (at most a second); the GPU is synchronised before it returns."""
        while True:
            self.torch.cuda.synchronize()
            self.torch.cuda._sleep(int(self._hold_s * self.cycles_per_s))
            held = self._event()
            held.record()
            result = issue()
            pending = not held.query()
            self.torch.cuda.synchronize()
            if pending:
                return result
            if self._hold_s >= 1.0:
                raise ClusterError("pase calibrate: the host took over a second to issue the calls timed with the "
                                   "GPU held; the machine is too busy to time them")
            self._hold_s *= 2

    def gpu(self, fn: Callable[[], object], calls: int) -> float:
        """The GPU's time per call, the host's issue hidden behind a held GPU (the class docstring)."""
        self._warm(fn)

        def once() -> float:
            start, end = self._event(), self._event()

            def issue() -> None:
                start.record()
                for _ in range(calls):
                    fn()
                end.record()
            self._held(issue)  # the events are read once it has synchronised
            return start.elapsed_time(end) / 1e3 / calls
        return float(statistics.median(once() for _ in range(self.reps)))

    def stream(self, fn: Callable[[], object], calls: int) -> float:
        """Per call, ``calls`` calls back to back from an idle GPU (the class docstring)."""
        self._warm(fn)

        def run() -> None:
            for _ in range(calls):
                fn()
        return float(statistics.median(self._elapsed_s(run) / calls for _ in range(self.reps)))

    def host(self, fn: Callable[[], object], calls: int) -> float:
        """The host's seconds to issue one call, the GPU held busy (the class docstring)."""
        self._warm(fn)

        def issue() -> float:
            t0 = self.clock()
            for _ in range(calls):
                fn()
            return (self.clock() - t0) / calls
        return float(statistics.median(self._held(issue) for _ in range(self.reps)))

    def graph(self, fn: Callable[[], object], calls: int) -> float:
        """Per call, ``calls`` calls captured in one CUDA graph and replayed from an idle GPU; warmed on a side
        stream first, as capture requires."""
        cuda = self.torch.cuda
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):
            for _ in range(max(self.warmup, 1)):
                fn()
        cuda.current_stream().wait_stream(side)
        cuda.synchronize()
        g = cuda.CUDAGraph()
        with cuda.graph(g):
            for _ in range(calls):
                fn()
        return self.alone(g.replay) / calls


def _progress(say: Callable[[str], None], total: int):
    """A counter printing ``[i/total] what`` through ``say``."""
    done = [0]

    def step(what: str) -> None:
        done[0] += 1
        say(f"[{done[0]}/{total}] {what}")
    return step


def profile_kernels(quick: bool = False, say: Callable[[str], None] = print, has_fp8: bool = True) -> dict:
    """Time one GPU's kernels (the module docstring); returns the measurement sections."""
    torch = require_gpu()
    import torch.nn.functional as F

    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    time_s = Timer(torch, 3 if quick else 4, 7 if quick else 15).alone
    gemms = _QUICK_GEMMS if quick else tuple((s, s, s) for s in _SQUARES) + _LAYERS
    attention = (tuple((*shape, shape[-1]) for shape in (_QUICK_ATTENTION if quick else _ATTENTION)) + _MLA_ATTENTION
                 + _NARROW_ATTENTION)
    memory = _QUICK_MEMORY if quick else _MEMORY
    fp8 = has_fp8 and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    fp8_shapes = tuple((s, s, s) for s in ((1024, 4096, 8192) if quick else (1024, 2048, 4096, 8192, 16384)))
    step = _progress(say, len(gemms) + (len(fp8_shapes) if fp8 else 0) + 2 * len(attention) + len(memory))
    bf16 = torch.bfloat16
    out: dict = {}

    rows = []
    for m, n, k in gemms:
        step(f"bf16 product m={m} n={n} k={k}")
        x, w, dy = (torch.randn(a, b, device=device, dtype=bf16) for a, b in ((m, k), (n, k), (m, n)))
        rows.append({"m": m, "n": n, "k": k, "flops": 2.0 * m * n * k, "fwd_s": time_s(lambda: x @ w.t()),
                     "dgrad_s": time_s(lambda: dy @ w), "wgrad_s": time_s(lambda: dy.t() @ x)})
        del x, w, dy
    out["gemm_bf16"] = {"note": "y = x W^T with x (m,k), W (n,k): fwd_s; dx = dy W: dgrad_s; dW = dy^T x: wgrad_s; "
                                "bf16 (torch.matmul); flops = 2 m n k", "rows": rows}

    if fp8:
        rows = []
        one = torch.ones((), device=device, dtype=torch.float32)
        for m, n, k in fp8_shapes:
            step(f"fp8 product m={m} n={n} k={k}")
            a = torch.randn(m, k, device=device, dtype=bf16).to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device=device, dtype=bf16).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
            try:
                rows.append({"m": m, "n": n, "k": k, "flops": 2.0 * m * n * k,
                             "s": time_s(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=bf16))})
            except (RuntimeError, TypeError) as exc:  # no FP8 tensor cores (before Ada/Hopper) or an older torch
                say(f"  FP8 products not available here ({str(exc).splitlines()[0][:120]}); skipped")
                rows = []
                break
        if rows:
            out["gemm_fp8"] = {"note": "torch._scaled_mm, e4m3 x e4m3 with per-tensor scales, bf16 out; "
                                       "flops = 2 m n k", "rows": rows}

    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        for b, hq, hkv, s, d, dv in attention:
            step(f"attention ({name}) b={b} hq={hq} hkv={hkv} s={s} d={d}" + (f" dv={dv}" if dv != d else ""))
            q = torch.randn(b, hq, s, d, device=device, dtype=bf16, requires_grad=True)
            k = torch.randn(b, hkv, s, d, device=device, dtype=bf16, requires_grad=True)
            v = torch.randn(b, hkv, s, dv, device=device, dtype=bf16, requires_grad=True)
            gqa = {"enable_gqa": True} if hkv != hq else {}
            dout = torch.randn(b, hq, s, dv, device=device, dtype=bf16)

            def forward():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

            def forward_backward():
                forward().backward(dout)

            try:
                with sdpa_kernel(backend):
                    with torch.no_grad():
                        fwd = time_s(forward)
                    both = time_s(forward_backward)
            except RuntimeError as exc:  # the backend does not run this shape (or at all) here
                say(f"  {name} attention not available for this shape ({str(exc).splitlines()[0][:120]}); skipped")
                continue
            finally:
                del q, k, v, dout
            rows.append({"backend": name, "b": b, "hq": hq, "hkv": hkv, "s": s, "d": d,
                         **({"dv": dv} if dv != d else {}), "fwd_flops": 2.0 * b * hq * s * s * (d + dv) / 2,
                         "fwd_s": fwd, "fwd_bwd_s": both})
    out["attention"] = {"note": "torch.nn.functional.scaled_dot_product_attention, causal, bf16, q (b, hq, s, d), k "
                                "and v (b, hkv, s, d; v's dv wide where given, MLA's shapes), each shape on torch's "
                                "flash and cuDNN backends (backend); fwd_flops = 2 b hq s^2 (d + dv) / 2 (causal "
                                "half)", "rows": rows}

    rows = []
    for m, h in memory:
        step(f"memory-bound kernels {m} x {h}")
        x, y, z = (torch.randn(m, h, device=device, dtype=bf16) for _ in range(3))
        weight = torch.ones(h, device=device, dtype=bf16)
        size = m * h * 2
        # Forward plus backward computes both gradients, the input's and the weight's, as training does.
        xg, wg = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)

        def norm_fwd_bwd():
            F.rms_norm(xg, (h,), wg).backward(y)

        rows += [{"kind": "copy", "m": m, "h": h, "bytes": 2 * size, "s": time_s(lambda: z.copy_(x))},
                 {"kind": "add", "m": m, "h": h, "bytes": 3 * size, "s": time_s(lambda: torch.add(x, y, out=z))},
                 {"kind": "rmsnorm_fwd", "m": m, "h": h, "bytes": 2 * size,
                  "s": time_s(lambda: F.rms_norm(x, (h,), weight))},
                 {"kind": "rmsnorm_fwd_bwd", "m": m, "h": h, "bytes": 5 * size, "s": time_s(norm_fwd_bwd)}]
        del x, y, z, xg, wg
    out["memory_bound"] = {"note": "bytes is what the kernel must read and write at least (bf16): copy 2x, add 3x "
                                   "(three distinct tensors), RMSNorm forward 2x and forward+backward 5x the (m, h) "
                                   "tensor's bytes", "rows": rows}
    return out


def _products(torch, device, m: int, n: int, k: int, count: int, fp8: bool) -> Callable[[], None]:
    """A call issuing ``count`` products ``y = x W^T`` of ``x (m, k)`` and ``W (n, k)``, each on its own operands
    (FP8 e4m3 with per-tensor scales and BF16 out where ``fp8``, else BF16), one kernel each."""
    bf16 = torch.bfloat16
    if fp8:
        one = torch.ones((), device=device, dtype=torch.float32)
        xs = [torch.randn(m, k, device=device, dtype=bf16).to(torch.float8_e4m3fn) for _ in range(count)]
        # The weight column-major, as cuBLASLt wants it.
        ws = [torch.randn(n, k, device=device, dtype=bf16).to(torch.float8_e4m3fn).t() for _ in range(count)]

        def call() -> None:
            for x, w in zip(xs, ws):
                torch._scaled_mm(x, w, scale_a=one, scale_b=one, out_dtype=bf16)
        return call
    xs = [torch.randn(m, k, device=device, dtype=bf16) for _ in range(count)]
    ws = [torch.randn(n, k, device=device, dtype=bf16) for _ in range(count)]

    def call() -> None:
        for x, w in zip(xs, ws):
            x @ w.t()
    return call


def profile_launch(torch, device, timer: Timer, quick: bool = False, fp8: bool = True,
                   say: Callable[[str], None] = print) -> dict:
    """The ``launch`` section: each case timed the five ways of :class:`Timer`, seconds per call.

    Cases: square BF16 products (and FP8 where ``fp8``), a 4 MB copy, and the expert products of section 3b's
    MoE rows as a loop over the local experts (FP8 where ``fp8``). A graph capture the GPU or torch refuses
    leaves ``graph_s`` out of that row and says why.
    """
    calls = _LAUNCH_CALLS
    squares = _QUICK_LAUNCH_SQUARES if quick else _LAUNCH_SQUARES
    experts = _QUICK_LAUNCH_EXPERTS if quick else _LAUNCH_EXPERTS
    cases = [(f"bf16 product {s}^3", "bf16", (s, s, s, 1, False)) for s in squares]
    if fp8:
        cases += [(f"fp8 product {s}^3", "fp8", (s, s, s, 1, True)) for s in squares if s >= 1024]
    cases.append(("bf16 copy 1024 x 1024", "bf16", None))
    dtype = "fp8" if fp8 else "bf16"
    cases += [(f"{what}: {e} experts, {m} tokens each", dtype, (m, n, k, e, fp8)) for what, m, n, k, e in experts]
    step = _progress(say, len(cases))
    rows = []
    for what, kind, shape in cases:
        step(f"launch: {what}")
        if shape is None:
            src, dst = (torch.randn(1024, 1024, device=device, dtype=torch.bfloat16) for _ in range(2))
            row = {"case": what, "dtype": kind, "kernels": 1, "flops": 0.0, "bytes": 2.0 * src.numel() * 2}

            def fn() -> None:
                dst.copy_(src)
        else:
            m, n, k, count, _ = shape
            row = {"case": what, "dtype": kind, "kernels": count, "m": m, "n": n, "k": k,
                   "flops": 2.0 * m * n * k * count}
            fn = _products(torch, device, *shape)
        row.update(alone_s=timer.alone(fn), stream_s=timer.stream(fn, calls), gpu_s=timer.gpu(fn, calls),
                   host_s=timer.host(fn, calls))
        try:
            row["graph_s"] = timer.graph(fn, calls)
        except RuntimeError as exc:  # a capture this torch or GPU refuses: the row keeps its other four ways
            say(f"  no CUDA graph for {what} ({str(exc).splitlines()[0][:120]})")
        rows.append(row)
        del fn
    return {"note": "seconds per call (a call: the case's kernels, one per local expert for the expert loops), "
                    "timed five ways (pase.calibrate.profile.Timer): alone_s, CUDA events around one call on an "
                    "idle GPU, as the other sections; gpu_s, calls issued while a sleep kernel holds the GPU (the "
                    "GPU's time, the host's hidden); stream_s, calls back to back from an idle GPU (an eager "
                    "step's pace); host_s, the host's time to issue a call; graph_s, calls replayed from a CUDA "
                    "graph. m, n, k: each product's; flops: per call, 2 m n k per product; bytes: a copy's, read and "
                    "written", "rows": rows}


def _collective_rows(torch, dist, group, ranks: int, scope: str, device, quick: bool, say) -> list[dict]:
    """Time the four collectives among ``group`` (``ranks`` ranks) over message sizes; rows for ``scope``."""
    time_s = Timer(torch, 3 if quick else 5, 7 if quick else 15).alone
    rows = []
    for mb in (_QUICK_COLLECTIVE_MB if quick else _COLLECTIVE_MB):
        elements = mb * 2 ** 20 // 2 // ranks * ranks  # bf16, a multiple of the ranks
        full = torch.empty(elements, device=device, dtype=torch.bfloat16)
        part = torch.empty(elements // ranks, device=device, dtype=torch.bfloat16)
        other = torch.empty_like(full)
        ops = {"all_reduce": lambda: dist.all_reduce(full, group=group),
               "all_gather": lambda: dist.all_gather_into_tensor(full, part, group=group),
               "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full, group=group),
               "all_to_all": lambda: dist.all_to_all_single(other, full, group=group)}
        for op in _COLLECTIVES:
            say(f"{scope} {op} of {mb} MB among {ranks} GPUs")
            rows.append({"op": op, "ranks": ranks, "scope": scope, "bytes": float(elements * 2),
                         "s": time_s(ops[op])})
        del full, part, other
    return rows


def profile_collectives(quick: bool = False, say: Callable[[str], None] = print) -> list[dict]:
    """NCCL collectives under torchrun (``WORLD_SIZE`` set): intra-node among each node's GPUs, inter-node among
    one GPU of each node; rank 0's rows (every rank returns its own)."""
    torch = require_gpu()
    import torch.distributed as dist

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ.get("RANK", 0))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", torch.cuda.device_count()))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=device)
    rows = []
    nodes = world // local
    # Every rank creates every group, in the same order, as torch.distributed requires.
    node_groups = [dist.new_group(list(range(n * local, (n + 1) * local))) for n in range(nodes)]
    rail_groups = [dist.new_group([n * local + i for n in range(nodes)]) for i in range(local)]
    speak = say if rank == 0 else (lambda _: None)
    if local > 1:
        rows += _collective_rows(torch, dist, node_groups[rank // local], local, "intra", device, quick, speak)
    if nodes > 1:
        rows += _collective_rows(torch, dist, rail_groups[local_rank], nodes, "inter", device, quick, speak)
    dist.barrier()
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(rank: int, world: int, port: int, quick: bool, out_path: str) -> None:
    """One process of the single-node collective run :func:`measure` spawns (rank 0 writes the rows)."""
    os.environ.update({"WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    rows = profile_collectives(quick, say=lambda line: print(line, file=sys.stderr, flush=True))
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    import torch.distributed as dist
    dist.destroy_process_group()


def _environment(torch) -> dict:
    """Driver and library versions, as words (empty where unknown)."""
    driver = ""
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    nccl = ""
    try:
        nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001 - a build without NCCL: leave it unnamed
        pass
    return {"driver": driver, "torch": torch.__version__, "cuda": torch.version.cuda or "", "nccl": nccl,
            "cudnn": str(torch.backends.cudnn.version() or "")}


def measure(quick: bool = False, say: Callable[[str], None] = print) -> tuple[dict, dict]:
    """Everything ``pase calibrate`` times on this machine: ``(measurements, about)``, ``about`` holding
    ``device``, ``date``, ``memory_bytes``, ``environment`` and ``is_writer`` (False on every torchrun rank
    but 0, which alone writes the file).

    Under torchrun every rank takes part in the collectives; rank 0 alone times the kernels. Without torchrun
    and with two or more GPUs visible, the collectives among them run in processes spawned here.
    """
    torch = require_gpu()
    rank = int(os.environ.get("RANK", 0))
    props = torch.cuda.get_device_properties(int(os.environ.get("LOCAL_RANK", 0)))
    about = {"device": props.name, "date": datetime.date.today().isoformat(),
             "memory_bytes": float(props.total_memory), "environment": _environment(torch), "is_writer": rank == 0}
    measurements: dict = {"what": f"Kernel timings on one {props.name} by pase calibrate{' --quick' if quick else ''}: "
                                  "the median of CUDA-event timings after warm-ups, each kernel alone on random "
                                  "data. Seconds per call.",
                          "device": props.name, "torch": torch.__version__, "sms": props.multi_processor_count}
    if rank == 0:
        has_fp8 = props.major * 10 + props.minor >= 89
        measurements.update(profile_kernels(quick, say, has_fp8=has_fp8))
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        measurements["launch"] = profile_launch(torch, device, Timer(torch, 3, 7 if quick else 11), quick,
                                                has_fp8 and "gemm_fp8" in measurements, say)
    rows: list[dict] = []
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        rows = profile_collectives(quick, say)
    elif torch.cuda.device_count() > 1:
        import torch.multiprocessing as mp

        world = torch.cuda.device_count()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "collectives.json")
            mp.spawn(_spawned, args=(world, _free_port(), quick, path), nprocs=world, join=True)
            with open(path) as f:
                rows = json.load(f)
    if rows:
        measurements["collectives"] = {"note": "torch.distributed (NCCL), bf16; bytes: the full (gathered, "
                                               "reduced or exchanged) message", "rows": rows}
    return measurements, about
