"""Signals (issue #36): the `ndcp` program handles SIGINT and SIGTERM from its first instruction; the first is
answered (a search's best verified plan and bound, or `unknown`; one line otherwise), a second exits at once, and a
signal after the answer keeps the answer's exit code. Real signals in fresh processes (ndcp.entry)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "512"]
LLAMA = ["llama3-70b", "--device", "h100", "--gpus", "512", "--global-batch", "1024", "--seq-len", "8192"]


def _start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ndcp", *args], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _signalled(process: subprocess.Popen, after: float, signum=signal.SIGINT) -> tuple[int, str, str]:
    time.sleep(after)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


@pytest.mark.parametrize("after", [0.0, 0.03, 0.1, 0.25])
def test_ctrl_c_while_the_program_imports_is_one_line(after):
    """SIGINT `after` seconds from the console script's first instruction (ndcp.entry.console), where the imports
    of the command line run."""
    script = textwrap.dedent(f"""
        import os, signal, sys, threading, time
        sys.argv = ["ndcp", "search", *{TINY!r}]
        from ndcp import entry

        def interrupt():  # {after} s after the handler is in place
            while not isinstance(signal.getsignal(signal.SIGINT), entry.Signals):
                time.sleep(0.0005)
            time.sleep({after})
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        raise SystemExit(entry.console())
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and done.returncode in (0, 4), done.stderr
    if done.returncode == 4:
        assert done.stderr.strip() == "ndcp: unknown: interrupted before any strategy was verified"


def test_an_interrupt_raised_where_python_ignores_exceptions_is_delivered_again_after_it():
    """A weakref callback's exceptions are "ignored" by Python (printed with a traceback, then lost): the first
    signal landing in one (importlib's module-lock callback, while the command line imports) is delivered again once
    the callback has returned (Signals.unraisable, the program's sys.unraisablehook), so it interrupts as any other."""
    script = textwrap.dedent("""
        import os, signal, sys, weakref
        from ndcp import entry
        handler = entry.Signals()
        signal.signal(signal.SIGINT, handler)
        sys.unraisablehook = handler.unraisable

        class Thing:
            pass

        def callback(_):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100000):  # the handler runs here, inside the callback
                pass

        try:
            thing = Thing()
            ref = weakref.ref(thing, callback)
            del thing
            for _ in range(10 ** 7):
                pass
            print("lost")
        except KeyboardInterrupt:
            print("interrupted", handler.count)
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert (done.stdout.strip(), done.stderr) == ("interrupted 1", "")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_exhaustive_search_answers_the_signal_with_its_best_so_far(tmp_path, signum):
    out_json = tmp_path / "out.json"
    code, out, err = _signalled(_start("search", *LLAMA, "--exhaustive", "--recompute", "uniform", "--quiet",
                                       "--json", str(out_json)), 4.0, signum)
    assert code == 0 and "Traceback" not in err, err
    document = json.loads(out_json.read_text())
    assert document["status"] == "feasible" and document["strategies"]
    assert document["explanation"].startswith("Ctrl-C: priced")


def test_the_second_signal_exits_at_once_and_one_after_the_answer_keeps_its_code():
    script = textwrap.dedent("""
        import os, signal, sys
        from ndcp.entry import Signals
        handler = Signals()
        try:
            handler(signal.SIGINT, None)
        except KeyboardInterrupt:
            print("first: KeyboardInterrupt", flush=True)
        if sys.argv[1] == "answered":
            handler.answered = 1
        handler(signal.SIGTERM, None)
        print("not reached", flush=True)
    """)
    for case, expected_code in (("again", 130), ("answered", 1)):
        done = subprocess.run([sys.executable, "-c", script, case], env={**os.environ, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (expected_code, "first: KeyboardInterrupt\n"), done.stderr
        assert done.stderr == ("ndcp: SIGTERM again: stopped at once\n" if case == "again" else "")


def test_sigint_at_moments_spread_over_a_search_script():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import sigint_moments
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert sigint_moments.main(["--moments", "4", "--", *TINY]) == 0


def test_the_fuzzers_limit_cases_behave():
    """A few of scripts/fuzz_limits.py's cases of each category (fuzz_cli.py --limits runs many)."""
    import random

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import fuzz_limits
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    rng = random.Random(3)
    for index, category in enumerate(fuzz_limits.CATEGORIES * 2):
        case = category(rng)
        with tempfile.TemporaryDirectory() as folder:
            argv, paths = fuzz_limits.materialise(case, Path(folder), index)
            code, out, err, seconds = fuzz_limits.run_limit_case(case, argv, guard=60)
            assert fuzz_limits.judge(case, paths, code, out, err, seconds) is None, case.describe()
