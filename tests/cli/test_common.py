"""The command line's shared parser (ndcp/cli/common.py): argparse's errors, said so a user can act on them."""
import pytest

from tests.cli_helpers import assert_one_line_error, run

PROBLEM = ["llama3-8b", "--device", "h100", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096"]


@pytest.mark.parametrize("args", [("estimate", *PROBLEM, "--strategy", "tp=2", "pp=2"),
                                  ("search", *PROBLEM, "--fix", "tp=2,", "pp=2")])
def test_a_key_value_list_split_by_a_space_says_how_the_list_is_written(capsys, args):
    """`--strategy tp=2 pp=2` (a space after the comma, or none) left argparse with 'unrecognized arguments: pp=2'."""
    code, out, err = run(capsys, *args)
    assert_one_line_error(code, out, err, "unrecognized arguments: pp=2", "one comma-separated list without spaces",
                          "--strategy tp=2,pp=2")


def test_another_stray_word_is_named_alone(capsys):
    code, out, err = run(capsys, "search", *PROBLEM, "extra")
    assert_one_line_error(code, out, err, "unrecognized arguments: extra")
    assert "comma-separated" not in err
