"""Why a search found nothing (ndcp.solve.explain): the refusing rules, and the global batch only where it is the
cause."""
from ndcp.api import search


def test_a_batch_no_reachable_data_parallel_size_divides_is_named_with_the_sizes():
    doc = search("llama3-8b", device="h100", gpus=8, global_batch=3, seq_len=4096, max="tp=1,pp=1,cp=1")
    assert doc["status"] == "infeasible"
    assert "global batch 3 divides by" in doc["explanation"] and "multiple of one of them" in doc["explanation"]


def test_a_trainer_that_cannot_run_the_models_layers_is_the_reason_not_the_batch():
    """torchtitan runs no gated-DeltaNet layers (rule trainer_mixers): every layout is refused before a data-parallel
    size is reached, so no batch advice (there was: 'sizes these GPUs allow are []; ... try a global batch')."""
    doc = search("qwen3-next-80b-a3b", device="h100", gpus=256, global_batch=256, seq_len=131072, trainer="torchtitan")
    assert doc["status"] == "infeasible"
    assert "trainer_mixers" in doc["explanation"] and "global batch" not in doc["explanation"]
