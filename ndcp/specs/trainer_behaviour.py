"""What each trainer does that the estimators price differently (memory layout, data-parallel sync, activation
inventory, loss path, default overlaps), as named facts, each with the source it was read from.

This is the pure-data part of a trainer (ndcp/trainers/NAME.py holds the whole Trainer, this part included as
`Trainer.behaviour`). It lives here, below the estimators, because the estimators look it up by
`RunSpec.trainer` (estimate/trainers.py trainer_behaviour) and must not import ndcp/trainers, which sits above
them (it emits and reads launch configurations). `specs.run.TRAINERS`, the validated trainer names, are the names
of BEHAVIOURS, so a trainer's name is written once.
"""
from __future__ import annotations

from dataclasses import dataclass

from .recompute import ATTENTION_CORE, OP_LEVEL_SAC

# Whose code casts the FP8 GEMMs' operands (TrainerBehaviour.fp8_casts; estimate/fp8.py layer_cast_bytes prices each)
FP8_CASTS = ("transformer_engine", "torchao")
# The cross-entropy implementations the output layer's loss runs (TrainerBehaviour.loss_kernel, RunSpec.loss_kernel;
# estimate/time.py loss_bytes_per_logit prices each): Megatron-Core's unfused vocab-parallel cross entropy, its fused
# `native` one (--cross-entropy-loss-fusion), Transformer Engine's Triton one (--cross-entropy-fusion-impl te),
# flash-attn's fused cross entropy (llm-foundry's default loss_fn fused_crossentropy) and PyTorch's eager cross
# entropy on fp32 logits (torchtitan and the other PyTorch trainers)
LOSS_KERNELS = ("unfused", "native", "te", "flash", "eager")
# Megatron-LM's own default loss kernel: --cross-entropy-loss-fusion off (ModelParallelConfig.cross_entropy_loss_fusion
# False at core_r0.8.0 and d98e8a6), so language_module.py compute_language_model_loss runs
# tensor_parallel.vocab_parallel_cross_entropy. What a Megatron run that does not state its loss ran (a measured row
# without training.loss_kernel, a --strategy-from file without the flag); ndcp's own files run MEGATRON.loss_kernel
MEGATRON_LM_LOSS_KERNEL = "unfused"


@dataclass(frozen=True)
class TrainerBehaviour:
    """One trainer's behaviour as the estimators price it, each field with the source it was read from."""

    name: str
    version: str  # the release whose code the facts below were read from
    # Data-parallel sharding keeps fp32 parameters (sharded like the optimizer states, cast to the compute dtype when
    # gathered) instead of 16-bit parameters plus an fp32 master copy (estimate/memory.py state_bytes_per_param).
    fp32_sharded_parameters: bool
    # Data-parallel sync (estimate/trainers.py data_parallel_sync; docs/formulas.md §7). The ZeRO stages whose
    # gradients accumulate in a full buffer and are reduced once per step by default; the others reduce after every
    # micro-batch.
    grad_sync_per_step: tuple[int, ...]
    # ZeRO-3 parameter gathers by default (specs.run.PARAM_GATHERS), without pipeline parallelism.
    zero3_gather: str
    # With pipeline parallelism, gradients accumulate unsharded and gathered parameters stay gathered over the step's
    # micro-batches: one reduction and (ZeRO-3) one gather per step, the stage's parameters held unsharded.
    pipeline_holds_step: bool
    # With pipeline parallelism, the pipeline runtime keeps every micro-batch's stage output, and a receive buffer per
    # micro-batch for activations and for gradients, over the whole step (estimate/pipeline_buffers.py); False: sent
    # outputs are freed and receives go to fresh tensors (Megatron's deallocate_output_tensor).
    pipeline_keeps_buffers: bool
    # ZeRO-3 without pipeline parallelism keeps the root module (embedding, final norm, output) gathered.
    keeps_root_gathered: bool
    # Activations of dense attention/MLP blocks follow the trainer's own op-level inventory (eager autograd, and
    # its selective checkpoint policy) instead of Megatron/Transformer Engine's (estimate/activations.py).
    op_level_inventory: bool
    # fp32 copies of the logits alive at the start of backward under an eager loss (the loss path,
    # estimate/activations.py logit_bytes_per_logit; torchtitan's compiled loss, RunSpec.compile_loss, holds
    # 16-bit ones).
    fp32_logit_copies: int
    # The loss kernel it runs by default (one of LOSS_KERNELS; RunSpec.loss_kernel "trainer"), priced by
    # estimate/time.py loss_bytes_per_logit.
    loss_kernel: str
    # FP8 training keeps FP8 copies of the linear weights next to (or, with --fp8-param-gather, instead of) the
    # 16-bit ones (estimate/fp8.py weight_copy_bytes_per_parameter); False: the weights are cast per GEMM.
    fp8_weight_copies: bool
    # FP8 training saves the FP8-cast input of each linear layer for its weight gradient (estimate/fp8.py
    # linear_input_bytes); False: the 16-bit input, as in BF16.
    fp8_saves_cast_inputs: bool
    # Which code casts the FP8 GEMMs' operands, one of FP8_CASTS, and so what the casts move (estimate/fp8.py
    # layer_cast_bytes): "transformer_engine" (fused cast kernels, one cast per operand) or "torchao" (torchao
    # Float8Linear, tensorwise: amax and cast per operand in both passes, layout copies for torch._scaled_mm).
    fp8_casts: str
    # The overlaps (specs.run.OVERLAPS) it runs by default: what RunSpec.overlap "trainer" asks for
    # (estimate/overlap.py requested; docs/formulas.md §7.1).
    default_overlaps: frozenset[str]
    # Without userbuffers, under sequence parallelism, each column-parallel linear layer re-gathers its saved input
    # shard for its weight gradient behind its input-gradient GEMM and reduce-scatters its input gradient behind its
    # weight-gradient GEMM (estimate/overlap.py sp_backward_exposed); False: the backward's all-gathers and
    # reduce-scatters run in autograd order, waited on by the next op, and the gathered input is saved (none
    # re-gathered).
    sp_backward_async: bool
    # The FSDP its ZeRO-2/3 runs (specs.run.FSDP_VERSIONS; RunSpec.fsdp_version "trainer"): "fsdp2" (PyTorch
    # fully_shard), else "none" (its own, with no pass over the gradients before the reduce-scatter); and the
    # PyTorch FSDPs a run under it may name instead (estimate/data_parallel.py gradient_pass_bytes).
    fsdp: str = "none"
    fsdp_versions: tuple[str, ...] = ()
    # What its `selective` option re-runs in backward (specs/recompute.py pieces) on the layers its op-level
    # inventory covers (estimate/rerun.py trainer_reruns): the attention core (Korthikanti's selective recompute,
    # Megatron-Core's core_attn) or its own op-level policy (OP_LEVEL_SAC).
    selective_reruns: tuple[str, ...] = (ATTENTION_CORE,)
    # The weight GEMMs (aten.mm) of its dense block in forward order, by projection (estimate/compute.py
    # BLOCK_PROJECTIONS), which an op-level policy counts; () when it has none.
    block_mm_order: tuple[str, ...] = ()


MEGATRON = TrainerBehaviour(
    name="megatron", version="Megatron-Core 0.8-0.12 with Transformer Engine", fp32_sharded_parameters=False,
    # DDP and the distributed optimizer accumulate into the main-grad buffer and reduce at the last micro-batch
    # (--overlap-grad-reduce); Megatron FSDP optim_grads / optim_grads_params (ZeRO-2/3) reduce-scatter every
    # micro-batch and re-gather parameters for backward, as DeepSpeed ZeRO-2/3 do (no no_sync with ZeRO-2/3).
    grad_sync_per_step=(0, 1), zero3_gather="forward-backward", pipeline_holds_step=False,
    pipeline_keeps_buffers=False,  # core/pipeline_parallel/schedules.py deallocate_output_tensor
    keeps_root_gathered=False, op_level_inventory=False,
    fp32_logit_copies=1,  # vocab-parallel cross entropy casts the logits to fp32 once, softmax in place
    # the fused native loss its files run: ndcp's Megatron emitter writes --cross-entropy-loss-fusion (impl native, its
    # default at d98e8a6: fusions/fused_cross_entropy.py) unless the run asks for --loss-kernel unfused, as NVIDIA's
    # recipes run a fused loss (NeMo 2 GPTConfig cross_entropy_loss_fusion True, nemo/collections/llm/gpt/model/
    # base.py @0175f4c6; Megatron-Bridge's performance recipes, scripts/performance/utils/overrides.py @067f987d).
    # Megatron-LM's own default is MEGATRON_LM_LOSS_KERNEL (unfused): what a run that states no loss is priced with
    loss_kernel="native",
    fp8_weight_copies=True,  # Transformer Engine keeps FP8 weight copies (estimate/fp8.py)
    fp8_saves_cast_inputs=True,  # Transformer Engine's linear layers save the FP8 input (docs/formulas.md §3.1)
    fp8_casts="transformer_engine",
    # Megatron-LM arguments.py: --overlap-p2p-communication defaults on (it takes effect when interleaving);
    # --tp-comm-overlap and --overlap-moe-expert-parallel-comm default off
    default_overlaps=frozenset({"p2p"}),
    # Megatron-LM core/tensor_parallel/layers.py @d98e8a6 LinearWithGradAccumulationAndAsyncCommunication.backward
    # (all_gather async, dgrad, wait; reduce_scatter async, wgrad, wait); Transformer Engine's linear layers the same
    # (transformer_engine/pytorch/module/layernorm_linear.py @d0067d0 L787-791 gather_along_first_dim async_op=True
    # before the dgrad GEMM, L904-908 reduce_scatter_along_first_dim async_op=True before wgrad; layernorm_mlp.py L1191)
    sp_backward_async=True,
    # Megatron-Core: the weight-gradient GEMMs accumulate into the fp32 main-grad buffer (gradient_accumulation_fusion)
    # that DDP, the distributed optimizer and Megatron FSDP reduce from: no pass. Its rows that another PyTorch trainer
    # ran name that trainer's FSDP (llm-foundry and fms-fsdp: fsdp1)
    fsdp="none", fsdp_versions=("fsdp1", "fsdp2"),
)
TORCHTITAN = TrainerBehaviour(
    name="torchtitan",
    version="torchtitan 0.1-0.3.0 (FSDP2, op-level SAC; activations measured on 0.3.0 with torch 2.13)",
    fp32_sharded_parameters=True,  # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), apply_fsdp
    grad_sync_per_step=(),  # train.py train_step: forward_backward_step per micro-batch, gradient sync left on
    zero3_gather="forward-backward",  # fully_shard: reshard_after_forward=True for the transformer blocks
    # torch.distributed.pipelining stage.backward_maybe_with_nosync: DDP no_sync, FSDP set_requires_gradient_sync
    # (False) and set_reshard_after_backward(False) until the last backward; apply_fsdp: reshard_after_forward=False
    # when PP is on
    pipeline_holds_step=True,
    # torch.distributed.pipelining stage.py (torch 1963fc8, 2024-12): per-micro-batch receive buffers allocated once,
    # output_chunks appended by every stage's forward_one_chunk and cleared at the next step
    pipeline_keeps_buffers=True,
    keeps_root_gathered=True,  # fully_shard: the root's reshard_after_forward is False
    op_level_inventory=True,  # parallelize_llama._apply_ac_to_transformer_block
    fp32_logit_copies=3,  # log_softmax output, nll_loss gradient, log_softmax input gradient
    loss_kernel="eager",  # cross_entropy(pred.float(), labels) (compiled under RunSpec.compile_loss instead)
    fp8_weight_copies=False,  # torchao Float8Linear casts the weight per GEMM and keeps no copy
    # torchao float8_linear.py save_for_backward(input_hp, weight_hp_t): the 16-bit input; measured on torchtitan
    # 0.3.0 with torchao 0.18.0 (docs/saved_tensors.yaml: FP8 keeps the BF16 activations)
    fp8_saves_cast_inputs=False,
    # torchtitan's float8 converter swaps nn.Linear for torchao Float8Linear (components/quantization/float8.py
    # @e7c0cae, the Trainy rows' torchtitan; torchao @0afa4c1 float8_linear.py, float8_ops.py: estimate/fp8.py)
    fp8_casts="torchao",
    default_overlaps=frozenset(),  # torch.distributed.pipelining runs its sends blocking
    # DTensor (torch/distributed/tensor/_redistribute.py Redistribute.backward, parallel/style.py ColwiseParallel,
    # RowwiseParallel, PrepareModuleInput; read at torch main, 2025, not pinned to the rows' torch version): the
    # backward redistributes each gradient in autograd order after the node's dgrad and wgrad GEMMs, the next op
    # waits on it; the linear saves its gathered (Replicate) input, so nothing is re-gathered
    sp_backward_async=False,
    fsdp="fsdp2", fsdp_versions=("fsdp2",),  # parallelize.py apply_fsdp: fully_shard per block
    # Op-level SAC (selective_ac_option "op", the llama3 configs' default): torchtitan e7c0cae models/llama3/
    # parallelize_llama.py _apply_ac_to_transformer_block and _save_list (0.3.0: distributed/activation_checkpoint.py)
    # mark MUST_SAVE the outputs of aten.mm, the SDPA flash/efficient kernels, c10d reduce_scatter_tensor and aten.max,
    # except every second aten.mm of the block, and PREFER_RECOMPUTE all else. torchao's Float8Linear calls torch.mm
    # on its Float8 tensors (pytorch/ao @0afa4c1 float8/float8_linear.py matmul_with_hp_or_float8_args.forward;
    # float8_ops.py float8_mm runs torch._scaled_mm beneath), so the policy counts the same mms under FP8. Measured:
    # docs/saved_tensors.yaml (backward_gemms, eager and compiled kept bytes); docs/formulas.md §5.7.
    selective_reruns=(OP_LEVEL_SAC,),
    # 0.3.0's block (models/common/attention.py FusedQKVLinear, feed_forward.py w2(silu(w1(x)) * w3(x))): wo and w3
    # re-run. The benchmarked e7c0cae and Dec 2024 3f20451b blocks run wq, wk, wv apart (RunSpec.qkv_projections
    # separate, estimate/activations.py block_mms: wk, wo, w3 re-run; measured, docs/saved_tensors.yaml)
    block_mm_order=("wqkv", "wo", "w1", "w3", "w2"),
)
# MindFormers 1.6.0 (mindspore-lab/mindformers fd4deebc) on MindSpore: no fact below was read from MindFormers or
# MindSpore source or measured; each is Megatron's, not verified, so its memory and time estimates are Megatron's
# except for what the recompute options drop and re-run (specs/recompute.py: its select set, read from
# mindformers/models/utils.py LayerSetting). What is known to differ is stated where it applies.
MINDFORMERS = TrainerBehaviour(
    name="mindformers", version="MindFormers 1.6.0 on MindSpore 2.5+ (facts as Megatron's, not verified)",
    # as Megatron's, not verified: MindFormers configs keep param_init_type float32 with a bf16 compute_dtype, and
    # how MindSpore's optimizer parallelism stores the parameters it shards was not read
    fp32_sharded_parameters=False,
    grad_sync_per_step=(0, 1),  # as Megatron's, not verified (gradient_accumulation_shard under ZeRO-3 not priced)
    zero3_gather="forward-backward",  # as Megatron's, not verified
    pipeline_holds_step=False,  # as Megatron's, not verified
    pipeline_keeps_buffers=False,  # as Megatron's, not verified
    keeps_root_gathered=False,  # as Megatron's, not verified
    # as Megatron's Transformer Engine inventory, not verified: MindSpore's autograd on LlamaFeedForward keeps the
    # SiLU output as well as the gate, up and product (one more ffn-wide tensor than Megatron's fused SwiGLU), and
    # without select_comm_recompute the all-gathered norm output under sequence parallelism; both are left out
    op_level_inventory=False,
    fp32_logit_copies=1,  # as Megatron's, not verified
    # as Megatron-LM's default, not verified (the most bytes of LOSS_KERNELS: conservative); its emitter states no loss
    loss_kernel=MEGATRON_LM_LOSS_KERNEL,
    fp8_weight_copies=True,  # as Megatron's, not verified
    fp8_saves_cast_inputs=True,  # as Megatron's, not verified
    fp8_casts="transformer_engine",  # as Megatron's, not verified
    default_overlaps=frozenset({"p2p"}),  # as Megatron's, not verified
    sp_backward_async=True,  # as Megatron's, not verified (MindSpore's sequence-parallel backward was not read)
)
BEHAVIOURS: dict[str, TrainerBehaviour] = {b.name: b for b in (MEGATRON, TORCHTITAN, MINDFORMERS)}

__all__ = ["TrainerBehaviour", "BEHAVIOURS", "FP8_CASTS", "LOSS_KERNELS", "MEGATRON_LM_LOSS_KERNEL", "MEGATRON",
           "TORCHTITAN", "MINDFORMERS"]
