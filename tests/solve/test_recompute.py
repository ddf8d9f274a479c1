"""Plan sub-models (ndcp/solve/recompute.py): equivalent items are solved once per search."""
from ndcp.solve.recompute import PlanModel
from ndcp.space import SearchSpace
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model


def test_items_with_the_same_sub_model_are_solved_once():
    # Llama-3.1-405B on 16,384 H100: cp 2 with micro-batch 1 and cp 4 with micro-batch 2 (dp 64 and 32) hold the
    # same tokens per device and shard over the same ranks; their sub-models are the same model, solved once
    space = SearchSpace(load_model("llama3.1-405b"), ClusterSpec(device_preset("h100"), 16384),
                        RunSpec(global_batch=2048, seq_len=8192, confidence=0.0))  # the point estimate, as found
    items = {(layout.cp, mbs): (layout, mbs, mbn) for layout, mbs, mbn in space.walk().batches
             if (layout.tp, layout.pp, layout.vpp, layout.schedule, layout.cp_comm, layout.optimizer_offload)
             == (8, 16, 7, "interleaved", "p2p", False)}
    _, _, modes = space.inner_choices(8)
    plans = [PlanModel(space, *items[key], True, tuple(modes), tuple(space.zero_stages(items[key][0])))
             for key in ((2, 1), (4, 2))]
    capacity = space.run.capacity(space.cluster.device.memory_bytes)
    solved: dict = {}
    first, second = (plan.solve(capacity, 30, solved=solved) for plan in plans)
    assert len(solved) == 1
    fresh = plans[1].solve(capacity, 30)  # the second item's own solve agrees with the one it was served
    assert (second.bound_seconds, second.assignment, second.proven) == (fresh.bound_seconds, fresh.assignment,
                                                                        fresh.proven)
    assert second.strategy == fresh.strategy
    assert (first.strategy.cp, first.strategy.mbs, second.strategy.cp, second.strategy.mbs) == (2, 1, 4, 2)
    # another item's sub-model is its own
    other = PlanModel(space, *items[(1, 1)], True, tuple(modes), tuple(space.zero_stages(items[(1, 1)][0])))
    other.solve(capacity, 30, solved=solved)
    assert len(solved) == 2
