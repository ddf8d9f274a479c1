"""The command line's process start and end (ndcp/cli/startup.py): CP-SAT's module loads without pandas, and nothing
else notices; the program (not library callers) collects cyclic garbage rarely and exits with everything frozen."""
import importlib.machinery
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from ndcp.cli.startup import COLLECT_AFTER, _Loader


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_search_from_the_command_line_never_loads_pandas_and_a_later_import_gets_the_real_one():
    out = _run("""
        import contextlib, io, json, sys
        from ndcp.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as text:
            code = main(["search", "llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "32",
                         "--seq-len", "2048", "--recompute", "uniform", "--top", "1", "--json", "-", "--quiet"])
        print(code, json.loads(text.getvalue())["status"], "pandas" in sys.modules)
        # `sweep` registers with every command; its process pool loads only when a sweep runs
        print("multiprocessing" in sys.modules, "concurrent.futures" in sys.modules)
        import pandas
        print(int(pandas.Series([1, 2]).sum()))
    """)
    assert out.split() == ["0", "optimal", "False", "False", "False", "3"]


def test_a_module_that_needs_more_of_pandas_than_the_stand_in_is_loaded_with_the_real_pandas(tmp_path):
    path = tmp_path / "needs_frames.py"
    path.write_text("import pandas as pd\nFRAME = pd.DataFrame\n")
    out = _run(f"""
        import importlib.machinery, importlib.util, sys
        from ndcp.cli.startup import _Loader
        loader = _Loader(importlib.machinery.SourceFileLoader("needs_frames", {str(path)!r}))
        spec = importlib.util.spec_from_loader("needs_frames", loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        print(module.FRAME.__module__.split(".")[0], type(sys.modules["pandas"].DataFrame).__name__)
    """)
    assert out.split() == ["pandas", "type"]


def test_the_wrapped_loader_answers_for_its_source():
    loader = _Loader(importlib.machinery.SourceFileLoader("startup", sys.modules["ndcp.cli.startup"].__file__))
    assert "defer_pandas" in loader.get_source("startup")


def test_the_program_collects_garbage_rarely_and_exits_with_everything_frozen():
    out = _run("""
        import contextlib, gc, io, runpy, sys
        sys.argv = ["ndcp", "devices"]
        before = gc.get_threshold()[0], gc.get_freeze_count()
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                runpy.run_module("ndcp", run_name="__main__")  # python -m ndcp
            except SystemExit as done:
                code = done.code
        print(code, *before, gc.get_threshold()[0], gc.get_freeze_count() > 0, gc.get_count()[0])
    """)
    code, threshold_before, frozen_before, threshold, frozen, pending = out.split()
    assert (code, frozen_before) == ("0", "0") and int(threshold_before) < COLLECT_AFTER  # CPython's default: 700
    assert (int(threshold), frozen) == (COLLECT_AFTER, "True")
    assert int(pending) < 100  # frozen at exit: nothing left for the last collections to walk


def test_library_callers_keep_the_default_collector_and_the_console_script_is_the_program():
    out = _run("""
        import contextlib, gc, io
        default = gc.get_threshold()
        from ndcp.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["devices"])
        print(code, gc.get_threshold() == default, gc.get_freeze_count())
    """)
    assert out.split() == ["0", "True", "0"]
    scripts = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"ndcp": "ndcp.entry:console"}  # its signal handler first (tests/test_signals.py)
