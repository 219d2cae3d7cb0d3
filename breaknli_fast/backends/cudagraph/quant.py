"""Quantised linear layers of the cudagraph engine (precisions ``fp8`` and ``int8``): weights quantised per output
channel, activations per row, so a row's answer never depends on the other rows of its batch.

The scheme (one code path for the scales, whatever computes the product):

* **Weights** ``W`` ``(out, in)``: one fp32 scale per output channel, ``s_w = max|W[o, :]| / Q`` (``Q`` = 448 for
  fp8 e4m3, the largest finite e4m3 value; 127 for int8), and ``W_q = quantise(W / s_w)``.
* **Activations** ``X`` ``(rows, in)``: one fp32 scale per row, computed at run time from that row alone,
  ``s_x = max|X[r, :]| / Q``, and ``X_q = quantise(X / s_x)``. ``quantise`` clamps to ``[-Q, Q]`` first and then
  casts (fp8: round to nearest e4m3; int8: round half to even): a value cannot leave the format's range, so an
  activation far beyond fp16's range (T5's feed-forward, where fp16 overflows to inf) is represented at its row's
  scale, never as inf or NaN (e4m3 has no inf, and what torch's cast makes of a value past 448 -- 448 or NaN --
  has differed between versions and devices: the clamp makes it one rule). An all-zero row gets the smallest
  normal fp32 scale (its product is 0). A row holding inf or NaN gives a NaN scale and NaN outputs, which the
  engines refuse as they refuse non-finite scores.
* **Product** ``Y = (X_q W_q^T) * s_x s_w^T`` accumulated exactly (int8: int32; fp8 products of 4-bit significands
  summed in fp32 on the GPU's tensor cores), scaled in fp32, returned at the compute dtype (bf16), the bias added
  after. Norms, softmax, attention, the residual stream's statistics and the logits stay as at bf16 (fp32 where
  the bf16 engine keeps fp32).

Kernels (:attr:`QuantLinear.kernel`): on CUDA ``torch._scaled_mm`` (fp8, row-wise scales, bf16 output) and
``torch._int_mm`` (int8, int32 output; rows padded to 17 where fewer: its minimum). In the classifier both ran on a
lent H200 (``benchmarks/results/gpu-check-h200-cudagraph-steps.json``: labels as torch fp32's on 99.8 % of 512
random-weight roberta-large pairs, fp8 on 99.0 % of the 2,724 mini-nli pairs; a pair alone against in one call within
4.8e-7, not to the bit; and slower than bf16: 0.42x / 0.22x at 512 x 128; the activations are quantised by separate
elementwise kernels before each product, and which part costs what was not profiled); in the generator they are **not verified on a GPU**. Elsewhere, or where a layer's sizes do not fit those kernels (multiples of 16 for fp8, of 8 for
int8), ``emulated``: the same quantised values multiplied exactly in float64 (e4m3 values are multiples of 2^-9 and
at most 448, so their products and sums up to 2^53 are exact integers of 2^-18), so the CPU's result does not
depend on the summation order nor on the batch: the reference the GPU kernels are compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

QMAX = {"fp8": 448.0, "int8": 127.0}
QDTYPE = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}
TINY = float(torch.finfo(torch.float32).tiny)
MIN_INT_MM_ROWS = 17  # torch._int_mm on CUDA wants more than 16 rows
FP8_CAPABILITY = (8, 9)  # fp8 tensor cores: Ada / Hopper and later
INT8_CAPABILITY = (8, 0)  # torch._int_mm's int8 tensor-core path: Ampere and later


def precision_gate(precision: str, device: str) -> str | None:
    """Why this machine cannot run ``precision`` on ``device`` (one line), or None (the backend declaration's
    ``gate``, asked before anything loads)."""
    if precision not in QMAX or not str(device).startswith("cuda"):
        return None
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to torch"
    index = torch.device(device).index or 0
    cap = tuple(torch.cuda.get_device_capability(index))
    need = FP8_CAPABILITY if precision == "fp8" else INT8_CAPABILITY
    if cap < need:
        return (f"{precision} needs a GPU of compute capability {need[0]}.{need[1]} or later; "
                f"{torch.cuda.get_device_name(index)} has {cap[0]}.{cap[1]}")
    return None


def scales(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """fp32 scales of each row of ``x`` (its last dimension reduced): ``max|row| / Q``, at least the smallest
    normal fp32 number (an all-zero row)."""
    return (x.detach().abs().amax(-1, keepdim=True).float() / QMAX[fmt]).clamp_min(TINY)


def quantise(x: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x / scale`` clamped to the format's range and cast (fp8 e4m3: round to nearest; int8: half to even)."""
    q = (x.float() / scale).clamp(-QMAX[fmt], QMAX[fmt])
    if fmt == "int8":
        q = torch.round(q)
    return q.to(QDTYPE[fmt])


def exact_product(xq: torch.Tensor, wq: torch.Tensor, fmt: str) -> torch.Tensor:
    """``xq @ wq^T`` of quantised values, exact, as float64: int8 values as they are, e4m3 values as integers of
    2^-9 (then the result divided by 2^18)."""
    if fmt == "int8":
        return xq.double() @ wq.double().t()
    return ((xq.double() * 512.0) @ (wq.double() * 512.0).t()) / 262144.0


@dataclass
class QuantLinear:
    """A linear layer ``y = x W^T + b`` with ``W`` quantised per output channel and ``x`` per row at run time (module
    notes). ``kernel``: ``scaled_mm``, ``int_mm`` or ``emulated``; ``out_dtype``: the compute dtype."""

    fmt: str
    wq: torch.Tensor  # (out, in) fp8 / int8
    w_scale: torch.Tensor  # (1, out) fp32
    bias: torch.Tensor | None
    out_dtype: torch.dtype
    kernel: str

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None, fmt: str, out_dtype: torch.dtype,
           device: torch.device | str, kernel: str | None = None) -> "QuantLinear":
        """``weight`` ``(out, in)`` quantised on ``device``; ``kernel`` None: the device's (:func:`pick_kernel`)."""
        device = torch.device(device)
        w = weight.detach().to(device=device, dtype=torch.float32)
        s = scales(w, fmt)  # (out, 1)
        wq = quantise(w, s, fmt).contiguous()
        kernel = kernel or pick_kernel(fmt, device, tuple(w.shape))
        b = None if bias is None else bias.detach().to(device=device, dtype=out_dtype).contiguous()
        return cls(fmt, wq, s.t().contiguous(), b, out_dtype, kernel)

    @property
    def out_features(self) -> int:
        return int(self.wq.shape[0])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])
        sx = scales(x2, self.fmt)  # (rows, 1)
        xq = quantise(x2, sx, self.fmt)
        if self.kernel == "scaled_mm":
            y = torch._scaled_mm(xq, self.wq.t(), scale_a=sx, scale_b=self.w_scale, out_dtype=torch.bfloat16)
            y = y.to(self.out_dtype)
        elif self.kernel == "int_mm":
            rows = x2.shape[0]
            if rows < MIN_INT_MM_ROWS:
                xq = torch.cat([xq, xq.new_zeros((MIN_INT_MM_ROWS - rows, xq.shape[1]))])
            y = (torch._int_mm(xq, self.wq.t())[:rows].float() * sx * self.w_scale).to(self.out_dtype)
        else:
            y = exact_product(xq, self.wq, self.fmt).float() * sx * self.w_scale
            if self.fmt == "fp8":  # as torch._scaled_mm returns it: rounded to bf16
                y = y.to(torch.bfloat16)
            y = y.to(self.out_dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)


def pick_kernel(fmt: str, device: torch.device, shape: Sequence[int]) -> str:
    """The kernel a layer of ``shape`` ``(out, in)`` runs on ``device``: the GPU's where its sizes fit it, else
    ``emulated``."""
    if device.type != "cuda":
        return "emulated"
    out, inp = int(shape[0]), int(shape[1])
    if fmt == "fp8":
        return "scaled_mm" if out % 16 == 0 and inp % 16 == 0 else "emulated"
    return "int_mm" if out % 8 == 0 and inp % 8 == 0 else "emulated"


def linear(x: torch.Tensor, weight: "torch.Tensor | QuantLinear", bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` of a plain weight, or the quantised layer's product (its own bias)."""
    if isinstance(weight, QuantLinear):
        return weight(x)
    return torch.nn.functional.linear(x, weight, bias)


def kernels_used(layers: Sequence[Any]) -> dict[str, int]:
    """How many of ``layers`` run each kernel (the engine's details)."""
    out: dict[str, int] = {}
    for q in layers:
        if isinstance(q, QuantLinear):
            out[q.kernel] = out.get(q.kernel, 0) + 1
    return out
