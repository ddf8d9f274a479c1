"""FP8 training as Transformer Engine runs it (docs/formulas.md §3.1): what runs in FP8, what it costs besides the
GEMMs, and the FP8 copies it keeps.

- The weight GEMMs of the body's linear layers (QKV/MLA projections, output projection, MLP and expert FCs) run all
  three training GEMMs (forward, input gradient, weight gradient) at the device's FP8 dense peak with the same
  tile/wave model (estimate/gemm.py, `fp8=True`). The attention core, norms, the MoE router, the embedding, the
  output layer and the MTP projection stay BF16 (Transformer Engine docs, "Using FP8 with Transformer Engine":
  only te.Linear-family GEMMs run in FP8; Micikevicius et al. 2022 §4 keep the first/last layers in higher
  precision as well: Megatron's --first-last-layers-bf16, RunSpec.bf16_layers, bf16_run and bf16_layer_kinds
  below; else every body layer runs FP8).
- Each FP8 GEMM first casts its operands (memory-bound, at HBM bandwidth): the forward casts its input and its
  weight, the backward casts the output gradient. CAST_BYTES: HBM bytes per cast element for each recipe. A trainer
  whose casts are torchao's (TrainerBehaviour.fp8_casts, torchtitan) moves what torchao_cast_bytes counts instead.
- Current scaling under sequence parallelism all-reduces amaxes over the TP group: one tiny, latency-bound
  collective per sequence-parallel cast (amax_reduction_seconds), on the compute stream's path.
- Memory: FP8 weight copies of the linear weights next to the BF16 parameters (in their place under
  `--fp8-param-gather`, ZeRO >= 1), one per micro-batch in flight when Megatron does not cache them
  (`disable_parameter_transpose_cache`, BF16 weights), and the linear-layer inputs saved for the backward in FP8
  (estimate/activations.py).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ..specs.model import ModelSpec
from ..specs.device import ClusterSpec, DeviceSpec
from ..specs.fields import SpecError
from ..specs.run import FP32_BYTES, RunSpec
from . import communication as comm
from .compute import Gemm, memory_seconds
from .trainers import trainer_behaviour

# HBM bytes per element of one cast to FP8 (read BF16: 2, write FP8: 1), by recipe (docs/formulas.md §3.1):
#   delayed: the scale comes from the amax history, the amax of this tensor is taken inside the cast kernel: 2 + 1;
#   tensorwise (current scaling): an amax pass before the cast reads the tensor once more: 2 + 2 + 1;
#   blockwise (DeepSeek-V3 §3.3: 1x128 tiles, 128x128 weight blocks) and mxfp8 (OCP MX v1.0: 32-element blocks):
#     block amaxes are local, one read writes both the row-wise and the column-wise FP8 copies (block scales differ
#     per direction) plus a scale per block: 2 + 1 + 1 + scales (4 bytes per 128 elements twice; 1 byte per 32 twice).
# Hopper's FP8 tensor cores take only the TN layout, so per-tensor recipes also write a transposed copy (+1) there.
CAST_BYTES = {"delayed": 3.0, "tensorwise": 5.0, "blockwise": 4.0 + 2 * 4 / 128, "mxfp8": 4.0 + 2 * 1 / 32}
PER_TENSOR_RECIPES = ("delayed", "tensorwise")  # one scale per tensor: Hopper needs the transposed FP8 copy
TRANSPOSE_BYTES = 1.0  # the transposed FP8 copy a per-tensor recipe writes on a device without `mxfp8` (Hopper)


def check_fp8(run: RunSpec, device: DeviceSpec) -> None:
    """Refuse FP8 on a device without FP8 tensor cores, and MXFP8 off Blackwell. Raises SpecError (one line)."""
    if not run.fp8:
        return
    if device.fp8_peak_flops <= 0:
        raise SpecError(f"precision='fp8' is not valid on device {device.name!r}: it has no FP8 tensor cores "
                        f"(fp8_peak_flops=0); use bf16, or an FP8 device such as h100, h200, h800 or b200")
    if run.fp8_recipe == "mxfp8" and not device.mxfp8:
        raise SpecError(f"fp8_recipe='mxfp8' is not valid on device {device.name!r}: MXFP8 block scaling needs "
                        f"Blackwell tensor cores (b200); valid here: delayed, tensorwise, blockwise")


def cast_bytes_per_element(run: RunSpec, device: DeviceSpec) -> float:
    """HBM bytes one FP8 cast moves per element under the run's recipe on this device (0 without fp8)."""
    if not run.fp8:
        return 0.0
    per_tensor = run.fp8_recipe in PER_TENSOR_RECIPES
    return CAST_BYTES[run.fp8_recipe] + (TRANSPOSE_BYTES if per_tensor and not device.mxfp8 else 0.0)


LAYOUT_COPY_BYTES = 2.0  # an FP8 tensor copied into the other major order: read 1, write 1


def torchao_step_bytes(activation_bytes: int, compiled: bool) -> tuple[float, float]:
    """HBM bytes per element of torchao's tensorwise amax and cast of one 16-bit tensor (pytorch/ao @0afa4c1, the
    Trainy rows' torchao): amax = max(abs(x)) (float8/float8_utils.py tensor_to_amax); cast = x.to(float32) * scale,
    clamp, .to(float8) (float8_tensor.py _ToFloat8ConstrFunc.forward, float8_utils.py to_fp8_saturated). Eager, op
    by op: abs (read a, write a) and max (read a): 3a; .to(float32) (read a, write 4), the product and the clamp
    (read 4, write 4 each), .to(float8) (read 4, write 1): a + 25. Under torch.compile Inductor fuses the abs into
    the reduction and the cast's four ops into one kernel (fusion.py: Ansel et al. 2024 §4): a, and a + 1."""
    a = activation_bytes
    if compiled:
        return float(a), a + 1.0
    return 3.0 * a, (a + FP32_BYTES if a != FP32_BYTES else 0.0) + 2 * 2 * FP32_BYTES + FP32_BYTES + 1.0


def torchao_cast_bytes(mk: float, nk: float, mn: float, activation_bytes: int,
                       compiled: bool) -> tuple[float, float]:
    """HBM bytes (forward, backward) of torchao's tensorwise casts around FP8 GEMMs with mk input, nk weight and mn
    output elements in all, read from pytorch/ao @0afa4c1 float8/float8_linear.py (matmul_with_hp_or_float8_args,
    Float8Linear.forward) and float8_ops.py (preprocess_addmm: torch._scaled_mm takes A row-major and B
    column-major, so a row-major B is copied with .t().contiguous().t() and a transposed A with .contiguous()):
    - forward: the input (amax, cast) and the weight (amax, cast: the whole weight, an upper bound: with torchtitan's
      enable_fsdp_float8_all_gather the 1/dp fp32 shard is cast before each all-gather, eagerly in FSDP's hook,
      21 bytes per shard element twice a micro-batch under reshard-after-forward, 42/dp bytes per weight element, no
      more than 5 for dp >= 9; precompute_float8_dynamic_scale_for_fsdp takes the weights' amaxes once a step in
      one all-reduce, fsdp_utils.py, not priced);
    - backward: the output gradient (amax, cast) for the input gradient; the FP8 weight saved from the forward copied
      column-major (layout copy); the output gradient cast again for the weight gradient (eager; compiled, the same
      ops on the same tensor in one graph are one: AOTAutograd's CSE pass over the joint graph, torch 2.13
      _functorch/partitioners.py min_cut_rematerialization_partition, config.cse) and its transpose made
      contiguous (layout copy); the 16-bit input cast again (eager: amax and cast; compiled: the cast, its amax the
      forward's, one node after CSE and saved: torchtitan's op-level AC keeps aten.max, parallelize_llama.py
      _save_list @e7c0cae) and copied column-major (layout copy).
    Compiled, 16-bit: forward 5 mk + 5 nk, backward 7 mn + 5 mk + 2 nk; eager: 33 (mk + nk), 68 mn + 35 mk + 2 nk.
    torchao before v0.9 (#1480, 2025-01-13; the Dec 2024 H100 rows ran eab345c) saved the forward's FP8 input and
    cast the output gradient once: its backward moved 3 mk less (compiled); the newer inventory is charged."""
    amax, cast = torchao_step_bytes(activation_bytes, compiled)
    forward = (amax + cast) * (mk + nk)
    grad_output = (amax + cast) * (1 if compiled else 2) + LAYOUT_COPY_BYTES
    grad_input = (cast if compiled else amax + cast) + LAYOUT_COPY_BYTES
    return forward, grad_output * mn + grad_input * mk + LAYOUT_COPY_BYTES * nk


def layer_cast_bytes(run: RunSpec, device: DeviceSpec, gemms: "tuple[Gemm, ...]") -> tuple[float, float]:
    """HBM bytes (forward, backward) of the FP8 casts around a layer's FP8 GEMMs `gemms` (compute.fp8_gemms) in one
    micro-batch, as the run's trainer casts (TrainerBehaviour.fp8_casts): Transformer Engine's one cast per operand
    (cast_bytes_per_element: the input forward, the output gradient backward; the weight only where it is cast every
    micro-batch, weights_cast_every_micro_batch, else once a step: step_weight_cast_seconds), or torchao's tensorwise
    inventory (torchao_cast_bytes; torchao's other recipes were not read and are priced as Transformer Engine's)."""
    if not run.fp8:
        return 0.0, 0.0
    mk = sum(g.m * g.k * g.count for g in gemms)
    nk = sum(g.n * g.k * g.count for g in gemms)
    mn = sum(g.m * g.n * g.count for g in gemms)
    if trainer_behaviour(run).fp8_casts == "torchao" and run.fp8_recipe == "tensorwise":
        return torchao_cast_bytes(mk, nk, mn, run.activation_bytes, run.torch_compile)
    per_element = cast_bytes_per_element(run, device)
    return per_element * (mk + (nk if weights_cast_every_micro_batch(run) else 0.0)), per_element * mn


def weights_cast_every_micro_batch(run: RunSpec) -> bool:
    """Whether the FP8 weights are quantized in every micro-batch's forward: under torchao's casts (Float8Linear
    casts its weight in each forward: torchao_cast_bytes, and its other recipes priced with that count), and under
    Megatron's `disable_parameter_transpose_cache` (uncached_weight_copy_bytes_per_parameter says why; with an FP8
    parameter, ZeRO >= 1, nothing is cast then either: charged anyway, an upper bound for that rare pair).
    Otherwise Megatron-Core's TE linears pass `is_first_microbatch` (extensions/transformer_engine.py
    TELinear.forward @d98e8a6: True on a step's first call, then False) and Transformer Engine casts the weight at
    the step's first micro-batch and reuses its cached FP8 copy and transpose (module/base.py get_weight_workspace,
    2.14 71bbefbf)."""
    return run.disable_parameter_transpose_cache or trainer_behaviour(run).fp8_casts == "torchao"


def step_weight_cast_seconds(run: RunSpec, device: DeviceSpec, cast_weights: float) -> float:
    """The FP8 weights' casts a step does once where Transformer Engine keeps them between micro-batches (0 in a
    16-bit run, or where the weights are cast every micro-batch: weights_cast_every_micro_batch): the cached FP8
    copy and its transpose written at the step's first micro-batch (ZeRO 0), or the FP8 parameters the distributed
    optimizer writes from its updated master weights and their transposes after the gather (ZeRO >= 1,
    --fp8-param-gather): one cast at the recipe's bytes per element of each of the `cast_weights` local weights
    of the FP8 GEMMs (parameters.StageParameters.fp8_weights: the te.Linear-family weights of the layers run in
    FP8; the MoE router, norms, biases, embedding and output layer stay 16-bit and are not cast, nor the first/last
    layers kept in BF16), the weights a micro-batch casts where they are not cached (layer_cast_bytes)."""
    if not run.fp8 or weights_cast_every_micro_batch(run):
        return 0.0
    return memory_seconds(cast_bytes_per_element(run, device) * cast_weights, device)


def amax_reduction_seconds(run: RunSpec, cluster: ClusterSpec, tp: int, sp: bool) -> float:
    """Seconds of one amax all-reduce over the TP group that FP8 current scaling runs before a sequence-parallel
    cast (0 where none runs). Transformer Engine's Float8CurrentScaling recipe gives the input quantizer of each
    column-parallel linear layer, and the output-gradient quantizer of each row-parallel one, `with_amax_reduction`
    over the TP group when the layer is sequence-parallel (TE v2.12 pytorch/module/linear.py, layernorm_linear.py,
    layernorm_mlp.py @5671fd3 `_customize_quantizers_float8_current_scaling`), so the shards cast to FP8 with one
    scale before they are all-gathered; the quantizer all-reduces the amax and waits on it before it casts
    (csrc/quantizer.cpp, Float8CurrentScalingQuantizer::quantize_impl: `allreduce(...)->wait()`), and the GEMM waits on
    the cast: exposed. One FP32 amax: a few-byte all-reduce over the TP group, as NCCL prices it
    (communication.few_byte_all_reduce_seconds: the LL ring in a scale-up domain, 15.0 us at tp = 8). Delayed
    scaling reduces its amax history once per step, block and MX recipes scale locally: neither pays this per cast.
    Checked in TE only; torchao's tensorwise Float8Linear under DTensor sequence parallelism is priced the same,
    unread."""
    if not (run.fp8 and run.fp8_recipe == "tensorwise" and sp and tp > 1):
        return 0.0
    return comm.few_byte_all_reduce_seconds(cluster, tp)


def weight_copy_bytes_per_parameter(run: RunSpec, zero: int) -> float:
    """Bytes per linear-layer parameter the FP8 weights add to (or, negative, take from) the BF16 weight the
    parameter memory counts: one FP8 copy plus its transpose for a per-tensor recipe (Hopper's TN-only FP8 GEMMs),
    or the row-wise and column-wise copies and block scales of a block recipe (0 without fp8). Under a distributed
    optimizer or FSDP (ZeRO >= 1) Megatron runs `--fp8-param-gather` (ndcp emits it; the gathers move FP8): the
    compute weight is the FP8 one and no BF16 weight is kept (Megatron-LM DistributedDataParallelConfig
    .fp8_param_gather: "keep the compute param in fp8 (do not use any other intermediate dtype)"). The memory
    estimators take no device, so a per-tensor recipe on Blackwell (no transpose needed) is charged the Hopper
    layout: 1 byte per linear parameter too many there."""
    if not run.fp8 or not trainer_behaviour(run).fp8_weight_copies:
        return 0.0
    copies = 1.0 + TRANSPOSE_BYTES if run.fp8_recipe in PER_TENSOR_RECIPES else CAST_BYTES[run.fp8_recipe] - 2.0
    return copies - (run.param_bytes if zero >= 1 else 0.0)


def uncached_weight_copy_bytes_per_parameter(run: RunSpec, zero: int) -> float:
    """Bytes per linear parameter each micro-batch in flight past the first adds under Megatron's
    `disable_parameter_transpose_cache` (RunSpec field; 0 otherwise). Megatron then calls Transformer Engine with
    `is_first_microbatch=None` (Megatron-LM core/extensions/transformer_engine.py TELinear.forward, at 17a67b9a and
    d98e8a6), and Transformer Engine (2.14, 71bbefbf: module/linear.py `_Linear.forward`, module/base.py
    `get_weight_workspace`) then quantizes a BF16 weight afresh on every forward (`cache_name=None`), with its
    transpose when a backward follows, and saves that copy for the backward: one FP8 copy per micro-batch in flight
    instead of one cached copy (the one the parameter memory already counts). An FP8 parameter (ZeRO >= 1:
    `--fp8-param-gather`) is returned as it is, its transpose kept as before (`get_weight_workspace` on a
    QuantizedTensor only updates its usages): nothing changes there."""
    if not run.disable_parameter_transpose_cache or zero >= 1:
        return 0.0
    return weight_copy_bytes_per_parameter(run, zero)


@lru_cache(maxsize=256)
def bf16_run(run: RunSpec) -> RunSpec:
    """The run a body layer kept in BF16 (RunSpec.bf16_layers) runs as: precision bf16, nothing kept apart, so every
    FP8 term of this module is off for it (Megatron-Core get_fp8_context @d98e8a6 returns nullcontext for such a
    layer: Transformer Engine runs its linear layers unquantized)."""
    return replace(run, precision="bf16", first_layers_bf16=0, last_layers_bf16=0)


def bf16_layer_kinds(model: ModelSpec, run: RunSpec, role: str) -> tuple[tuple[str, int], ...]:
    """(layer kind, count) of the body layers kept in BF16 that a stage role holds: "first" (the embedding's virtual
    stage) the first N, "last" (the loss's) the last M not among them. Megatron-Core numbers them globally, over
    every pipeline stage and, in a hybrid model, over its blocks (fp8_utils.py is_first_last_bf16_layer @d98e8a6;
    hybrid_block.py passes i + pp_layer_offset; arguments.py sets num_layers to the pattern's length)."""
    first, last = run.bf16_layers
    if role == "first":
        layers = range(min(first, model.layers))
    elif role == "last":
        layers = range(max(first, model.layers - last), model.layers)
    else:
        return ()
    moe = sum(model.is_moe_layer(i) for i in layers)
    return tuple((kind, n) for kind, n in (("dense", len(layers) - moe), ("moe", moe)) if n)


def linear_input_bytes(run: RunSpec) -> int:
    """Bytes per element of a linear layer's input saved for its weight gradient: FP8 under fp8 when the trainer
    saves the cast input (Transformer Engine; specs/trainer_behaviour.py fp8_saves_cast_inputs), else the
    activation dtype (torchtitan's torchao Float8Linear saves the BF16 input)."""
    return 1 if run.fp8 and trainer_behaviour(run).fp8_saves_cast_inputs else run.activation_bytes


__all__ = ["CAST_BYTES", "TRANSPOSE_BYTES", "LAYOUT_COPY_BYTES", "check_fp8", "cast_bytes_per_element",
           "torchao_step_bytes", "torchao_cast_bytes", "layer_cast_bytes", "amax_reduction_seconds",
           "weights_cast_every_micro_batch", "step_weight_cast_seconds",
           "weight_copy_bytes_per_parameter", "uncached_weight_copy_bytes_per_parameter", "bf16_run",
           "bf16_layer_kinds", "linear_input_bytes"]
