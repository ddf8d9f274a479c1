"""The sweep journal (--jsonl): checksummed lines, torn and corrupt lines dropped before anything is appended, every
field checked before an answer is reused, one sweep per journal at a time (issue #36, "Why" 2)."""
import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ndcp.specs import SpecError
from ndcp.sweep.journal import Journal, answer_problem, decode_line, encode_line, scan

ANSWER = {"device": "h100", "gpus": 512, "global_batch": 1024, "seq_len": 8192, "key": "k512", "status": "optimal",
          "strategy": "tp=8 pp=1", "label": "tp8 pp1", "step_seconds": 14.0, "mfu": 0.53,
          "tokens_per_second": 1024 * 8192 / 14.0, "explanation": None, "solve_seconds": 1.0}
NOTHING_FITS = {**ANSWER, "key": "k8", "gpus": 8, "status": "infeasible", "strategy": None, "label": None,
                "step_seconds": None, "mfu": None, "tokens_per_second": None, "explanation": "no strategy fits"}


def test_a_line_is_the_answer_and_its_checksum_and_reads_back_whole():
    line = encode_line(ANSWER)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert set(json.loads(line)) == {"answer", "crc32"}
    assert decode_line(line[:-1]) == ANSWER
    carried = {**ANSWER, "goodput": {"fraction": 0.9}}  # keys other parts of the sweep add are kept as they are
    assert decode_line(encode_line(carried)[:-1]) == carried


def test_a_line_cut_short_or_edited_is_not_an_answer():
    line = encode_line(ANSWER)[:-1]
    assert decode_line(line[:-30]) is None
    assert decode_line(line.replace(b'"step_seconds":14.0', b'"step_seconds":13.0')) is None  # checksum
    assert decode_line(b'{"device": "h100"}') is None and decode_line(b"\xff\xfe") is None
    assert decode_line(b"[" * 100_000) is None


@pytest.mark.parametrize("change, why", [
    ({"step_seconds": "abc"}, "out of range"), ({"step_seconds": -5.0}, "out of range"),  # the probe's two
    ({"step_seconds": float("inf")}, None), ({"mfu": 1.5}, "out of range"), ({"gpus": 0}, "no point"),
    ({"gpus": True}, "no point"), ({"status": "great"}, "no status"), ({"key": 7}, "no problem key"),
    ({"tokens_per_second": 1.0}, "not tokens / step time"), ({"strategy": None}, "no strategy"),
    ({"solve_seconds": -1}, "no solve time"), ({"label": 5}, "no text"),
])
def test_every_field_the_sweep_reads_is_checked(change, why):
    bad = {**ANSWER, **change}
    if why is None:  # not JSON at all: encode_line refuses it, decode_line never sees one
        with pytest.raises(ValueError):
            encode_line(bad)
        return
    assert why in answer_problem(bad)
    assert decode_line(encode_line(bad)[:-1]) is None  # a valid checksum does not make it an answer


def test_answers_without_a_plan_have_no_step_time():
    assert answer_problem(NOTHING_FITS) is None
    assert "a plan with status infeasible" in answer_problem({**NOTHING_FITS, "step_seconds": 1.0})
    assert answer_problem({**NOTHING_FITS, "status": "failed", "explanation": "died"}) is None


def test_scan_keeps_the_good_lines_and_numbers_the_rest():
    good = encode_line(ANSWER) + encode_line(NOTHING_FITS)
    found = scan(good + b"not json\n" + encode_line({**ANSWER, "mfu": 2.0}) + encode_line(ANSWER)[:-9])
    assert found.good == [encode_line(ANSWER), encode_line(NOTHING_FITS)] and found.skipped == [3, 4, 5]
    assert scan(good) == (found.good, found.answers, [])
    assert scan(b"") == ([], [], []) and scan(b"\n\n") == ([], [], [])


def journal_with(path, *lines: bytes):
    path.write_bytes(b"".join(lines))
    return path


def test_a_torn_last_line_is_truncated_away_before_anything_is_appended(tmp_path, capsys):
    # the probe: `truncate -s -30 F; sweep --resume` twice said "23 of 24" both times, the redone answer appended
    # onto the torn line
    path = journal_with(tmp_path / "j.jsonl", encode_line(NOTHING_FITS), encode_line(ANSWER)[:-30])
    with Journal.open(path) as journal:
        assert list(journal.answers) == ["k8"]
        assert path.read_bytes() == encode_line(NOTHING_FITS)  # repaired before the first append
        journal.append(ANSWER)
    assert "line 2 cut short, corrupt or not a valid answer" in capsys.readouterr().err
    with Journal.open(path) as journal:
        assert sorted(journal.answers) == ["k512", "k8"]
    assert capsys.readouterr().err == ""  # said once: the journal holds only good lines now


def test_a_bad_record_in_the_middle_is_dropped_and_said_once(tmp_path, capsys):
    bad = encode_line({**ANSWER, "key": "kbad", "step_seconds": "abc"})
    path = journal_with(tmp_path / "j.jsonl", encode_line(ANSWER), bad, b"garbage\n", encode_line(NOTHING_FITS))
    with Journal.open(path) as journal:
        assert sorted(journal.answers) == ["k512", "k8"]
    assert "2 lines (the first: line 2)" in capsys.readouterr().err
    assert path.read_bytes() == encode_line(ANSWER) + encode_line(NOTHING_FITS)
    Journal.open(path).close()
    assert capsys.readouterr().err == ""


def test_the_last_answer_of_a_key_wins(tmp_path):
    path = journal_with(tmp_path / "j.jsonl", encode_line({**ANSWER, "status": "feasible"}), encode_line(ANSWER))
    with Journal.open(path) as journal:
        assert journal.answers["k512"]["status"] == "optimal"


@pytest.mark.skipif(sys.platform == "win32", reason="no advisory lock on Windows")
def test_a_second_sweep_on_a_locked_journal_refuses_at_once(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal.open(path):
        with pytest.raises(SpecError, match="another ndcp sweep is using this journal"):
            Journal.open(path)
        other = subprocess.run([sys.executable, "-c", "import sys; from ndcp.sweep.journal import Journal; "
                                "Journal.open(sys.argv[1])", str(path)], capture_output=True, text=True, timeout=60)
        assert "another ndcp sweep is using this journal" in other.stderr
    Journal.open(path).close()  # released when the first closed


def test_a_journal_that_is_no_regular_file_is_refused(tmp_path):
    with pytest.raises(SpecError, match="is a character device"):
        Journal.open("/dev/full")
    with pytest.raises(SpecError, match="--jsonl .*cannot write"):
        Journal.open(tmp_path)
    with pytest.raises(SpecError, match="cannot write"):
        Journal.open(tmp_path / "missing" / "j.jsonl")


def test_a_failed_append_is_one_line(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal.open(path) as journal:
        os.close(journal._descriptor)
        journal._descriptor = os.open(os.devnull, os.O_RDONLY)  # any descriptor a write fails on
        with pytest.raises(SpecError, match=r"--jsonl .*j\.jsonl: cannot write"):
            journal.append(ANSWER)


answers = st.builds(lambda gpus, step, mfu, extra: {**ANSWER, "key": f"k{gpus}", "gpus": gpus, "step_seconds": step,
                                                      "mfu": mfu, "tokens_per_second": 1024 * 8192 / step, **extra},
                    st.integers(1, 1 << 20), st.floats(1e-6, 1e6), st.floats(1e-6, 1.0),
                    st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in ANSWER),
                                    st.none() | st.integers() | st.text(max_size=20), max_size=3))


@given(st.lists(answers, min_size=1, max_size=6), st.data())
def test_a_journal_cut_anywhere_keeps_exactly_the_whole_lines_before_the_cut(records, data):
    lines = [encode_line(record) for record in records]
    journal = b"".join(lines)
    cut = data.draw(st.integers(0, len(journal)))
    whole = sum(1 for end in itertools.accumulate(map(len, lines)) if end <= cut)
    found = scan(journal[:cut])
    assert found.answers == records[:whole] and b"".join(found.good) == b"".join(lines[:whole])
    assert found.skipped == ([] if cut in (0, *itertools.accumulate(map(len, lines))) else [whole + 1])
