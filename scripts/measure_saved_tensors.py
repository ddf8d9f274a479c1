"""Measure what a trainer's own transformer block keeps for backward, without a GPU, and write the table that
tests/estimate/test_saved_tensors.py pins ndcp's activation inventory to (docs/saved_tensors.yaml).

Runs in a scratch environment OUTSIDE the repository (the repository and its CI never install torch):

    python3.11 -m venv /tmp/trainers-venv && /tmp/trainers-venv/bin/pip install torch==2.13.0 torchtitan==0.3.0 \
        torchao==0.18.0
    /tmp/trainers-venv/bin/python scripts/measure_saved_tensors.py > docs/saved_tensors.yaml

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

import sys
from dataclasses import dataclass

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

# (trainer model, flavour, ndcp library name, precision, policies); sizes are torchtitan's own flavours. fp8: the
# block's linears converted by torchao's convert_to_float8_training (tensorwise scaling), as torchtitan's float8
# model converter does before parallelising.
# compiled: torch.compile of the block as torchtitan's compile.enable applies it per block; what the compiled
# forward saves is chosen by AOTAutograd's min-cut partitioner (min_cut_rematerialization_partition, the one
# Inductor uses for training), run here on the FX graph without Inductor's code generation.
CASES = (("llama3", "8B", "llama3-8b", "bf16", ("none", "selective", "full"), False),
         ("llama3", "70B", "llama3-70b", "bf16", ("none", "selective", "full"), False),
         ("llama3", "8B", "llama3-8b", "fp8", ("none", "selective"), False),
         ("llama3", "8B", "llama3-8b", "bf16", ("none",), True),
         ("llama3", "70B", "llama3-70b", "bf16", ("none",), True))
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
    sizes: dict[str, int]  # the block's own sizes, which the library model must have
    activation_bytes: int
    tensors: list[tuple[str, int]]


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
    """A torch.compile backend: AOTAutograd with Inductor's training partitioner, the graphs run as FX code. The
    forward graph returns the block's output and then every tensor it saves for backward: the last call's are kept.
    (Dynamo refuses to trace under a dispatch mode, so compiled rows read the saved tensors from here instead.)"""

    def __init__(self):
        self.inputs, self.saved = [], []

    def __call__(self, gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._functorch.aot_autograd import aot_module_simplified
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        def forward_compiler(graph, inputs):
            def run(args):
                self.inputs = list(args)
                outputs = graph(*args)
                self.saved = list(outputs[1:])  # one user output: the block's
                return outputs
            run._boxed_call = True
            return run

        def backward_compiler(graph, inputs):
            return make_boxed_func(graph.forward)
        return aot_module_simplified(gm, example_inputs, fw_compiler=forward_compiler, bw_compiler=backward_compiler,
                                     partition_fn=min_cut_rematerialization_partition)


def _compiled_saved(block, leaf) -> list[tuple[str, int]]:
    """(name, bytes) of the distinct storages the compiled forward saves, less weights and buffers."""
    backend = _Partitioned()
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    x = leaf * 1.0
    compiled(x, None)
    weights = {StorageWeakRef(t.untyped_storage()).cdata for t in (*block.parameters(), *block.buffers())}
    seen, tensors = set(weights), []
    for t in backend.saved:
        key = StorageWeakRef(t.untyped_storage()).cdata
        if isinstance(t, torch.Tensor) and key not in seen:
            seen.add(key)
            name = ("block_input" if key == StorageWeakRef(x.untyped_storage()).cdata
                    else f"saved {list(t.shape)} {str(t.dtype).removeprefix('torch.')}")
            tensors.append((name, t.untyped_storage().nbytes()))
    return tensors


def measure(model: str, flavour: str, precision: str, policy: str, compiled: bool = False) -> Measured:
    torch.nn.functional.rms_norm = _cuda_rms_norm  # nn.RMSNorm.forward looks it up at call time
    block = _torchtitan_block(model, flavour, precision, policy)
    sizes = _sizes(block)
    leaf = torch.empty(MICRO_BATCH, SEQ_LEN, sizes["hidden"], dtype=torch.bfloat16, device="meta", requires_grad=True)
    if compiled:
        tensors = _compiled_saved(block, leaf)
        return Measured(model, precision, policy, compiled, sizes, sum(b for _, b in tensors),
                        sorted(tensors, key=lambda t: -t[1]))
    mode = _LiveStorages()
    with mode:
        x = leaf * 1.0
        out = block(x, None)
    block_input = StorageWeakRef(x.untyped_storage()).cdata
    del x
    held = [*block.parameters(), *block.buffers(), out, leaf]  # weights, RoPE tables, the caller's tensors
    tensors = [("block_input" if key == block_input else op, nbytes)
               for key, op, nbytes in mode.alive({StorageWeakRef(t.untyped_storage()).cdata for t in held})]
    return Measured(model, precision, policy, compiled, sizes, sum(b for _, b in tensors),
                    sorted(tensors, key=lambda t: -t[1]))


def main() -> int:
    import torchtitan  # noqa: F401

    versions = (f"torch {torch.__version__.split('+')[0]}, torchtitan {_version('torchtitan')}, "
                f"torchao {_version('torchao')}")
    print("# Written by scripts/measure_saved_tensors.py; do not edit by hand (module docstring: method).")
    print(f"trainer: torchtitan\nversions: {versions}\nseq_len: {SEQ_LEN}\nmicro_batch: {MICRO_BATCH}")
    print("tp: 1\ncp: 1\nattention: 'flash, a stand-in for FlexAttention (script docstring)'\nrows:")
    for model, flavour, name, precision, policies, compiled in CASES:
        for policy in policies:
            m = measure(model, flavour, precision, policy, compiled)
            sizes = ", ".join(f"{k}: {v}" for k, v in m.sizes.items())
            print(f"- model: {name}\n  precision: {precision}\n  policy: {policy}\n"
                  f"  compiled: {str(compiled).lower()}\n  sizes: {{{sizes}}}\n"
                  f"  activation_bytes: {m.activation_bytes}\n  tensors:  # [the op that made it, bytes]")
            for op, nbytes in m.tensors:
                print(f"  - ['{op}', {nbytes}]")
    return 0


def _version(package: str) -> str:
    from importlib.metadata import version
    return version(package)


if __name__ == "__main__":
    sys.exit(main())
