"""Values as measured-run files write them (ndcp/validation/values.py): a figure whose unit is in its field's name
is a plain number, and a cell that is not one is refused naming the field, the value and what would be valid."""
import pytest

from ndcp.specs.fields import SpecError
from ndcp.validation.values import as_count, as_number


@pytest.mark.parametrize("value, expected", [("1.7", 1.7), (" 50 ", 50.0), (3760, 3760.0), ("", None),
                                             ("unknown", None), (None, None)])
def test_a_figure_is_a_plain_number_or_not_published(value, expected):
    assert as_number(value, "step_seconds", "1.7") == expected


@pytest.mark.parametrize("value", ["1.7s", "50GiB", "fast", "nan", "inf"])
def test_a_figure_with_a_unit_or_no_number_names_its_field(value):
    with pytest.raises(SpecError) as error:
        as_number(value, "memory_gib", "50.2")
    assert str(error.value) == (f"memory_gib={value!r} is not valid; expected a number without a unit (the field's "
                                "name says it), e.g. 50.2")


@pytest.mark.parametrize("value, expected", [("16", 16), (8, 8), (" 4096 ", 4096)])
def test_a_count_is_a_whole_number(value, expected):
    assert as_count(value, "gpus", "16") == expected


@pytest.mark.parametrize("value", ["16x", "0", "-8", "16.0", "eight"])
def test_a_count_that_is_not_a_whole_number_from_1_names_its_field(value):
    with pytest.raises(SpecError, match=f"^gpus='{value}' is not valid; expected a whole number >= 1, e.g. 16$"):
        as_count(value, "gpus", "16")
