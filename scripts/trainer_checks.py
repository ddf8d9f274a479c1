"""The checks scripts/check_trainers.py runs on one emitted file, each in its own process inside the trainers'
environment (see that script's docstring): the trainer's own parser and validators, nothing of ndcp imported.

    python scripts/trainer_checks.py megatron|torchtitan WORLD_SIZE TOKENS_JSON

prints one JSON line: what the trainer parsed (degrees, batch split, stages) and the placeholders it filled, or
`refused`: the trainer's own exception (with the statement that raised it when the exception has no message, as
a bare assert) and `at`: the trainer's source file and line (exit 1). A
command-line parser's refusal (argparse, tyro) is its own message on stderr (exit 2).

Placeholders: ndcp marks what the user must fill with `<NAME>` values (tokenizer, data, iterations, learning-rate
schedule, checkpoint directories). Each is replaced by a dummy of the type the trainer's own parser declares for
that flag: an int (100), a float (1e-4), the first of its choices, or for a string a path that exists: a directory
when NAME says DIR or FOLDER, else an empty file (both in a temporary directory).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import tempfile
import traceback
import types
import typing
from pathlib import Path

PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")
DUMMY_INT, DUMMY_FLOAT = "100", "0.0001"
# What Megatron-LM's Transformer Engine version checks (megatron.core.utils.is_te_min_version) answer when the scratch
# environment has no Transformer Engine (it needs CUDA to build): the version of the NeMo Framework 26.04 container,
# TE 2.14 (Megatron-Bridge docs/releases/software-versions.md; docs/formulas.md §3.2), the release ndcp's Megatron
# pricing reads. Without it every check answers False, as no container ndcp targets would.
TE_VERSION = "2.14.0"
HOPPER = (9, 0)  # what device queries answer without a GPU: the compute capability of the cases' H100s and H800s


def dummy(name: str, kind: object, scratch: Path) -> str:
    """A value the parser accepts for placeholder `name` of a flag whose declared type is `kind`: int, float, a
    sequence of choices, or anything else (a string: a path)."""
    if kind is int:
        return DUMMY_INT
    if kind is float:
        return DUMMY_FLOAT
    if isinstance(kind, (list, tuple)) and kind:
        return str(kind[0])
    path = scratch / name.strip("<>").lower()
    if "DIR" in name or "FOLDER" in name:
        path.mkdir(exist_ok=True)
    else:
        path.touch()
    return str(path)


def fill_placeholders(tokens: list[str], kind_of: typing.Callable[[str], object],
                      scratch: Path) -> tuple[list[str], dict[str, str]]:
    """`tokens` with every `<NAME>` value replaced (see dummy), typed by the flag before it; and the values filled
    in, by flag."""
    out, filled, flag = [], {}, ""
    for token in tokens:
        if token.startswith("--"):
            flag = token.split("=", 1)[0]
        if PLACEHOLDER.fullmatch(token):
            token = filled[flag] = dummy(token, kind_of(flag), scratch)
        out.append(token)
    return out, filled


# -- Megatron-LM -------------------------------------------------------------------------------------------------
# Features the summary lists when on (Megatron-LM argument names: distributed optimizer, Megatron FSDP, offloads,
# communication overlaps)
MEGATRON_FEATURES = ("use_distributed_optimizer", "use_megatron_fsdp", "optimizer_cpu_offload",
                     "fine_grained_activation_offloading", "cpu_offloading", "overlap_grad_reduce",
                     "overlap_param_gather", "tp_comm_overlap", "overlap_moe_expert_parallel_comm",
                     "defer_embedding_wgrad_compute", "delay_wgrad_compute", "cross_entropy_loss_fusion")


def megatron_arguments() -> types.ModuleType:
    """megatron.training.arguments (Megatron-LM on sys.path). Megatron-LM main declares Python >= 3.12 for one
    name, typing.override (megatron/training/models/gpt.py, hybrid.py); on 3.11 it is typing_extensions' same
    no-op decorator."""
    if not hasattr(typing, "override"):
        import typing_extensions
        typing.override = typing_extensions.override
    import megatron.training.arguments as arguments
    return arguments


def te_min_version(version: str, check_equality: bool = True) -> bool:
    """megatron.core.utils.is_te_min_version's answer for Transformer Engine TE_VERSION."""
    from packaging.version import Version

    have, need = Version(TE_VERSION), Version(version)
    return have >= need if check_equality else have > need


def megatron(tokens: list[str], world: int, scratch: Path) -> dict:
    """Megatron-LM's parse_args + validate_args (megatron/training/arguments.py) on the emitted arguments, as
    pretrain_gpt.py runs them on rank 0 of `world` (WORLD_SIZE and RANK come from the environment)."""
    import torch

    arguments = megatron_arguments()
    if not torch.cuda.is_available():  # validate_args' two device queries answer Hopper
        arguments.get_device_arch_version = lambda: HOPPER[0]
        torch.cuda.get_device_capability = lambda *a, **k: HOPPER
    if importlib.util.find_spec("transformer_engine") is None:  # its version checks answer TE_VERSION
        arguments.is_te_min_version = te_min_version
    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    actions = {o: a for a in parser._actions for o in a.option_strings}

    def kind_of(flag: str) -> object:
        action = actions.get(flag)
        return None if action is None else (action.choices or action.type)

    tokens, filled = fill_placeholders(tokens, kind_of, scratch)
    sys.argv = ["pretrain_gpt.py", *tokens]
    args = arguments.parse_args()
    arguments.validate_args(args)
    if args.use_megatron_fsdp:
        megatron_fsdp_mesh(args, world)
    return {"tp": args.tensor_model_parallel_size, "pp": args.pipeline_model_parallel_size,
            "cp": args.context_parallel_size, "ep": args.expert_model_parallel_size, "dp": args.data_parallel_size,
            "vpp": args.virtual_pipeline_model_parallel_size, "mbs": args.micro_batch_size,
            "recompute": [args.recompute_granularity, args.recompute_method, args.recompute_num_layers],
            "fp8": [args.fp8, args.fp8_recipe] if args.fp8 else None,
            "bf16_layers": ([args.num_layers_at_start_in_bf16, args.num_layers_at_end_in_bf16]
                            if args.first_last_layers_bf16 else None),
            "fsdp": args.data_parallel_sharding_strategy if args.use_megatron_fsdp else None,
            "dist_opt_instances": args.num_distributed_optimizer_instances,
            "outer_dp": args.outer_dp_sharding_strategy if args.num_distributed_optimizer_instances > 1 else None,
            "on": [name for name in MEGATRON_FEATURES if getattr(args, name, False)], "filled": filled}


def megatron_fsdp_mesh(args: argparse.Namespace, world: int) -> None:
    """Megatron FSDP's device meshes, as its model wrapper builds them at set-up (Megatron-LM d98e8a6,
    core/distributed/fsdp/mcore_fsdp_adapter.py FullyShardedDataParallelV1._init_dist_index: _get_dp_tp_mesh, or
    _get_hsdp_tp_mesh with --num-distributed-optimizer-instances > 1, each checked against its process group), over
    the groups training/initialize.py makes (core/parallel_state.py initialize_model_parallel), on a fake process
    group of `world` ranks (this is rank 0). What validate_args does not check: e.g. that the meshes span the world
    without pipeline parallelism."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from megatron.core import parallel_state as ps
    from megatron.core.distributed.fsdp import mcore_fsdp_adapter as adapter

    if args.megatron_fsdp_version == 2:  # the v2 wrapper refuses TP, PP and CP itself (_validate_v2_config)
        return
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    ps.initialize_model_parallel(
        args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
        args.virtual_pipeline_model_parallel_size, context_parallel_size=args.context_parallel_size,
        expert_model_parallel_size=args.expert_model_parallel_size,
        expert_tensor_parallel_size=args.expert_tensor_parallel_size,
        num_distributed_optimizer_instances=args.num_distributed_optimizer_instances,
        order="tp-cp-ep-pp-dp" if args.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp", create_gloo_process_groups=False)
    experts = args.num_experts is not None
    if args.num_distributed_optimizer_instances > 1:
        outer = ps.get_inter_distributed_optimizer_instance_group()
        adapter._get_hsdp_tp_mesh(outer, ps.get_data_parallel_group(with_context_parallel=True,
                                                                    partial_data_parallel=True),
                                  ps.get_tensor_model_parallel_group())
        if experts:
            adapter._get_hsdp_tp_mesh(outer, ps.get_expert_data_parallel_group(partial_expert_data_parallel=True),
                                      ps.get_expert_tensor_parallel_group(),
                                      ep_size=ps.get_expert_model_parallel_world_size())
    else:
        adapter._get_dp_tp_mesh(ps.get_data_parallel_group(with_context_parallel=True),
                                ps.get_tensor_model_parallel_group())
        if experts:
            adapter._get_dp_tp_mesh(ps.get_expert_data_parallel_group(), ps.get_expert_tensor_parallel_group(),
                                    ep_size=ps.get_expert_model_parallel_world_size())


# -- torchtitan --------------------------------------------------------------------------------------------------
def _field_kind(config: object, flag: str) -> object:
    """The declared type of `--section.field-name` in the loaded torchtitan config: int, float, a Literal's
    choices, or None."""
    *path, name = flag[2:].split(".")
    for part in path:
        config = getattr(config, part.replace("-", "_"), None)
    hints = typing.get_type_hints(type(config)) if config is not None else {}
    declared = hints.get(name.replace("-", "_"))
    if typing.get_origin(declared) is typing.Literal:
        return list(typing.get_args(declared))
    options = typing.get_args(declared) or (declared,)
    return next((t for t in (int, float) if t in options), None)


def assume_titan_capability(capability: tuple[int, int]) -> None:
    """torchtitan's quantization converters (components/quantization/float8.py, mx.py, nvfp4.py) ask
    has_cuda_capability(major, minor); from now on it answers as a GPU of this compute capability."""
    from torchtitan.components.quantization import float8, mx, nvfp4
    for module in (float8, mx, nvfp4):
        module.has_cuda_capability = lambda major, minor: capability >= (major, minor)


def torchtitan(tokens: list[str], world: int, scratch: Path) -> dict:
    """torchtitan's own set-up of rank 0 of `world`, in the order Trainer.__init__ runs it (torchtitan 0.3.0
    trainer.py), up to the weights: ConfigManager.parse_args (with the Trainer.Config checks tyro runs);
    torchtitan's dry-run process group (distributed/utils.py init_fake_mode, what `--comm.mode fake_backend`
    uses); ParallelDims.from_config and build_mesh (every device mesh, with its size checks); the Trainer's
    sequence-length and batch-size checks (restated: they are inline in Trainer.__init__); the model built on the
    meta device; with PP, the stage split (_get_pipeline_metadata: the stages per rank the schedule wants;
    _pipeline_module_split and, for every PP rank, _get_pp_rank_to_stage_indices_mapping: 'v schedules assume 2
    stages per rank') and the schedule (_build_pipeline_schedule); on every model part, full_dtensor.validate_config
    (e.g. CP needs FlexAttention), Module.parallelize (every parameter sharded over its meshes) and the activation
    checkpointing. Not run: torch.compile, and FSDP's fully_shard, which in torchtitan 0.3.0's default spmd_types
    backend needs a PyTorch nightly (torch 2.13.0 refuses its SPMD-typed plain tensors)."""
    import torch

    import torchtitan.distributed.parallel_dims as parallel_dims
    from torchtitan.components.quantization.utils import has_quantization
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed import pipeline_parallel as pp_module
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.distributed.full_dtensor import validate_config

    if not torch.cuda.is_available():  # the FP8/MX converters' device checks answer Hopper, as on H100/H800
        assume_titan_capability(HOPPER)
    manager = ConfigManager()
    loaded, _ = manager._load_config(list(tokens))
    tokens, filled = fill_placeholders(tokens, lambda flag: _field_kind(loaded, flag), scratch)
    config = manager.parse_args(tokens)
    dist_utils.init_fake_mode(world)
    parallel_dims.device_type = "cpu"  # torchtitan falls back to "cuda" without a GPU; the fake group is on CPU
    dims = parallel_dims.ParallelDims.from_config(config.parallelism, world)
    dims.build_mesh()
    _trainer_checks(config, dims)
    dist_utils.set_spmd_backend(config.parallelism.spmd_backend)
    spec, p = config.model_spec, config.parallelism
    spec.model.update_from_config(config=config)
    config._validate_cuda_graphs()
    with torch.device("meta"):
        model = spec.model.build()
    model.verify_module_protocol()
    quantized = has_quantization(spec.model)  # FP8 (or MX) linear layers from the config's converters
    parts, summary = [model], {"stages_per_rank": None, "microbatches": None}
    if dims.pp_enabled:
        stages_total, layers, first, last = pp_module._get_pipeline_metadata(dims, p, spec.model)
        names = p.module_fqns_per_model_part or pp_module._generate_llm_fqn_per_model_part(
            stages_total, layers, first, last)
        for rank in range(dims.pp):
            pp_module._get_pp_rank_to_stage_indices_mapping(rank, dims.pp, p.pipeline_parallel_schedule, len(names))
        stages, parts = pp_module._pipeline_module_split(
            model, dims.get_mesh("pp"), p.pipeline_parallel_schedule, torch.device("cpu"), names,
            get_mesh=pp_module._build_get_mesh_callback(dims))
        schedule = pp_module._build_pipeline_schedule(
            parallelism=p, local_batch_size=config.training.local_batch_size, stages=stages,
            loss_fn=config.loss.build(compile_config=config.compile))
        summary = {"stages_per_rank": len(stages), "microbatches": schedule._n_microbatches,
                   "schedule": type(schedule).__name__}
    for part in parts:
        validate_config(dims, part)
        part.parallelize(dims)
        if config.activation_checkpoint is not None:  # activation-checkpoint:none
            config.activation_checkpoint.build(dump_folder=config.dump_folder).apply(part)
    return {"dp_replicate": dims.dp_replicate, "dp_shard": dims.dp_shard, "tp": dims.tp, "pp": dims.pp,
            "cp": dims.cp, "ep": dims.ep, **summary, "quantized": quantized,
            "compile": list(config.compile.components) if config.compile.enable else None,  # not run (docstring)
            "ac": type(config.activation_checkpoint).__qualname__.split(".")[0].replace("NoneType", "none"),
            "filled": filled}


def _trainer_checks(config: object, dims: object) -> None:
    """The checks Trainer.__init__ makes inline before it builds the model (torchtitan 0.3.0 trainer.py): the
    sequence length divides by the SP x 2 CP chunks, and the global batch by local batch x batch-mesh size."""
    t, p = config.training, config.parallelism
    divisor = (dims.tp if p.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    if t.seq_len % divisor:
        raise ValueError(f"Training sequence length ({t.seq_len}) must be divisible by {divisor} for the "
                         "configured sequence/context parallelism.")
    batch_degree = dims.dp_replicate * dims.dp_shard
    global_batch = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size * batch_degree
    if global_batch % (t.local_batch_size * batch_degree):
        raise ValueError(f"global batch size must be multiple of local batch size times data-parallel degree "
                         f"({global_batch} % ({t.local_batch_size} * {batch_degree}) != 0)")


def main() -> int:
    trainer, world, tokens = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    check = {"megatron": megatron, "torchtitan": torchtitan}[trainer]
    with tempfile.TemporaryDirectory() as scratch:
        try:
            print(json.dumps(check(tokens, world, Path(scratch))))
        except Exception as error:  # the trainer's refusal; a SystemExit (its command-line parser) passes through
            frames = traceback.extract_tb(error.__traceback__)
            frame = frames[-1]
            message = f"{type(error).__name__}: {error}" if str(error) else f"{type(error).__name__}: {frame.line}"
            at = f"{Path(frame.filename).name}:{frame.lineno}"
            own = [f for f in frames if re.search(r"/(megatron|torchtitan)/", f.filename)]  # the trainer's line
            if own and own[-1] is not frame:  # raised in a library the trainer called (einops, torch)
                at = f"{Path(own[-1].filename).name}:{own[-1].lineno} ({at})"
            print(json.dumps({"refused": re.sub(r"\s*\n\s*", " ", message), "at": at}))  # one line
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
