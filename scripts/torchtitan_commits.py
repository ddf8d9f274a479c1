"""The Llama 3 blocks of the torchtitan commits measured runs ran, built from their own files for
scripts/measure_saved_tensors.py (same scratch environment: torch and the installed torchtitan 0.3.0, whose package
is left as it is; each commit's files are read from a folder `git show` wrote them to, its module docstring):

- 3f20451b (DEC2024_SOURCE), the Dec 2024 H100 benchmark's commit (benchmarks/llama3_h100_202412_torchtitan.md
  @31a17bfd): models/llama/model.py, models/norms.py (fp32 RMSNorm), models/llama/__init__.py,
  parallelisms/parallelize_llama.py;
- e7c0cae (E7C0CAE_SOURCE), the Trainy H200 benchmark's commit (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md
  @b5bcd76c6): models/llama3/model.py (nn.RMSNorm, separate wq/wk/wv, repeat_kv, attention from
  models/attention.py build_attention), models/llama3/__init__.py, models/llama3/parallelize_llama.py.

Both run torchtitan's op-level selective checkpoint as that commit writes it (_apply_ac_to_transformer_block and
_save_list, executed from the commit's file) and F.scaled_dot_product_attention as the flash kernel CUDA dispatches
for a causal bf16 call. Imports of the commit's tree that the installed 0.3.0 does not have are stood in for while
its model file loads (the tokenizer, config and train-spec types, which a block does not use) and restored after.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
import types
from collections import defaultdict
from pathlib import Path

import torch

DEC2024 = "3f20451b"
DEC2024_SOURCE = os.environ.get("TORCHTITAN_3F20451B", "")
E7C0CAE = "e7c0cae"
E7C0CAE_SOURCE = os.environ.get("TORCHTITAN_E7C0CAE", "")
SOURCES = {DEC2024: DEC2024_SOURCE, E7C0CAE: E7C0CAE_SOURCE}
ENVIRONMENT = {DEC2024: "TORCHTITAN_3F20451B", E7C0CAE: "TORCHTITAN_E7C0CAE"}


def flash_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention as CUDA dispatches a causal bf16 call without mask: the flash kernel."""
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]


class _CausalFlash(torch.nn.Module):
    """e7c0cae models/attention.py ScaledDotProductAttention (F.scaled_dot_product_attention(q, k, v,
    is_causal=True) on (B, N, L, H) inputs), through the flash kernel."""

    def forward(self, q, k, v):
        return flash_sdpa(q, k, v, is_causal=True)


def _module_from(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Dynamo looks a function's globals up by its module's name
    spec.loader.exec_module(module)
    return module


def _definitions(path: Path, names: set[str], namespace: dict) -> dict:
    """Runs only the top-level assignments and functions of `path` named in `names` (the trainer's own code, without
    the imports of a torchtitan tree that is not installed)."""
    tree = ast.parse(path.read_text())
    keep = [node for node in tree.body
            if (isinstance(node, ast.FunctionDef) and node.name in names)
            or (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in names)]
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def _loaded(stand_ins: dict[str, object], load):
    """load() with `stand_ins` in sys.modules, the modules they replace restored after."""
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        return load()
    finally:
        for name, module in saved.items():
            sys.modules.pop(name) if module is None else sys.modules.__setitem__(name, module)


def _model_code(code: str):
    """The commit's model module (and, for 3f20451b, its norms module loaded first)."""
    source = Path(SOURCES[code])
    if code == DEC2024:
        def load():
            sys.modules["torchtitan.models.norms"] = _module_from("torchtitan_3f20451b_norms", source / "norms.py")
            return _module_from("torchtitan_3f20451b_llama", source / "model.py")
        # all of norms.py's uses of torchtitan.utils
        return _loaded({"torchtitan.utils": types.SimpleNamespace(device_module=torch.cuda),
                        "torchtitan.models.norms": None}, load)
    spec = types.SimpleNamespace
    stand_ins = {"torchtitan.components.tokenizer": spec(Tokenizer=object),
                 "torchtitan.config_manager": spec(JobConfig=object),
                 "torchtitan.models.attention": spec(build_attention=lambda *args, **kwargs: _CausalFlash(),
                                                     init_attention_mask=None),
                 "torchtitan.protocols.train_spec": spec(BaseModelArgs=object, ModelProtocol=object)}
    return _loaded(stand_ins, lambda: _module_from("torchtitan_e7c0cae_llama3", source / "model.py"))


def commit_block(code: str, flavour: str, precision: str, policy: str,
                 seq_len: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """The commit's Llama block at `flavour`'s sizes, on the meta device in bf16, its linears converted to torchao
    Float8Linear under fp8 (convert_to_float8_training, tensorwise, as torchtitan's float8 converter does before
    parallelising), wrapped in the commit's own activation checkpoint; and its RoPE table for `seq_len` tokens."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    source, model = Path(SOURCES[code]), _model_code(code)
    arguments = model.ModelArgs if code == DEC2024 else model.TransformerModelArgs
    name = "ModelArgs" if code == DEC2024 else "TransformerModelArgs"
    args = _definitions(source / "__init__.py", {"llama3_configs"}, {name: arguments})["llama3_configs"][flavour]
    with torch.device("meta"):
        block = model.TransformerBlock(0, args).to(torch.bfloat16)
        rope = model.precompute_freqs_cis(args.dim // args.n_heads, seq_len, args.rope_theta)
    if code == DEC2024:
        model.F = types.SimpleNamespace(scaled_dot_product_attention=flash_sdpa, silu=torch.nn.functional.silu)
    if precision == "fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(block, config=Float8LinearConfig())
    if policy != "none":
        ac = _definitions(source / "parallelize_llama.py", {"_save_list", "_apply_ac_to_transformer_block"},
                          {"torch": torch, "nn": torch.nn, "defaultdict": defaultdict,
                           "ptd_checkpoint_wrapper": checkpoint_wrapper})["_apply_ac_to_transformer_block"]
        option = "op" if policy == "selective" else None
        block = ac(block, types.SimpleNamespace(mode=policy, selective_ac_option=option))
    return block, rope
