"""The test process collects cyclic garbage as rarely as the `ndcp` program does (ndcp/cli/startup.py): the searches
under test allocate as the program's do (tests/solve/test_plans_vs_oracle.py and test_bounds.py: 7.7 s of garbage
collection in 5,141 collections with CPython's default, 1.5 s in 11; peak memory 321 vs 311 MB)."""
from ndcp.cli.startup import collect_less

collect_less()
