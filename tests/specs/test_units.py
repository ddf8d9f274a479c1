"""Sizes as people write them: a unit is required, decimal and binary units are both read, and `B` on a small count
is refused as the "70B parameters" slip rather than read as a few bytes."""
import pytest

from ndcp.specs import SpecError
from ndcp.specs.units import GB, GIB, MIB, parse_size


@pytest.mark.parametrize("text, value", [
    ("70GiB", 70 * GIB), ("75GB", 75 * GB), ("80000MiB", 80000 * MIB), ("2g", 2 * GIB), ("1.5TiB", int(1.5 * 2**40)),
    ("85899345920B", 80 * GIB), ("1048576B", MIB), ("2e9B", 2 * GB), ("0B", 0), ("0GiB", 0),
    ("1024bytes", 1024), ("70 bytes", 70),
])
def test_sizes_with_a_unit_are_read_in_bytes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["70", "70.5", "  80 "])
def test_a_bare_number_is_refused_with_the_units_to_add(text):
    number = text.strip()
    with pytest.raises(SpecError, match=f"needs a unit, e.g. {number}GiB .* {number}GB .* {number}bytes"):
        parse_size(text)


@pytest.mark.parametrize("text, count", [("70B", "70"), ("70 B", "70"), ("1048575B", "1048575"), ("1.5b", "1.5")])
def test_b_on_a_count_under_a_mebibyte_is_refused_as_meant_for_gigabytes(text, count):
    with pytest.raises(SpecError, match=f"reads as {count} bytes; did you mean {count}GB or {count}GiB"):
        parse_size(text)


@pytest.mark.parametrize("text, words", [("70XB", "expected e.g. 70GiB, 75GB"), ("GiB", "expected e.g."),
                                         ("1e400GB", "too large"), (str(2**61) + "B", "too large")])
def test_other_sizes_are_refused_with_the_valid_forms(text, words):
    with pytest.raises(SpecError, match=words):
        parse_size(text)


@pytest.mark.parametrize("text, gib", [("42949672960", "40.00"), ("85520809984", "79.65"), ("1e10", "9.31")])
def test_a_bare_number_of_a_gibibyte_or_more_is_offered_as_the_bytes_it_would_be(text, gib):
    """ndcp.search(..., memory_cap=42949672960) from Python: the refusal had suggested '42949672960GiB'; it offers
    the byte count (and what it is in GiB), which parse_size then reads."""
    with pytest.raises(SpecError) as error:
        parse_size(text)
    assert str(error.value) == (f"invalid size {text!r}: a size needs a unit: {text}bytes if bytes are meant ({gib} "
                                "GiB), else e.g. 70GiB (binary) or 75GB (decimal)")
    assert parse_size(f"{text}bytes") == int(float(text))
