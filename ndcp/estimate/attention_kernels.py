"""Which fused attention kernel runs, and at what fraction of peak (docs/formulas.md §3.3).

`RunSpec.attention_kernel` names the kernel; `fused` is the trainer's own choice, priced at the device's
`flash_forward_efficiency` / `flash_backward_efficiency` (Megatron-Core + Transformer Engine: cuDNN on Hopper,
FlashAttention-2 on Ampere; unchanged by this module). The others are priced from published kernel benchmarks of
their GPU generation (`DeviceSpec.architecture`), in TFLOP/s as the papers count them: forward `4·s²·d·heads`,
halved under the causal mask, backward 2.5 × the forward (FlashAttention-3 §4.1; ndcp's FLASH_BACKWARD_RATIO), so a
figure over the benchmark GPU's dense peak is the fraction of peak ndcp charges the core's FLOPs at. One shape for
every kernel: head dim 128, causal, 4k tokens (of the plotted 512-16k; at 4k every kernel is within 7 % of its 16k
figure).

- Hopper (H100 SXM5, 989.4 TFLOP/s BF16 dense): Shah et al. 2024, "FlashAttention-3" (arXiv 2407.08608) §4.1,
  Figure 5 (forward, FP16/BF16, causal, head dim 128) and Figure 6 (backward, head dim 128), at 4k: FlashAttention-2
  319 / 310, cuDNN 518 / 499, FlashAttention-3 579 / 542.
- Ampere (A100, 312 TFLOP/s): Dao 2023, "FlashAttention-2" (arXiv 2307.08691) §4.1: FlashAttention-2 forward "up to
  73 %", backward "up to 63 %" of peak (the device preset's fused figures).
- triton: FlashAttention in Triton as llm-foundry runs it (`attn_impl: triton`: flash_attn_triton.py on
  triton-pre-mlir, Triton 2.0.0.dev20221202, mma.sync code with no wgmma/TMA, the same Ampere-style instructions as
  FlashAttention-2). Dao 2023 §4.1 measures it on A100 only: FlashAttention-2 is "1.3-2.5x faster" in forward +
  backward; TRITON_SLOWDOWN 1.8, the geometric middle, divides FlashAttention-2's figure on every generation. On
  Hopper that is 319 / 1.8 = 177 forward, 310 / 1.8 = 172 backward: derived, not published. The FlashAttention-3
  paper's own "Triton" bars (353 forward at 4k) are the Triton tutorial kernel built with Hopper instructions, a
  different kernel, so they do not price llm-foundry's.
- sdpa: PyTorch scaled_dot_product_attention's flash backend, FlashAttention-2's code (PyTorch
  aten/src/ATen/native/transformers/cuda/flash_attn): priced as flash2.
- A kernel without a published figure on a generation that has some (cuDNN and FlashAttention-3 on Ampere, where
  FlashAttention-3 does not run: it needs sm90) takes that generation's best published figure, never faster.
- A generation without any (Blackwell, other): each kernel at the device's fused figures times its Hopper figure over
  Hopper's cuDNN (the newest published ratios), at most 1: FlashAttention-2 0.62 × fused, FlashAttention-3 = fused.
  Unvalidated: no measured run exercises it.

Every figure is capped by the device's GEMM ceiling `compute_efficiency` (the same tensor cores at the in-run clocks),
triton's after the division, so on A100 it runs 1.8 x slower than the capped FlashAttention-2 (as before this module).
"""
from __future__ import annotations

from typing import NamedTuple

from ..specs.device import DeviceSpec


class Published(NamedTuple):
    """A kernel's benchmark on one GPU generation: forward and backward TFLOP/s over the benchmark GPU's dense peak."""
    forward_tflops: float
    backward_tflops: float
    peak_tflops: float
    source: str

    @property
    def efficiencies(self) -> tuple[float, float]:
        return self.forward_tflops / self.peak_tflops, self.backward_tflops / self.peak_tflops


H100_PEAK = 989.4  # H100 SXM5 BF16 dense TFLOP/s (the FlashAttention-3 benchmark GPU)
A100_PEAK = 312.0  # A100 BF16 dense TFLOP/s (the FlashAttention-2 benchmark GPU)
FA3_PAPER = "Shah et al. 2024 (FlashAttention-3) §4.1 Fig. 5 (fwd, causal) / Fig. 6 (bwd), H100, hdim 128, 4k tokens"
FA2_PAPER = "Dao 2023 (FlashAttention-2) §4.1, A100: forward up to 73 %, backward up to 63 % of peak"
PUBLISHED: dict[tuple[str, str], Published] = {
    ("hopper", "flash2"): Published(319, 310, H100_PEAK, FA3_PAPER),
    ("hopper", "cudnn"): Published(518, 499, H100_PEAK, FA3_PAPER),
    ("hopper", "flash3"): Published(579, 542, H100_PEAK, FA3_PAPER),
    ("ampere", "flash2"): Published(0.73 * A100_PEAK, 0.63 * A100_PEAK, A100_PEAK, FA2_PAPER),
}
# FlashAttention-2 over FlashAttention in Triton, forward + backward, A100: Dao 2023 §4.1 "1.3-2.5x"; the geometric
# middle (docs/formulas.md §3.3).
TRITON_SLOWDOWN = 1.8
# Kernels priced as another's figures: PyTorch SDPA's flash backend is FlashAttention-2.
SAME_AS = {"sdpa": "flash2"}
REFERENCE = ("hopper", "cudnn")  # the newest generation's published native kernel, for generations without figures


def published_efficiencies(architecture: str, kernel: str) -> tuple[float, float] | None:
    """(forward, backward) fraction of peak a kernel reaches on a generation, from its published benchmark (triton
    derived from FlashAttention-2's); None when neither it nor FlashAttention-2 has a figure there."""
    if kernel == "triton":
        flash2 = published_efficiencies(architecture, "flash2")
        return None if flash2 is None else (flash2[0] / TRITON_SLOWDOWN, flash2[1] / TRITON_SLOWDOWN)
    figure = PUBLISHED.get((architecture, SAME_AS.get(kernel, kernel)))
    return None if figure is None else figure.efficiencies


def _best_published(architecture: str) -> tuple[float, float] | None:
    """The fastest published kernel of a generation, per pass (None: nothing published there)."""
    figures = [f.efficiencies for (arch, _), f in PUBLISHED.items() if arch == architecture]
    return (max(f[0] for f in figures), max(f[1] for f in figures)) if figures else None


def kernel_efficiencies(device: DeviceSpec, kernel: str) -> tuple[float, float]:
    """(forward, backward) fraction of peak of `kernel` on `device` in a training step (module docstring), capped by
    the GEMM ceiling: fused at the device's own figures; a published figure of the device's generation; else that
    generation's best published; else the device's fused figures scaled by the kernel's Hopper ratio to cuDNN. triton
    runs TRITON_SLOWDOWN times slower than FlashAttention-2 as priced here (its ratio was measured against it)."""
    if kernel == "triton":
        forward, backward = kernel_efficiencies(device, "flash2")
        return forward / TRITON_SLOWDOWN, backward / TRITON_SLOWDOWN
    fused = (device.flash_forward_efficiency, device.flash_backward_efficiency)
    figure = fused if kernel == "fused" else (published_efficiencies(device.architecture, kernel)
                                              or _best_published(device.architecture))
    if figure is None:
        hopper, reference = published_efficiencies("hopper", kernel), PUBLISHED[REFERENCE].efficiencies
        figure = tuple(f * min(1.0, k / r) for f, k, r in zip(fused, hopper, reference))
    return min(figure[0], device.compute_efficiency), min(figure[1], device.compute_efficiency)


def is_published(device: DeviceSpec, kernel: str) -> bool:
    """Whether `kernel` on `device` is priced from a figure measured on its generation (fused: the device's own)."""
    return kernel == "fused" or (kernel != "triton" and published_efficiencies(device.architecture, kernel) is not None)


def kernel_basis(device: DeviceSpec, kernel: str) -> str:
    """How `kernel` is priced on `device`, for the assumptions panel: the kernel's name, with a note unless a figure
    measured on the device's generation prices it."""
    if is_published(device, kernel):
        return kernel
    if kernel == "triton" and published_efficiencies(device.architecture, "flash2") is not None:
        return f"{kernel}: FlashAttention-2's {device.architecture} figure / {TRITON_SLOWDOWN:g}"
    return f"{kernel}: no published figure on {device.architecture}, priced conservatively, unvalidated"


__all__ = ["PUBLISHED", "TRITON_SLOWDOWN", "Published", "published_efficiencies", "kernel_efficiencies",
           "is_published", "kernel_basis"]
