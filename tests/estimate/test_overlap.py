"""Communication overlapped with compute (estimate/overlap.py; docs/formulas.md §7.1): each overlap applies only
where its trainer's condition holds, moves time from exposed to hidden without changing the total, and the time
breakdown reports both."""
import pytest

from ndcp.estimate.overlap import hidden_comms, layer_overlaps, requested
from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.estimate.layer_time import layer_time
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model

RUN = RunSpec(global_batch=64, seq_len=4096)


def _run(overlap: str) -> RunSpec:
    return RunSpec(global_batch=64, seq_len=4096, overlap=overlap)


def test_trainer_defaults_overlap_the_pipeline_sends_only_when_interleaving():
    assert requested(RUN) == {"p2p"}  # Megatron-LM: --overlap-p2p-communication on, the others off
    assert requested(RunSpec(global_batch=8, seq_len=1024, trainer="torchtitan")) == set()
    assert hidden_comms(RUN, "interleaved", 4, 2, 1, False, 1) == {"p2p"}
    assert hidden_comms(RUN, "1f1b", 4, 1, 1, False, 1) == set()  # Megatron turns it off without interleaving


def test_each_requested_overlap_needs_its_condition():
    run = _run("ep+tp+p2p")
    # EP all-to-all overlap: ep > 1, and the interleaved schedule once pp > 1 (Megatron-Core TransformerConfig)
    assert "ep" in hidden_comms(run, "interleaved", 4, 2, 2, True, 8)
    assert "ep" not in hidden_comms(run, "1f1b", 4, 1, 2, True, 8)
    assert "ep" in hidden_comms(run, "1f1b", 1, 1, 2, True, 8)
    assert "ep" not in hidden_comms(run, "interleaved", 4, 2, 2, True, 1)
    # TP userbuffers: sequence parallelism (and tp > 1)
    assert "tp" in hidden_comms(run, "1f1b", 1, 1, 2, True, 1)
    assert "tp" not in hidden_comms(run, "1f1b", 1, 1, 2, False, 1)
    assert hidden_comms(_run("none"), "interleaved", 4, 2, 2, True, 8) == set()


def test_dualpipe_hides_the_all_to_all_and_the_sends_whatever_the_run_asks():
    assert hidden_comms(_run("none"), "dualpipe", 4, 1, 1, False, 8) == {"ep", "p2p"}
    assert hidden_comms(_run("none"), "dualpipev", 4, 1, 1, False, 1) == {"p2p"}  # no experts, no all-to-all


def test_a_moe_layer_that_reruns_its_all_to_all_keeps_it_exposed():
    assert layer_overlaps(frozenset({"ep", "tp"}), "moe", "full") == {"tp"}
    assert layer_overlaps(frozenset({"ep"}), "moe", "moe") == set()  # Megatron: no "moe" recompute module
    assert layer_overlaps(frozenset({"ep", "tp"}), "moe", "selective") == {"ep", "tp"}
    assert layer_overlaps(frozenset({"ep"}), "dense", "none") == set()
    assert layer_overlaps(frozenset({"p2p", "tp"}), "dense", "none") == {"tp"}  # between stages, not in a layer


MIXTRAL = load_model("mixtral-8x7b")
CLUSTER = ClusterSpec(device_preset("h100"), 16)


@pytest.mark.parametrize("hidden,tp,sp", [("ep", 1, False), ("tp", 4, True)])
def test_overlap_moves_time_from_exposed_to_hidden(hidden, tp, sp):
    layer = LayerKey("moe", "none", Degrees(tp, 1, 4, 1, 1, sp))
    plain = layer_time(MIXTRAL, CLUSTER, RUN, layer)
    overlapped = layer_time(MIXTRAL, CLUSTER, RUN, layer._replace(hidden=frozenset({hidden})))
    key = f"{hidden}_comm"
    assert getattr(overlapped, f"{hidden}_hidden") > 0
    assert getattr(overlapped, key) + getattr(overlapped, f"{hidden}_hidden") == pytest.approx(getattr(plain, key))
    assert overlapped.total < plain.total
    assert (overlapped.forward, overlapped.backward, overlapped.wgrad) == (plain.forward, plain.backward, plain.wgrad)


def test_the_breakdown_reports_hidden_communication():
    strategy = Strategy(dp=2, tp=2, pp=4, vpp=2, ep=2, mbs=1, mbn=32, sp=True, schedule="interleaved")
    run = RunSpec(global_batch=64, seq_len=4096, overlap="ep+tp+p2p")
    plain, overlapped = estimate_time(MIXTRAL, CLUSTER, _run("none"), strategy), estimate_time(MIXTRAL, CLUSTER, run,
                                                                                                 strategy)
    out = overlapped.as_dict()["hidden_comm"]
    assert set(out) == {"tp_comm", "ep_comm", "pp_comm"} and all(v > 0 for v in out.values())
    assert overlapped.parts["pp_comm"] == 0 and plain.as_dict()["hidden_comm"] == dict.fromkeys(out, 0.0)
    assert overlapped.step_seconds < plain.step_seconds


@pytest.mark.parametrize("value", ["ep+ep", "nvlink", "", "ep,tp"])
def test_overlap_setting_is_validated(value):
    with pytest.raises(SpecError, match="overlap"):
        RunSpec(global_batch=8, seq_len=1024, overlap=value)
