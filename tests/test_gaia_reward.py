"""GAIA scoring rules: numbers, lists, strings, and near-misses that must score 0."""

import pytest

from aworld_train.rewards.gaia import answers_match, extract_answer, gaia_reward


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("42", "42"),
        ("42.0", "42"),
        ("$1,250", "1250"),
        ("17%", "17"),
        (" 3.50 ", "3.5"),
        ("-0.25", "-0.25"),
    ],
)
def test_numbers_match_after_stripping_units_and_separators(answer, truth):
    assert answers_match(answer, truth)


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("43", "42"),
        ("4.2", "42"),
        ("forty-two", "42"),
        ("about 42", "42"),
        ("42 apples", "42"),
        ("", "42"),
    ],
)
def test_number_near_misses_score_zero(answer, truth):
    assert not answers_match(answer, truth)


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("apple, banana, cherry", "apple, banana, cherry"),
        ("Apple,banana ,CHERRY", "apple, banana, cherry"),
        ("1, 2.0, $3", "1, 2, 3"),
        ("red; 7", "red; 7"),
        ("red, 7", "red; 7"),
    ],
)
def test_lists_compare_element_by_element(answer, truth):
    assert answers_match(answer, truth)


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("banana, apple, cherry", "apple, banana, cherry"),  # order matters
        ("apple, banana", "apple, banana, cherry"),  # one missing
        ("apple, banana, cherry, date", "apple, banana, cherry"),  # one extra
        ("1, 2, 4", "1, 2, 3"),
        ("apple, banana., cherry", "apple, banana, cherry"),  # punctuation kept inside list items
    ],
)
def test_list_near_misses_score_zero(answer, truth):
    assert not answers_match(answer, truth)


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("Saint Petersburg", "saint petersburg"),
        ("St. Petersburg!", "St Petersburg"),
        ("  New   York ", "new york"),
        ("Guatemala.", "Guatemala"),
    ],
)
def test_strings_ignore_case_whitespace_and_punctuation(answer, truth):
    assert answers_match(answer, truth)


@pytest.mark.parametrize(
    "answer, truth",
    [
        ("Paris, France", "Paris"),
        ("The answer is Paris", "Paris"),
        ("Pari", "Paris"),
        ("Saint Petersburg", "St Petersburg"),
    ],
)
def test_string_near_misses_score_zero(answer, truth):
    assert not answers_match(answer, truth)


def test_the_answer_is_read_from_tags_then_final_answer_then_the_message():
    assert extract_answer("thinking... <answer>7</answer> then <answer>8</answer>") == ("8", True)
    assert extract_answer("So.\nFINAL ANSWER: blue whale") == ("blue whale", True)
    assert extract_answer("  12 ") == ("12", False)


def test_reward_scores_only_the_final_message():
    # What a tool printed earlier is not the answer: only solution_str is read.
    assert gaia_reward("gaia", "I found it. <answer>1,234</answer>", "1234") == {
        "score": 1.0,
        "answer_marked": True,
    }
    assert gaia_reward("gaia", "The tool said 1234 but <answer>1243</answer>", "1234")["score"] == 0.0
    assert gaia_reward("gaia", "<answer>x</answer>", None)["score"] == 0.0


@pytest.mark.parametrize(
    "message, answer",
    [
        ("FINAL ANSWER: 41\nWait, I miscounted.\nFINAL ANSWER: 42", "42"),  # the last marker wins
        ("**FINAL ANSWER:** 42", "42"),
        ("**FINAL ANSWER**: 42", "42"),
        ("FINAL ANSWER: **42**", "42"),
        ("__Final Answer:__ *Saint Petersburg*", "Saint Petersburg"),
        ("<answer>FINAL ANSWER: 42</answer>", "42"),
        ("<answer>**42**</answer>", "42"),
        ("FINAL ANSWER: 7 <answer>first</answer> text <answer>FINAL ANSWER: 8</answer>", "8"),
        ("Final answer: apple, banana", "apple, banana"),
    ],
)
def test_the_last_marked_answer_is_read_without_markdown(message, answer):
    assert extract_answer(message) == (answer, True)


def test_whichever_marker_comes_last_wins_and_both_score():
    assert extract_answer("<answer>12</answer>\nFINAL ANSWER: 13") == ("13", True)
    assert extract_answer("FINAL ANSWER: 13\n<answer>12</answer>") == ("12", True)
    assert gaia_reward("gaia", "**FINAL ANSWER:** $1,234", "1234")["score"] == 1.0
    assert gaia_reward("gaia", "FINAL ANSWER: 1233\nFINAL ANSWER: 1234", "1234")["score"] == 1.0
    assert gaia_reward("gaia", "FINAL ANSWER: 1234\nFINAL ANSWER: 1233", "1234")["score"] == 0.0
