import pytest

from aworld_train.env.calculator import CalculatorError, evaluate
from aworld_train.rewards.calculator import exact_answer


@pytest.mark.parametrize(
    "expression,value",
    [
        ("1 + 2", "3"),
        ("(3 + 4) * 12", "84"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("-(2 - 5)", "3"),
        ("2^3", "8"),
        ("1.5 * 4", "6"),
    ],
)
def test_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression,message",
    [
        ("__import__('os').system('true')", "not allowed"),
        ("x + 1", "names are not allowed"),
        ("abs(-1)", "names are not allowed|calls are not allowed"),
        ("(1).real", "attributes are not allowed"),
        ("2 ** 100000", "exponent"),
        ("10 ** 99 * 10 ** 99", "too large"),
        ("1 / 0", "division by zero"),
        ("[1, 2]", "not allowed"),
        ("1 +", "cannot parse"),
        ("", "empty"),
        ("1" * 600, "longer than"),
    ],
)
def test_rejections(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)


def test_exact_answer_reads_the_last_number_of_the_final_message():
    assert exact_answer("calc", "The answer is 1,776.", 1776)["score"] == 1.0
    assert exact_answer("calc", "37 * 48 = 1776", "1776")["score"] == 1.0
    assert exact_answer("calc", "It is 3.5", 3.5)["score"] == 1.0
    assert exact_answer("calc", "The answer is 1777.", 1776)["score"] == 0.0
    assert exact_answer("calc", "I do not know.", 1776) == {"score": 0.0, "parsed": False}
    assert exact_answer("calc", "1776", "not a number")["score"] == 0.0


def test_the_latency_option_has_the_long_tail_it_names_and_repeats_under_its_seed():
    from aworld_train.env.calculator import lognormal_latency

    draw = lognormal_latency(0.3, 8.0, seed=1)
    draws = sorted(draw() for _ in range(20000))
    assert draws[10000] == pytest.approx(0.3, rel=0.05)  # the median
    assert draws[19800] == pytest.approx(8.0, rel=0.15)  # the 99th percentile
    first, again = lognormal_latency(0.3, 8.0, seed=1), lognormal_latency(0.3, 8.0, seed=1)
    assert [first() for _ in range(5)] == [again() for _ in range(5)]
    with pytest.raises(ValueError, match="CALCULATOR_LATENCY_P50_S <= CALCULATOR_LATENCY_P99_S"):
        lognormal_latency(2.0, 1.0)
