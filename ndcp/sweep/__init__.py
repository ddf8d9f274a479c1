"""`ndcp sweep`: many independent proven searches (devices x GPU counts x batches x lengths) turned into time to
train, GPU-hours and cost, run in this process, in local worker processes or on a Ray cluster (docs/sweep.md)."""
from .executors import EXECUTORS, run_jobs
from .points import SweepPoint, sweep_points
from .solve import Job, derive, solve_job

__all__ = ["EXECUTORS", "run_jobs", "SweepPoint", "sweep_points", "Job", "derive", "solve_job"]
