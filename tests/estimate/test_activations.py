"""The loss path's logits (estimate/activations.py head_activation_bytes, logit_bytes_per_logit): eager torchtitan
holds three fp32 copies of the logits at the start of the loss's backward, Megatron's vocab-parallel cross entropy
one whichever kernel runs it (RunSpec.loss_kernel), flash-attn's the 16-bit logits; torchtitan's compiled loss
(RunSpec.compile_loss) the 16-bit logits it saved and their 16-bit gradient. A hybrid model's recompute modules drop
their tensors in the blocks they act on (layer_activation_bytes); Megatron's layernorm module the outputs of the
norms that are separate modules."""
import dataclasses

import pytest

from ndcp.estimate.activations import (head_activation_bytes, layer_activation_bytes, layer_inventory,
                                       logit_bytes_per_logit)
from ndcp.estimate.keys import Degrees
from ndcp.specs import RunSpec
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from ndcp.specs.recompute import OPTION_BY_NAME, attention_norm_fused

LLAMA8 = load_model("llama3-8b")  # vocabulary 128,256
EAGER = RunSpec(global_batch=64, seq_len=8192, trainer="torchtitan", torch_compile=True)
COMPILED_LOSS = dataclasses.replace(EAGER, compile_loss=True)


def logits(run: RunSpec, tp: int = 1, mbs: int = 2) -> float:
    return head_activation_bytes(LLAMA8, run, tp, 1, mbs, False)["logits"]


def test_eager_torchtitan_loss_holds_three_fp32_copies_of_the_logits():
    """The Trainy 8B rows' micro-batch: 2 x 8192 tokens x 128,256 logits x 3 copies x 4 bytes = 23.5 GiB."""
    assert logits(EAGER) == 2 * 8192 * 128_256 * 3 * 4
    assert logits(EAGER) / 2**30 == pytest.approx(23.48, abs=0.01)


def test_a_compiled_loss_holds_the_bf16_logits_and_their_bf16_gradient():
    """Inductor saves the bf16 logits (not an fp32 log_softmax) and writes only the bf16 gradient: 2 x 2 bytes per
    logit, 7.8 GiB on the same micro-batch; a third of the eager loss's bytes."""
    assert logit_bytes_per_logit(COMPILED_LOSS) == 4
    assert logits(COMPILED_LOSS) == 2 * 8192 * 128_256 * 2 * 2
    assert logits(COMPILED_LOSS) / 2**30 == pytest.approx(7.83, abs=0.01)
    assert logits(COMPILED_LOSS) * 3 == logits(EAGER)


def test_the_compiled_loss_is_independent_of_the_compiled_blocks_and_vocabulary_sharded_under_tp():
    """compile.components [loss] alone (deepseek_v3_671b's registry config) prices the same loss; TP's loss
    parallel shards the vocabulary."""
    loss_only = dataclasses.replace(COMPILED_LOSS, torch_compile=False)
    assert logits(loss_only) == logits(COMPILED_LOSS)
    assert logits(COMPILED_LOSS, tp=4) == logits(COMPILED_LOSS) / 4


def test_megatron_keeps_its_one_fp32_copy():
    megatron = RunSpec(global_batch=64, seq_len=8192)
    assert logit_bytes_per_logit(megatron) == 4
    assert logits(megatron) == 2 * 8192 * 128_256 * 4


@pytest.mark.parametrize("kernel", ["unfused", "native", "te"])
def test_megatrons_loss_kernels_each_hold_one_fp32_logit_tensor(kernel):
    """The unfused and native losses save the fp32 softmax they computed in place, Transformer Engine's the fp32
    gradient it wrote in forward: one fp32 copy whichever runs (RunSpec.loss_kernel changes the time only)."""
    assert logit_bytes_per_logit(RunSpec(global_batch=64, seq_len=8192, loss_kernel=kernel)) == 4


def test_flash_attns_loss_saves_the_bf16_logits():
    """flash-attn's fused cross entropy saves the logits it was given (bf16) and the per-token log-sum-exp: 2 bytes
    per logit, half Megatron's."""
    flash = RunSpec(global_batch=64, seq_len=8192, loss_kernel="flash")
    assert logits(flash) == 2 * 8192 * 128_256 * 2


def test_the_loss_kernel_is_validated_against_the_trainer_and_the_compiled_loss():
    """One of trainer, unfused, native, te, flash, eager; Megatron's three with trainer megatron only; a compiled loss
    is its own kernel. Each message names the field, the value and what is valid."""
    with pytest.raises(SpecError, match="loss_kernel='fused' is not valid; valid: trainer, unfused, native, te, "
                                        "flash, eager"):
        RunSpec(global_batch=8, seq_len=128, loss_kernel="fused")
    with pytest.raises(SpecError, match="loss_kernel='te'.*trainer megatron only"):
        RunSpec(global_batch=8, seq_len=128, trainer="torchtitan", loss_kernel="te")
    with pytest.raises(SpecError, match="loss_kernel='eager'.*give loss_kernel trainer"):
        RunSpec(global_batch=8, seq_len=128, trainer="torchtitan", compile_loss=True, loss_kernel="eager")
    assert RunSpec(global_batch=8, seq_len=128, trainer="torchtitan", loss_kernel="flash").loss_kernel == "flash"


def test_a_compiled_loss_is_torchtitans_and_a_boolean():
    with pytest.raises(SpecError, match="compile_loss.*torchtitan"):
        RunSpec(global_batch=8, seq_len=128, compile_loss=True)
    with pytest.raises(SpecError, match="compile_loss.*valid: False, True"):
        RunSpec(global_batch=8, seq_len=128, trainer="torchtitan", compile_loss="model,loss")


def test_backward_temporaries_hand_counted():
    """activations.backward_workspace_bytes: the SwiGLU backward's layer output gradient (T·h, split by SP), fc2's
    input gradient and the gate and up gradients, less the freed SwiGLU output (T·F each, split by TP): B·T·(h + 2F),
    the same for torchtitan and Megatron."""
    from ndcp.estimate.activations import backward_workspace_bytes
    from ndcp.estimate.keys import Degrees
    tokens, h, ffn = 2 * 8192, 4096, 14336
    for trainer in ("torchtitan", "megatron"):
        run = RunSpec(global_batch=64, seq_len=8192, trainer=trainer)
        assert backward_workspace_bytes(LLAMA8, run, "dense", Degrees(1, 1, 1, 1, 2, False)) == \
            2 * tokens * (h + 2 * ffn)
        assert backward_workspace_bytes(LLAMA8, run, "dense", Degrees(4, 2, 1, 1, 2, True)) == \
            2 * tokens / 2 * (h + 2 * ffn) / 4
        assert backward_workspace_bytes(LLAMA8, run, "dense", Degrees(4, 1, 1, 1, 2, False)) == \
            2 * tokens * (h + 2 * ffn / 4)


def test_backward_temporaries_are_not_priced_without_a_measured_inventory():
    """MoE and MLA layers (DeepSeek-V3's dense layers), non-gated MLPs and scan mixers keep today's pricing: 0
    (docs/formulas.md §5.5)."""
    from ndcp.estimate.activations import backward_workspace_bytes
    from ndcp.estimate.keys import Degrees
    degrees = Degrees(1, 1, 1, 1, 1, False)
    run = RunSpec(global_batch=64, seq_len=4096)
    assert backward_workspace_bytes(LLAMA8, run, "moe", degrees) == 0
    assert backward_workspace_bytes(dataclasses.replace(LLAMA8, activation="gelu"), run, "dense", degrees) == 0
    assert backward_workspace_bytes(load_model("deepseek-v3"), run, "dense", degrees) == 0
    assert backward_workspace_bytes(load_model("nemotron-h-8b"), run, "dense", degrees) == 0


def test_module_options_on_a_hybrid_model_drop_only_their_blocks_tensors():
    """Nemotron-3 Nano (29 layers of the dense kind: 23 Mamba-2 and 6 attention blocks; 23 MoE blocks), bf16, seq 8192,
    tp 1, ep 8. core_attn drops the 6 attention blocks' softmax statistics (fp32, 32 heads x 8192 tokens each) and
    nothing of the Mamba-2 blocks: 6 cores' worth per body, not 52; layernorm drops only the MoE blocks' norm output
    (2 x 8192 x 2688 bytes), the other norms being fused into their first linear; under the H100 FP8 recipe's
    core_attn+layernorm+moe a MoE block keeps its input alone, as under full."""
    nano, run, degrees = load_model("nemotron-3-nano"), RunSpec(global_batch=64, seq_len=8192), Degrees(1, 1, 8, 1, 1,
                                                                                                         False)

    def dropped(kind, mode):
        return (layer_activation_bytes(nano, run, kind, "none", degrees)
                - layer_activation_bytes(nano, run, kind, mode, degrees))

    assert 29 * dropped("dense", "selective") == pytest.approx(6 * 4 * 32 * 8192)
    assert dropped("dense", "layernorm") == dropped("dense", "moe") == 0.0
    assert dropped("moe", "selective") == 0.0 and dropped("moe", "layernorm") == 2 * 8192 * 2688
    assert layer_activation_bytes(nano, run, "moe", "core_attn+layernorm+moe", degrees) == 2 * 8192 * 2688 \
        == layer_activation_bytes(nano, run, "moe", "full", degrees)
    assert dropped("dense", "core_attn+layernorm+moe") == dropped("dense", "selective")


@pytest.mark.parametrize("name,kind,tensors", [
    ("mixtral-8x7b", "moe", ("moe_input",)),  # attention norm fused into linear_qkv
    ("deepseek-v3", "dense", ("attention_input",)),  # MLA's separate input norm; the MLP norm fused into fc1
    ("deepseek-v3", "moe", ("attention_input", "moe_input"))])
def test_layernorm_drops_the_outputs_of_the_norms_that_are_separate_modules(name, kind, tensors):
    """Megatron-Core recomputes a norm only where it is not fused into a linear (transformer_layer.py, IdentityOp
    norms; gpt_layer_specs.py): layernorm drops the output of MLA's input norm and of a MoE layer's pre-MLP norm,
    each 2 x T x h bytes in bf16 (tp 1, mbs 1, seq 4096), nothing else."""
    model, run, degrees = load_model(name), RunSpec(global_batch=64, seq_len=4096), Degrees(1, 1, 8, 1, 1, False)
    dropped = (layer_activation_bytes(model, run, kind, "none", degrees)
               - layer_activation_bytes(model, run, kind, "layernorm", degrees))
    assert dropped == len(tensors) * 2 * 4096 * model.hidden
    inventory = [t.name for t in layer_inventory(model, run, kind == "moe", 1, 1, 1, 1, False)]
    drops = OPTION_BY_NAME["layernorm"].dropped(attention_norm_fused(model.mla is not None, model.hybrid_blocks))
    assert tuple(n for n in inventory if n in drops) == tensors
