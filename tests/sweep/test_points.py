"""Sweep points: the lists `ndcp sweep` takes and their product, in a fixed order."""
import pytest

from ndcp.specs import SpecError
from ndcp.sweep.points import (MAX_POINTS, SweepPoint, parse_counts, parse_devices, parse_gpus, parse_lengths,
                               sweep_points)


def test_gpu_lists_and_doubling_ranges():
    assert parse_gpus("256,512,1024") == [256, 512, 1024]
    assert parse_gpus("256..2048") == [256, 512, 1024, 2048]
    assert parse_gpus("256..1000") == [256, 512]  # doubling while at most END
    assert parse_gpus("8..8") == [8]
    assert parse_gpus("64, 64,128") == [64, 128]  # each once, in the given order


@pytest.mark.parametrize("text", ["", "256,,512", "1024..256", "x", "0", "256..x"])
def test_bad_gpu_lists_are_spec_errors(text):
    with pytest.raises(SpecError):
        parse_gpus(text)


def test_suffixes_counts_decimal_lengths_binary():
    assert parse_counts("--global-batch", "1024,2k") == [1024, 2000]
    assert parse_lengths("--seq-len", "4096,8k,128k") == [4096, 8192, 131072]
    with pytest.raises(SpecError, match="--seq-len: invalid length '8q'"):
        parse_lengths("--seq-len", "8q")
    assert parse_devices("h100,b200,./my.yaml,h100") == ["h100", "b200", "./my.yaml"]


def test_points_are_every_combination_device_major():
    points = sweep_points(["h100", "b200"], [8, 16], [32], [512, 1024])
    assert len(points) == 8
    assert points[0] == SweepPoint("h100", 8, 32, 512) and points[1] == SweepPoint("h100", 8, 32, 1024)
    assert points[2] == SweepPoint("h100", 16, 32, 512) and points[-1] == SweepPoint("b200", 16, 32, 1024)
    with pytest.raises(SpecError, match="at most"):
        sweep_points(["h100"], list(range(1, MAX_POINTS + 2)), [32], [512])
