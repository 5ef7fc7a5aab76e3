import pytest

from scheduler.filters import extra_specs_ops
from scheduler.filters.extra_specs_ops import compile_requirement, match


@pytest.mark.parametrize("value,req,ok", [
    # no operator: the whole requirement string
    ("1", "1", True),
    ("1", "2", False),
    ("foo bar", "foo bar", True),
    (None, "1", False),
    # = is "at least"
    ("123", "= 123", True),
    ("124", "= 123", True),
    ("122", "= 123", False),
    ("2.5", "= 2", True),
    ("abc", "= 1", False),
    ("1", "= abc", False),
    (None, "= 1", False),
    # numeric operators
    ("123", "== 123.0", True),
    ("124", "== 123", False),
    ("124", "!= 123", True),
    ("123", "!= 123", False),
    ("124", ">= 123", True),
    ("122", ">= 123", False),
    ("122", "<= 123", True),
    ("124", "<= 123", False),
    # string operators
    ("abc", "s== abc", True),
    ("abd", "s== abc", False),
    ("abd", "s!= abc", True),
    ("abc", "s!= abc", False),
    ("abb", "s< abc", True),
    ("abc", "s< abc", False),
    ("abc", "s<= abc", True),
    ("abd", "s<= abc", False),
    ("abd", "s> abc", True),
    ("abc", "s> abc", False),
    ("abc", "s>= abc", True),
    ("abb", "s>= abc", False),
    ("12", "s< 2", True),                # string, not numeric, order
    (None, "s!= abc", False),
    # <in>: substring of the value (first operand only)
    ("['avx2', 'sse4_2']", "<in> avx2", True),
    ("['avx2']", "<in> avx512", False),
    ("12311321", "<in> 11", True),
    (None, "<in> a", False),
    # <all-in>
    ("['avx2', 'sse4_2']", "<all-in> avx2 sse4_2", True),
    ("['avx2']", "<all-in> avx2 sse4_2", False),
    # <or>
    ("12", "<or> 11 <or> 12", True),
    ("13", "<or> 11 <or> 12", False),
    ("11", "<or> 11", True),
    ("13", "<or> 11 <or> 12 <or> 13", True),
    (None, "<or> 11 <or> 12", False),
    ("x", "<or>", False),
    # an operator without operand never matches
    ("1", "==", False),
    ("abc", "s==", False),
    ("a", "<in>", False),
])
def test_match(value, req, ok):
    assert match(value, req) is ok
    assert compile_requirement(req)(value) is ok


def test_every_documented_operator_is_known():
    ops = {"=", "==", "!=", ">=", "<=", "s==", "s!=", "s<", "s<=", "s>", "s>=",
           "<in>", "<all-in>", "<or>"}
    assert extra_specs_ops.OPERATORS == ops


def test_compiled_predicate_is_reusable():
    check = compile_requirement(">= 4")
    assert [check(v) for v in ("3", "4", "5", None, "x")] == [False, True, True, False, False]
