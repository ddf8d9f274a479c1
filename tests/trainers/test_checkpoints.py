"""Which dimensions a strategy change reshards in the checkpoint, and whether each trainer's checkpoint format loads
them as saved (ndcp.trainers.checkpoints; sources in docs/trainers.md §6)."""
from ndcp.specs import Strategy
from ndcp.trainers import REGISTRY, trainer_named
from ndcp.trainers.checkpoints import RESHARDED, resharded

RUNNING = Strategy(dp=16, tp=4, pp=2, mbs=1, mbn=8, zero=1)


def test_the_dimensions_whose_shards_move():
    assert resharded(RUNNING, RUNNING) == ()
    assert resharded(RUNNING, Strategy(dp=8, tp=8, pp=2, mbs=1, mbn=16, zero=1)) == ("tp", "dp")
    assert resharded(RUNNING, Strategy(dp=16, tp=4, pp=2, vpp=2, mbs=1, mbn=8, zero=1)) == ("pp",)  # the layout
    assert resharded(RUNNING, Strategy(dp=16, tp=4, pp=2, mbs=1, mbn=8, zero=2)) == ("zero",)


def test_data_parallelism_moves_no_shard_without_zero_and_cp_alone_moves_none():
    replicated = Strategy(dp=16, tp=4, pp=2, mbs=1, mbn=8, zero=0)
    assert resharded(replicated, Strategy(dp=32, tp=4, pp=2, mbs=1, mbn=4, zero=0)) == ()
    # the distributed optimizer shards over dp x cp: the same product shards alike
    assert resharded(RUNNING, Strategy(dp=8, cp=2, tp=4, pp=2, mbs=1, mbn=16, zero=1)) == ()


def test_megatron_reshards_data_parallelism_but_its_default_optimizer_format_not_model_parallelism():
    megatron = trainer_named("megatron")
    wider = Strategy(dp=8, tp=8, pp=2, mbs=1, mbn=16, zero=1)
    assert megatron.reshard("dp", RUNNING, wider).loads
    tp = megatron.reshard("tp", RUNNING, wider)
    assert not tp.loads and "--dist-ckpt-optim-fully-reshardable" in tp.how
    fsdp = Strategy(dp=16, tp=4, pp=2, mbs=1, mbn=8, zero=3)
    assert megatron.reshard("tp", fsdp, Strategy(dp=8, tp=8, pp=2, mbs=1, mbn=16, zero=3)).loads  # fsdp_dtensor
    assert not megatron.reshard("zero", RUNNING, fsdp).loads  # torch_dist -> fsdp_dtensor


def test_torchtitan_reshards_the_model_everywhere_but_not_its_data_loader():
    torchtitan = trainer_named("torchtitan")
    fsdp = Strategy(dp=16, tp=4, pp=2, mbs=1, mbn=8, zero=3)
    assert torchtitan.reshard("tp", fsdp, Strategy(dp=16, tp=8, pp=1, mbs=1, mbn=8, zero=3)).loads
    loader = torchtitan.reshard("dp", fsdp, Strategy(dp=32, tp=4, pp=1, mbs=1, mbn=4, zero=3))
    assert not loader.loads and "exclude-from-loading dataloader" in loader.how


def test_every_trainer_answers_for_every_dimension_with_a_source():
    wider = Strategy(dp=4, tp=8, pp=4, mbs=1, mbn=32, zero=0)
    for trainer in REGISTRY.values():
        for dimension in RESHARDED:
            answer = trainer.reshard(dimension, RUNNING, wider)
            assert answer.dimension == dimension and answer.how and answer.source
