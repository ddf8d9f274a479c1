"""Optional plots: they render to PNG and SVG (by suffix) from real search results."""
import pytest

pytest.importorskip("matplotlib")

from ndcp.report.plots import plot_frontier, plot_search  # noqa: E402
from ndcp.solve.exhaustive import exhaustive_search  # noqa: E402
from ndcp.space import SearchSpace  # noqa: E402
from ndcp.specs import ClusterSpec, RunSpec, device_preset  # noqa: E402
from ndcp.specs.library import load_model  # noqa: E402
from ndcp.specs.units import GIB  # noqa: E402


def search(cap=0):
    m = load_model("tiny")
    cluster = ClusterSpec(device_preset("h100"), 8)
    run = RunSpec(global_batch=32, seq_len=1024, memory_cap_bytes=cap)
    return exhaustive_search(SearchSpace(m, cluster, run), top=10)


@pytest.fixture(scope="module")
def result():
    return search()


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_search(result, tmp_path, suffix):
    path = plot_search(result, tmp_path / f"search{suffix}")
    assert path.exists() and path.stat().st_size > 0
    if suffix == ".svg":
        text = path.read_text()
        assert "<svg" in text and "ndcp search: top" in text and "memory per stage" in text


def test_plot_search_title_and_bad_suffix(result, tmp_path):
    path = plot_search(result, tmp_path / "s.svg", top=3, title="my search title")
    assert "my search title" in path.read_text()
    with pytest.raises(ValueError):
        plot_search(result, tmp_path / "s.jpg")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_frontier(tmp_path, suffix):
    points = [(8 * GIB, 7 * GIB, 2.0), (16 * GIB, 15 * GIB, 1.5), (12 * GIB, 11 * GIB, 1.7),
              (24 * GIB, 20 * GIB, 1.6), (4 * GIB, None, None)]  # 24 GiB slower than 16: drawn monotone
    path = plot_frontier(points, tmp_path / f"frontier{suffix}")
    assert path.exists() and path.stat().st_size > 0
    if suffix == ".svg":
        assert "step time vs memory cap" in path.read_text()
    with pytest.raises(ValueError):
        plot_frontier([(4 * GIB, None, None)], tmp_path / f"empty{suffix}")


def test_plot_frontier_from_searches(tmp_path):
    points = []
    for cap in (2 * GIB, 80 * GIB):
        r = search(cap)
        best = r.best
        points.append((cap, best.memory.peak_bytes if best else None, best.step_seconds if best else None))
    path = plot_frontier(points, tmp_path / "f.png")
    assert path.stat().st_size > 0
