"""FP8 (e4m3) linear layers for the Wan transformer blocks: weights stored in fp8, activations quantized per token.

Why: on Hopper-class GPUs an fp8 GEMM has about twice the bf16 throughput and the weights take half the
memory. The recipe is the usual row-wise one:

* weight (N, K): one float32 scale per output channel, ``scale_w[n] = max_k |W[n, k]| / 448``, and
  ``W_q = fp8(W / scale_w)`` computed once from the loaded weights;
* activation (M, K): one float32 scale per token (row), computed on every call the same way;
* ``y = (x_q · scale_x) @ (W_q · scale_w)ᵀ + b``.

On CUDA with compute capability ≥ 8.9 this is one ``torch._scaled_mm`` (fp32 accumulation, bf16 output,
the scales and the bias applied in its epilogue). Anywhere else the same formula runs as an explicit
emulation: dequantize to fp32 and matmul. The emulation is the reference the CUDA path is tested
against; it is slower than bf16, so picking it logs one warning line per device instead of happening
silently.

e4m3 keeps 3 mantissa bits: rounding moves each element by at most 2^-4 of its magnitude (2^-10 of the
row scale for the few elements small enough to be subnormal), so a linear layer's output typically
moves by 1–3 % relative. That is why only the transformer blocks are quantized (see
`quantize_linears_fp8`).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

log = logging.getLogger(__name__)

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
_MIN_AMAX = FP8_MAX / torch.finfo(torch.float32).max  # the smallest row max for which 448 / amax is finite
ALIGN = 16  # torch._scaled_mm needs K and N to be multiples of 16
DEFAULT_SCOPE = "blocks."

# (device type, index) -> can torch._scaled_mm with row-wise scales run there; filled on first use
_SCALED_MM_OK: dict[tuple[str, int | None], bool] = {}


def quantize_rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize each row (last dim) of `t` to e4m3 with its own float32 scale.

    Returns ``(q, scale)`` with ``q`` (..., K) fp8 and ``scale`` (..., 1) float32 such that
    ``q.float() * scale ≈ t``. The largest magnitude of each row maps to ±448 exactly. Two kernels on
    a GPU: one max-abs reduction, and one multiply that writes fp8 directly (the product is computed
    in fp32 and cast on store), so the activation is read twice and written once at one byte.
    """
    amax = torch.linalg.vector_norm(t, ord=float("inf"), dim=-1, keepdim=True).float()  # exact in any dtype
    amax = amax.clamp_min(_MIN_AMAX)  # keeps 448 / amax finite: an all-zero row quantizes to zeros, not NaN
    q = torch.empty(t.shape, dtype=FP8_DTYPE, device=t.device)
    torch.mul(t, FP8_MAX / amax, out=q)  # |t| · 448 / amax ≤ 448 (1 + 2^-23): rounds to ±448, never past it
    return q, amax / FP8_MAX


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp8 values times their float32 scales, in float32 (the emulation's first step)."""
    return q.float() * scale


def scaled_mm_supported(device: torch.device | str) -> bool:
    """Whether `torch._scaled_mm` with row-wise scales runs on `device`; decided once per device.

    Needs CUDA with compute capability ≥ 8.9 (Ada, Hopper, Blackwell) and a torch build whose kernel
    accepts row-wise scales, which a 32×32 probe checks. When the answer is no, one warning line says
    that the emulation is used.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (device.type, device.index)
    if key in _SCALED_MM_OK:
        return _SCALED_MM_OK[key]
    reason = None
    if device.type != "cuda":
        reason = f"torch._scaled_mm needs a CUDA GPU, not {device.type}"
    elif torch.cuda.get_device_capability(device) < (8, 9):
        cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
        reason = f"{torch.cuda.get_device_name(device)} has compute capability {cap}, fp8 GEMMs need 8.9 or newer"
    else:
        try:
            _probe_scaled_mm(device)
        except RuntimeError as exc:
            reason = f"torch._scaled_mm with row-wise scales failed ({str(exc).splitlines()[0]})"
    if reason is not None:
        log.warning(
            "fp8 linears on %s: %s; using the emulation (dequantize to fp32 + matmul), which is slower "
            "than bf16 and only meant as a reference",
            device,
            reason,
        )
    _SCALED_MM_OK[key] = reason is None
    return reason is None


def _probe_scaled_mm(device: torch.device) -> None:
    a = torch.ones(32, 32, device=device).to(FP8_DTYPE)
    b = torch.ones(32, 32, device=device).to(FP8_DTYPE)
    ones_a = torch.ones(32, 1, device=device)
    ones_b = torch.ones(1, 32, device=device)
    out = torch._scaled_mm(
        a,
        b.t(),
        scale_a=ones_a,
        scale_b=ones_b,
        bias=torch.zeros(32, device=device, dtype=torch.bfloat16),
        out_dtype=torch.bfloat16,
    )
    if not torch.all(out == 32):
        raise RuntimeError(f"wrong result from a 32x32 probe: {out.flatten()[:4].tolist()}")


class FP8Linear(nn.Module):
    """A linear layer whose weight is stored in e4m3 with one float32 scale per output channel.

    Buffers: ``weight`` (N, K) float8_e4m3fn (a parameter without gradient, row-major, so ``weight.t()``
    is the column-major operand `_scaled_mm` wants), ``weight_scale`` (1, N) float32 (the ``scale_b``
    layout), ``bias`` (N,) in the model's compute dtype or None. The output has the input's dtype.
    `.to(dtype)` / `.half()` leave the fp8 weight and its scales alone; only the device follows.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(
            torch.zeros(out_features, in_features, device=device, dtype=FP8_DTYPE), requires_grad=False
        )
        self.register_buffer("weight_scale", torch.ones(1, out_features, device=device, dtype=torch.float32))
        self.bias = (
            nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype), requires_grad=False) if bias else None
        )

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> FP8Linear:
        """Quantize a loaded `nn.Linear` (any float dtype; the scales are computed in float32)."""
        w = linear.weight.detach()
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device=w.device, dtype=w.dtype)
        q, scale = quantize_rowwise(w.float())
        new.weight.data.copy_(q)
        new.weight_scale.copy_(scale.t())
        if linear.bias is not None:
            new.bias.data.copy_(linear.bias.detach())
        return new

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, e4m3"

    def dequantized_weight(self) -> torch.Tensor:
        """(N, K) float32: what the fp8 weight stands for."""
        return dequantize(self.weight, self.weight_scale.t())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if scaled_mm_supported(x.device):  # False (and one warning line per device) off CUDA ≥ 8.9
            return self.forward_scaled_mm(x)
        return self.forward_emulated(x)

    def forward_emulated(self, x: torch.Tensor) -> torch.Tensor:
        """The reference: quantize the tokens, dequantize both operands to fp32, matmul, add the bias."""
        xq, sx = quantize_rowwise(x.reshape(-1, self.in_features))
        y = dequantize(xq, sx) @ self.dequantized_weight().t()
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def forward_scaled_mm(self, x: torch.Tensor) -> torch.Tensor:
        """One fp8 GEMM: fp32 accumulation, scales and bias applied in the epilogue, bf16 out."""
        xq, sx = quantize_rowwise(x.reshape(-1, self.in_features))  # (M, K) row-major, (M, 1) contiguous
        bias = None if self.bias is None else self.bias.to(torch.bfloat16)  # bf16 output needs a bf16 bias
        y = torch._scaled_mm(
            xq, self.weight.t(), scale_a=sx, scale_b=self.weight_scale, bias=bias, out_dtype=torch.bfloat16
        )
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> FP8Linear:
        """Follow device moves, but keep the fp8 weight and float32 scales through dtype casts.

        `model.to(torch.bfloat16)` would otherwise turn the weight into bf16 (a silent 2× memory) and
        round the scales to bf16 (a silent accuracy loss). The originals are re-taken, so this is exact.
        """
        weight, scale = self.weight.detach(), self.weight_scale
        super()._apply(fn, recurse)
        if self.weight.dtype != FP8_DTYPE:
            self.weight = nn.Parameter(weight.to(self.weight.device), requires_grad=False)
        if self.weight_scale.dtype != torch.float32:
            self.weight_scale = scale.to(self.weight_scale.device)
        return self


class FP8WeightLinear(FP8Linear):
    """Weight-only fp8: the weight stays in e4m3 (half the bytes of bf16), each call dequantizes it.

    Why: a user's fp8-scaled checkpoint (ComfyUI `*_fp8_e4m3fn_scaled.safetensors`) is already e4m3;
    dequantizing it at load doubles its memory (a 14B model: 28 GB instead of 14). Here the stored
    values and scales are kept as they are and `weight.float() * scale` is cast to the input's dtype on
    each call, the same arithmetic as dequantizing at load, so the outputs are bitwise those of the
    dequantized model; the GEMM itself runs in the compute dtype (no activation quantization, unlike
    `FP8Linear`). The cost is one dequantization pass over the weight per call.
    """

    @classmethod
    def from_stored(
        cls, weight: torch.Tensor, scale: torch.Tensor | None, bias: torch.Tensor | None
    ) -> FP8WeightLinear:
        """Wrap stored e4m3 values and their scale (per tensor, or one per output row) as they are."""
        if weight.dtype != FP8_DTYPE:
            raise ValueError(f"expected a float8_e4m3fn weight, got {weight.dtype}")
        n, k = weight.shape
        new = cls(k, n, bias=bias is not None, device=weight.device, dtype=bias.dtype if bias is not None else None)
        new.weight = nn.Parameter(weight, requires_grad=False)
        scale = torch.ones((), device=weight.device) if scale is None else scale.float()
        new.weight_scale = scale.reshape(1, -1).expand(1, n).contiguous() if scale.numel() in (1, n) else None
        if new.weight_scale is None:
            raise ValueError(f"a weight scale must have 1 or {n} values, got {scale.numel()}")
        if bias is not None:
            new.bias = nn.Parameter(bias, requires_grad=False)
        return new

    def extra_repr(self) -> str:
        return super().extra_repr() + ", weight-only (dequantized per call)"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.dequantized_weight().to(x.dtype)
        return nn.functional.linear(x, w, None if self.bias is None else self.bias.to(x.dtype))


@dataclass
class FP8Report:
    """What `quantize_linears_fp8` did: qualified names of the swapped layers, and the kept ones with why."""

    quantized: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    bytes_saved: int = 0  # weight memory freed (the bf16/fp32 weights minus the fp8 weights and their scales)


def quantize_linears_fp8(
    model: nn.Module, skip: Iterable[str] = (), scope: str = DEFAULT_SCOPE, weight_only: bool = False
) -> FP8Report:
    """Swap the `nn.Linear` layers of the transformer blocks for `FP8Linear`, in place.

    Quantized: every linear under `scope` ("blocks." = self-attention q/k/v/o, cross-attention q/k/v/o,
    FFN in and out), i.e. >95 % of the transformer's FLOPs and weights. Kept in the compute dtype: the
    patch, text, time (and action) embeddings, the time projection, the output head, all norms and the
    modulation tables. Why: they are a few percent of the work (they run on one row per frame, or once
    per prompt), while an error there is not local: the time projection modulates every block, the
    embeddings feed every block and the head writes the flow itself. That is the usual fp8 recipe
    (first and last layers and embeddings in high precision).

    Args:
        model: a `CausalWanTransformer` (any module whose block linears live under `scope`), weights loaded.
        skip: `fnmatch` patterns of qualified names to keep unquantized (e.g. ``"blocks.0.*"``).
        scope: prefix of the qualified names that are candidates.
        weight_only: `FP8WeightLinear` (e4m3 storage, compute-dtype GEMM) instead of `FP8Linear` (fp8 GEMM).
    Layers whose in/out features are not multiples of 16 (a `_scaled_mm` requirement) are kept, with a
    log line, so that CPU and GPU quantize the same layers. Logs the emulation warning once when the
    model's device cannot run fp8 GEMMs.
    """
    patterns = tuple(skip)
    report = FP8Report()
    targets: list[tuple[str, nn.Linear]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or not name.startswith(scope):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            report.kept[name] = "skipped by pattern"
        elif module.in_features % ALIGN or module.out_features % ALIGN:
            report.kept[name] = f"{module.in_features}→{module.out_features} features are not multiples of {ALIGN}"
            log.info("fp8: keeping %s unquantized (%s)", name, report.kept[name])
        else:
            targets.append((name, module))
    devices = set()
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        new = (FP8WeightLinear if weight_only else FP8Linear).from_linear(linear)
        report.bytes_saved += linear.weight.nbytes - new.weight.nbytes - new.weight_scale.nbytes
        setattr(parent, child, new)
        report.quantized.append(name)
        devices.add(linear.weight.device)
    for device in devices:
        if not weight_only:  # weight-only layers run a compute-dtype GEMM: no fp8 kernel is needed
            scaled_mm_supported(device)
    log.info(
        "fp8: %d linear layers quantized to e4m3 (%.1f MiB of weights saved), %d kept",
        len(report.quantized),
        report.bytes_saved / 2**20,
        len(report.kept),
    )
    return report


def count_fp8_linears(model: nn.Module, weight_only: bool | None = None) -> int:
    """Number of fp8 layers in `model` (0 when fp8 is off); weight_only=True/False counts one kind only."""
    return sum(
        isinstance(m, FP8Linear) and (weight_only is None or isinstance(m, FP8WeightLinear) == weight_only)
        for m in model.modules()
    )
