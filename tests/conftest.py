"""The test process collects cyclic garbage as rarely as the `ndcp` program does (ndcp/cli/startup.py): the searches
under test allocate as the program's do (tests/solve/test_plans_vs_oracle.py and test_bounds.py: 7.7 s of garbage
collection in 5,141 collections with CPython's default, 1.5 s in 11; peak memory 321 vs 311 MB). Fixtures several test
files share are here too."""
import pytest
from hypothesis import settings

from ndcp.cli import main
from ndcp.cli.startup import collect_less

collect_less()

# Property tests draw the same examples on every run (the suite's verdict is a function of the code, as CI needs:
# a randomly drawn failure once failed a CI run on code that had passed here). `pytest --hypothesis-profile=explore`
# draws fresh random examples to look for new counter-examples before a change lands (docs/extending.md); a case
# it finds becomes a fixed test.
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("default")


@pytest.fixture(scope="session")
def tiny_megatron_file(tmp_path_factory):
    """A running job's configuration for `ndcp replan`: tiny on 8 H100, as `ndcp search --emit megatron` writes it."""
    path = tmp_path_factory.mktemp("running") / "megatron.sh"
    assert main(["search", "tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024",
                 "--emit", "megatron", "--emit-file", str(path), "-q"]) == 0
    return path
