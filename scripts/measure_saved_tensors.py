"""Measure what a trainer's own transformer block keeps for backward, without a GPU, and write the table that
tests/estimate/test_saved_tensors.py pins ndcp's activation inventory to (docs/saved_tensors.yaml).

Runs in a scratch environment OUTSIDE the repository (the repository and its CI never install torch):

    python3.11 -m venv /tmp/trainers-venv && /tmp/trainers-venv/bin/pip install torch==2.13.0 torchtitan==0.3.0 \
        torchao==0.18.0
    git clone https://github.com/pytorch/torchtitan /tmp/torchtitan && mkdir /tmp/tt-3f20451b /tmp/tt-e7c0cae
    for f in models/llama/model.py models/llama/__init__.py models/norms.py parallelisms/parallelize_llama.py; do \
        git -C /tmp/torchtitan show 3f20451b:torchtitan/$f > /tmp/tt-3f20451b/$(basename $f); done
    for f in model.py __init__.py parallelize_llama.py; do \
        git -C /tmp/torchtitan show e7c0cae:torchtitan/models/llama3/$f > /tmp/tt-e7c0cae/$f; done
    TORCHTITAN_3F20451B=/tmp/tt-3f20451b TORCHTITAN_E7C0CAE=/tmp/tt-e7c0cae /tmp/trainers-venv/bin/python \
        scripts/measure_saved_tensors.py > docs/saved_tensors.yaml

Rows say which trainer code built the block (`code`): the installed torchtitan 0.3.0 (ndcp's inventory for a fused
wqkv, RunSpec.qkv_projections fused), or a commit measured runs ran, built from its own files
(scripts/torchtitan_commits.py; without its variable above its rows are left out): 3f20451b, the Dec 2024 commit of
torchtitan's Llama 3.1 H100 benchmark (benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd: fp32 RMSNorm of
models/norms.py, separate wq/wk/wv, repeat_kv, F.scaled_dot_product_attention), and e7c0cae, the Trainy H200
benchmark's (nn.RMSNorm, separate wq/wk/wv, repeat_kv; ndcp's inventory for qkv_projections separate), each with its
own op-level selective checkpoint (parallelize_llama.py _apply_ac_to_transformer_block). Their SDPA call runs the
flash kernel, as CUDA dispatches it. FP8 rows of e7c0cae run the installed torchao (0.18.0), not the benchmark's
(0afa4c1): Float8Linear's save_for_backward is the same in both (float8/float8_linear.py).

Method. One block of the trainer's model is built on the meta device at its real sizes (no memory is allocated, no
arithmetic is done) and run forward on a meta input that requires grad, under each of the trainer's activation-
checkpoint policies, applied by the trainer's own code. A TorchDispatchMode records a weak reference to the storage of
every tensor an op produces; after the forward, with the caller holding only the block's output, the storages still
alive are exactly what autograd (or the checkpoint's selective cache) keeps for backward: their bytes are the
measured activations of one block for one micro-batch. Views share a storage and are counted once; parameters are
not op outputs and are not counted. The block input is made by one op of the script (x * 1.0, which saves nothing)
so that it too is counted when, and only when, the block keeps it. (Liveness rather than
torch.autograd.graph.saved_tensors_hooks: inside a checkpointed block the checkpoint's own hooks take precedence, and
selective checkpointing keeps its saved outputs in a cache of its own that no hook sees; liveness counts both.)
Compiled rows (torch.compile) cannot run under a dispatch mode: there the forward graph AOTAutograd partitions
returns the tensors it saves for backward, and those are counted, once per storage.
Peak (`peak_bytes`, the 8B bf16 rows): the same records, taken after every op through one forward and the backward
from an output gradient, give the most bytes alive at once (_peak: what is saved, the recompute, the backward's
temporaries, the output and input gradients; not the weights, their gradients or the block output). Compiled, the
partitioned graphs run node by node, each value freed after its last use: an upper bound for Inductor's code, which
fuses element-wise chains.
What the backward re-runs (`backward_gemms`, `backward_attention_forwards`, the rows of 0.3.0 and e7c0cae): the GEMMs
(aten.mm; aten._scaled_mm in a compiled FP8 graph) and attention-kernel forwards the block's backward runs. Eager: a
dispatch mode entered before the backward, beneath the checkpoint's own modes, counts what is dispatched, so an op the
selective checkpoint serves from its cache is not counted, and torchao's Float8 GEMM counts once, as the aten.mm its
tensors dispatch; compiled: the nodes of the partitioned backward graph. Every linear's input- and weight-gradient
GEMMs, plus what the checkpoint re-runs (docs/formulas.md §5.7, the time ndcp prices for it).
The `backward_peaks` sections after the rows (scripts/measure_backward_peaks.py, run by main; its Megatron-Core rows
need MEGATRON_LM, a Megatron-LM checkout, set too): the storages alive at that peak and which phase made them, the
inventory ndcp's backward workspace prices (docs/formulas.md §5.5).

Two ops are not run as the trainer runs them on a GPU, because on the meta device they decompose differently:
- attention: torchtitan's language models use FlexAttention or varlen attention, which need a GPU (or the compiler);
  a stand-in calls aten._scaled_dot_product_flash_attention, whose autograd keeps what every fused attention backend
  keeps (query, key, value without GQA expansion, output, logsumexp and the dropout RNG state), under the trainer's
  save-op list exactly as the real kernel is;
- RMSNorm: torchtitan's RMSNorm is nn.RMSNorm, and F.rms_norm runs aten._fused_rms_norm on CUDA (its CUDA kernel
  _fused_rms_norm_cuda, torch/include/ATen/ops/_fused_rms_norm_native.h), whose autograd node FusedRmsNormBackward0
  keeps the input, the fp32 per-token rstd and the weight; on the meta device F.rms_norm decomposes into fp32 ops
  that keep fp32 copies. A stand-in autograd function computes the fused op's outputs and keeps what
  FusedRmsNormBackward0 keeps.

The script imports torch, torchtitan and torchao; nothing in ndcp imports it, and the tests read only its table.
"""
from __future__ import annotations

import contextlib
import sys
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torchtitan_commits import DEC2024, E7C0CAE, ENVIRONMENT, SOURCES, commit_block

# (trainer model, flavour, ndcp library name, precision, policies); sizes are torchtitan's own flavours. fp8: the
# block's linears converted by torchao's convert_to_float8_training (tensorwise scaling), as torchtitan's float8
# model converter does before parallelising.
# compiled: torch.compile of the block as torchtitan's compile.enable applies it per block; what the compiled
# forward saves is chosen by AOTAutograd's min-cut partitioner (min_cut_rematerialization_partition, the one
# Inductor uses for training), run here on the FX graph without Inductor's code generation.
# code: the trainer code the block is built from: the installed torchtitan 0.3.0, or a commit measured runs ran, read
# from its own files (torchtitan_commits.py): DEC2024, the Dec 2024 benchmark's (benchmarks/llama3_h100_202412_
# torchtitan.md @31a17bfd), E7C0CAE, the Trainy H200 benchmark's (benchmarks/llama3-8b_h200_202506_trainy-
# whitefiber.md).
CASES = (("0.3.0", "llama3", "8B", "llama3-8b", "bf16", ("none", "selective", "full"), False),
         ("0.3.0", "llama3", "70B", "llama3-70b", "bf16", ("none", "selective", "full"), False),
         ("0.3.0", "llama3", "8B", "llama3-8b", "fp8", ("none", "selective"), False),
         ("0.3.0", "llama3", "8B", "llama3-8b", "bf16", ("none", "selective"), True),
         ("0.3.0", "llama3", "8B", "llama3-8b", "fp8", ("selective",), True),
         ("0.3.0", "llama3", "70B", "llama3-70b", "bf16", ("none",), True),
         (DEC2024, "llama", "8B", "llama3-8b", "bf16", ("none", "selective", "full"), False),
         (DEC2024, "llama", "8B", "llama3-8b", "bf16", ("none", "selective"), True),
         ("0.3.0", "llama3", "8B", "llama3-8b", "fp8", ("none",), True),
         (E7C0CAE, "llama3", "8B", "llama3-8b", "bf16", ("none", "selective", "full"), False),
         (E7C0CAE, "llama3", "8B", "llama3-8b", "bf16", ("none", "selective"), True),
         (E7C0CAE, "llama3", "8B", "llama3-8b", "fp8", ("none", "selective"), True))
# (code, precision, flavour) of the rows whose peak through forward and backward is measured too (_peak)
PEAKS = {("0.3.0", "bf16", "8B"), (DEC2024, "bf16", "8B")}
SEQ_LEN = 8192
MICRO_BATCH = 1


class _LiveStorages(TorchDispatchMode):
    """Records a weak reference, the bytes and the producing op of every storage an op's output owns."""

    def __init__(self):
        super().__init__()
        self.outputs: dict[int, tuple[StorageWeakRef, int, str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                ref = StorageWeakRef(t.untyped_storage())
                self.outputs.setdefault(ref.cdata, (ref, t.untyped_storage().nbytes(), str(func)))
        return out

    def alive(self, exclude: set[int]) -> list[tuple[int, str, int]]:
        """(storage key, producing op, bytes) of the recorded storages still alive, less `exclude`."""
        return [(key, op, nbytes) for key, (ref, nbytes, op) in self.outputs.items()
                if key not in exclude and not ref.expired()]


class _Timeline(_LiveStorages):
    """Also records, after every op, which recorded storages are alive: the block's live bytes op by op, through its
    forward and its backward (the recompute and the backward's temporaries included)."""

    def __init__(self):
        super().__init__()
        self.snapshots: list[tuple[int, ...]] = []

    def record(self, t: torch.Tensor) -> None:
        ref = StorageWeakRef(t.untyped_storage())
        self.outputs.setdefault(ref.cdata, (ref, t.untyped_storage().nbytes(), "made by the script"))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.snapshots.append(tuple(k for k, (ref, _, _) in self.outputs.items() if not ref.expired()))
        return out

    def peak(self, exclude: set[int]) -> int:
        """The most bytes alive at once, less `exclude` (weights' gradients: model states, not activations)."""
        return self.at_peak(exclude)[0]

    def at_peak(self, exclude: set[int]) -> tuple[int, int, tuple[int, ...]]:
        """(bytes, op index, storages alive) at the first op where the most bytes, less `exclude`, are alive."""
        sizes = {key: nbytes for key, (_, nbytes, _) in self.outputs.items() if key not in exclude}
        totals = [sum(sizes.get(k, 0) for k in snap) for snap in self.snapshots]
        if not totals:
            return 0, -1, ()
        index = max(range(len(totals)), key=totals.__getitem__)
        return totals[index], index, tuple(k for k in self.snapshots[index] if k in sizes)


class _FlashStandIn(torch.nn.Module):
    """(B, L, N, H) q, k, v -> (B, L, N, H) output through the flash-attention op (module docstring)."""

    def forward(self, q, k, v, *, attention_masks=None, scale=None, enable_gqa=False, is_causal=True, **kwargs):
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, True, False, scale=scale)[0]
        return out.transpose(1, 2)


class _FusedRMSNorm(torch.autograd.Function):
    """F.rms_norm as CUDA runs it (module docstring): keeps the input and the fp32 rstd (the weight is a parameter)."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, eps):
        out, rstd = torch.ops.aten._fused_rms_norm(x, list(normalized_shape), weight, eps)
        ctx.save_for_backward(x, rstd, weight)
        return out

    @staticmethod
    def backward(ctx, grad):  # traced, never run, under torch.compile (the compiled rows)
        x, rstd, weight = ctx.saved_tensors
        grad_x, grad_weight = torch.ops.aten._fused_rms_norm_backward(grad, x, list(x.shape[-1:]), rstd, weight,
                                                                      [True, True])
        return grad_x, None, grad_weight, None


def _cuda_rms_norm(x, normalized_shape, weight=None, eps=None):
    return _FusedRMSNorm.apply(x, tuple(normalized_shape), weight, eps)


@dataclass(frozen=True)
class Measured:
    model: str
    precision: str
    policy: str
    compiled: bool
    code: str  # the trainer code: torchtitan 0.3.0, DEC2024 or E7C0CAE
    sizes: dict[str, int]  # the block's own sizes, which the library model must have
    activation_bytes: int
    peak_bytes: int | None  # _peak, where measured
    tensors: list[tuple[str, int]]
    backward_gemms: int | None = None  # _backward_ops, the rows of 0.3.0 and e7c0cae
    backward_attention_forwards: int | None = None


def _sizes(block: torch.nn.Module) -> dict[str, int]:
    inner = getattr(block, "_checkpoint_wrapped_module", block)
    attention = inner.attention
    return {"hidden": inner.attention_norm.weight.shape[0], "heads": attention.n_heads,
            "kv_heads": attention.n_kv_heads, "head_dim": attention.head_dim,
            "ffn_hidden": inner.feed_forward.w1.weight.shape[0]}


def _torchtitan_block(model: str, flavour: str, precision: str, policy: str) -> torch.nn.Module:
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.models.llama3 import llama3_configs

    config = llama3_configs[flavour](attn_backend="flex")
    with torch.device("meta"):
        block = config.layers[0].build().to(torch.bfloat16)
    block.attention.inner_attention = _FlashStandIn()
    if precision == "fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(block, config=Float8LinearConfig())
    if policy == "selective":
        block = SelectiveAC(SelectiveAC.Config())._wrap_block(block, base_fqn="layers.0")
    elif policy == "full":
        block = FullAC(FullAC.Config())._wrap_block(block, base_fqn="layers.0")
    return block


class _Partitioned:
    """A torch.compile backend: AOTAutograd with Inductor's training partitioner, the graphs run node by node (an FX
    Interpreter that frees each value after its last use and clears its argument list, as compiled code does). The
    forward graph returns the block's output and then every tensor it saves for backward: the last call's are kept.
    (Dynamo refuses to trace under a dispatch mode, so compiled rows read the saved tensors from here, and the
    timeline, if given, is entered only around the graphs' own ops.)"""

    def __init__(self, timeline: _Timeline | None = None):
        self.saved, self.timeline = [], timeline

    def _runner(self, graph, forward: bool):
        def run(args):
            with self.timeline or contextlib.nullcontext():
                outputs = torch.fx.Interpreter(graph).boxed_run(args)
            if forward:
                self.saved = list(outputs[1:])  # one user output: the block's
            return outputs
        run._boxed_call = True
        return run

    def __call__(self, gm, example_inputs):
        from torch._functorch.aot_autograd import aot_module_simplified
        from torch._functorch.partitioners import min_cut_rematerialization_partition
        return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: self._runner(g, True),
                                     bw_compiler=lambda g, _: self._runner(g, False),
                                     partition_fn=min_cut_rematerialization_partition)


def _key(t: torch.Tensor) -> int:
    return StorageWeakRef(t.untyped_storage()).cdata


def _compiled_saved(block, leaf, rope) -> list[tuple[str, int]]:
    """(name, bytes) of the distinct storages the compiled forward saves, less weights and buffers."""
    backend = _Partitioned()
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    x = leaf * 1.0
    compiled(x, rope)
    held = (*block.parameters(), *block.buffers()) + ((rope,) if rope is not None else ())  # weights, RoPE table
    seen, tensors = {_key(t) for t in held}, []
    for t in backend.saved:
        if isinstance(t, torch.Tensor) and _key(t) not in seen:
            seen.add(_key(t))
            dtype = str(t.dtype).removeprefix("torch.")
            name = "block_input" if _key(t) == _key(x) else f"saved {list(t.shape)} {dtype}"
            tensors.append((name, t.untyped_storage().nbytes()))
    return tensors


GEMM_OPS = ("aten.mm.default", "aten._scaled_mm.default")  # BF16's GEMM; torchao's FP8 GEMM beneath its aten.mm
ATTENTION_FORWARD = "aten._scaled_dot_product_flash_attention.default"


class _OpCount(TorchDispatchMode):
    """Counts the ops dispatched while it is on (entered before the backward, so beneath the checkpoint's own modes:
    an op the selective checkpoint serves from its cache never reaches it)."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def _backward_ops(block, leaf, rope, compiled: bool) -> tuple[int, int]:
    """(GEMMs, attention-kernel forwards) the block's backward runs: each linear's input- and weight-gradient GEMMs,
    and what the checkpoint re-runs of the forward. Eager: the ops dispatched during backward (torchao's Float8
    GEMM counts once, as the aten.mm its tensors dispatch); compiled: the nodes of the partitioned backward graph."""
    ops, graphs = defaultdict(int), []

    class _Kept(_Partitioned):
        def _runner(self, graph, forward: bool):
            graphs.append((forward, graph))
            return super()._runner(graph, forward)

    torch._dynamo.reset()
    out = (torch.compile(block, backend=_Kept(), fullgraph=True) if compiled else block)(leaf * 1.0, rope)
    counter = _OpCount()
    with contextlib.nullcontext() if compiled else counter:
        out.backward(torch.empty_like(out))
    for forward, graph in graphs:
        for node in graph.graph.nodes:
            if not forward and node.op == "call_function":
                ops[str(node.target)] += 1
    for op, n in counter.ops.items():
        ops[op] += n
    return sum(ops[op] for op in GEMM_OPS), ops[ATTENTION_FORWARD]


def _peak(block, leaf, rope, compiled: bool) -> int:
    """The most bytes alive at once through one block's forward and backward: what it saves, what its backward
    recomputes, the backward's temporaries, the incoming output gradient and the input gradient. Not counted: the
    weights, their gradients (model states), the block output (the next block's input, freed by then). Compiled:
    the partitioned graphs run op by op, each value freed after its last use; Inductor fuses element-wise chains
    and reuses buffers, so this is an upper bound for its code."""
    timeline = _Timeline()
    run = torch.compile(block, backend=_Partitioned(timeline), fullgraph=True) if compiled else block
    with contextlib.nullcontext() if compiled else timeline:
        x = leaf * 1.0
        out = run(x, rope)
        grad = torch.empty_like(out)
    for t in (x, grad):
        timeline.record(t)
    del x
    with contextlib.nullcontext() if compiled else timeline:
        out.backward(grad)
    held = [*block.parameters(), *block.buffers(), out, leaf] + ([rope] if rope is not None else [])
    return timeline.peak({_key(t) for t in held} | {_key(p.grad) for p in block.parameters() if p.grad is not None})


def _build(code: str, model: str, flavour: str, precision: str, policy: str):
    """The block of the trainer code `code` and its second argument (the RoPE table; None: the block's own)."""
    torch.nn.functional.rms_norm = _cuda_rms_norm  # nn.RMSNorm.forward looks it up at call time
    if code != "0.3.0":
        return commit_block(code, flavour, precision, policy, SEQ_LEN)
    return _torchtitan_block(model, flavour, precision, policy), None


def measure(model: str, flavour: str, precision: str, policy: str, compiled: bool = False,
            code: str = "0.3.0") -> Measured:
    block, rope = _build(code, model, flavour, precision, policy)
    sizes = _sizes(block)
    leaf = torch.empty(MICRO_BATCH, SEQ_LEN, sizes["hidden"], dtype=torch.bfloat16, device="meta", requires_grad=True)
    if compiled:
        tensors = _compiled_saved(block, leaf, rope)
    else:
        mode = _LiveStorages()
        with mode:
            x = leaf * 1.0
            out = block(x, rope)
        block_input = _key(x)
        del x
        held = [*block.parameters(), *block.buffers(), out, leaf] + ([rope] if rope is not None else [])
        tensors = [("block_input" if key == block_input else op, nbytes)
                   for key, op, nbytes in mode.alive({_key(t) for t in held})]
    peak = None
    if (code, precision, flavour) in PEAKS:
        torch._dynamo.reset()
        peak = _peak(_build(code, model, flavour, precision, policy)[0], leaf, rope, compiled)
    gemms = attention = None
    if code != DEC2024:  # the Dec 2024 rows predate the count
        gemms, attention = _backward_ops(_build(code, model, flavour, precision, policy)[0], leaf, rope, compiled)
    return Measured(model, precision, policy, compiled, code, sizes, sum(b for _, b in tensors), peak,
                    sorted(tensors, key=lambda t: -t[1]), gemms, attention)


def main() -> int:
    import torchtitan  # noqa: F401

    versions = (f"torch {torch.__version__.split('+')[0]}, torchtitan {_version('torchtitan')}, "
                f"torchao {_version('torchao')}")
    print("# Written by scripts/measure_saved_tensors.py; do not edit by hand (module docstring: method).")
    print(f"trainer: torchtitan\nversions: {versions}\nseq_len: {SEQ_LEN}\nmicro_batch: {MICRO_BATCH}")
    print("tp: 1\ncp: 1\nattention: 'flash, a stand-in for FlexAttention (script docstring)'\nrows:")
    for code, model, flavour, name, precision, policies, compiled in CASES:
        if code != "0.3.0" and not SOURCES[code]:
            print(f"# {code} rows left out: {ENVIRONMENT[code]} not set (module docstring)", file=sys.stderr)
            continue
        for policy in policies:
            _print_row(name, measure(model, flavour, precision, policy, compiled, code))
    import measure_backward_peaks  # the backward_peaks sections (its docstring); it imports this module
    measure_backward_peaks.main()
    return 0


def _print_row(name: str, m: Measured) -> None:
    sizes = ", ".join(f"{k}: {v}" for k, v in m.sizes.items())
    print(f"- model: {name}\n  code: '{m.code}'\n  precision: {m.precision}\n  policy: {m.policy}\n"
          f"  compiled: {str(m.compiled).lower()}\n  sizes: {{{sizes}}}\n  activation_bytes: {m.activation_bytes}")
    if m.peak_bytes is not None:
        print(f"  peak_bytes: {m.peak_bytes}")
    if m.backward_gemms is not None:
        print(f"  backward_gemms: {m.backward_gemms}\n  backward_attention_forwards: {m.backward_attention_forwards}")
    print("  tensors:  # [the op that made it, bytes]")
    for op, nbytes in m.tensors:
        print(f"  - ['{op}', {nbytes}]")


def _version(package: str) -> str:
    from importlib.metadata import version
    return version(package)


if __name__ == "__main__":
    sys.exit(main())
