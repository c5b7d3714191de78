from aworld_train.rollout.tool_parser import parse_tool_calls


def test_hermes_single_and_multiple_calls():
    text = 'Let me compute.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "1+2"}}\n</tool_call>'
    result = parse_tool_calls(text)
    assert result.content == "Let me compute."
    assert [(c.name, c.arguments) for c in result.calls] == [("calculate", {"expression": "1+2"})]
    two = text + '<tool_call>{"name": "b", "arguments": "{\\"x\\": 1}"}</tool_call>'
    assert [(c.name, c.arguments) for c in parse_tool_calls(two).calls] == [
        ("calculate", {"expression": "1+2"}),
        ("b", {"x": 1}),
    ]


def test_malformed_calls_are_reported_not_guessed():
    for text in [
        '<tool_call>{"name": "calculate", "arguments": {"expression": </tool_call>',
        "<tool_call>[1, 2]</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
    ]:
        result = parse_tool_calls(text)
        assert result.malformed and result.calls == []


def test_unclosed_tag_at_the_end_still_parses():
    result = parse_tool_calls('<tool_call>\n{"name": "f", "arguments": {}}')
    assert [c.name for c in result.calls] == ["f"] and not result.malformed


def test_bare_and_fenced_json_only_when_lenient():
    bare = '{"name": "f", "arguments": {"a": 1}}'
    fenced = 'Sure:\n```json\n{"name": "f", "arguments": {"a": 1}}\n```'
    assert parse_tool_calls(bare).calls == []
    assert parse_tool_calls(fenced).calls == []
    assert [c.arguments for c in parse_tool_calls(bare, "hermes_lenient").calls] == [{"a": 1}]
    assert [c.name for c in parse_tool_calls(fenced, "hermes_lenient").calls] == ["f"]
    assert parse_tool_calls("The answer is 4.", "hermes_lenient").calls == []


def test_plain_answer_has_no_calls():
    result = parse_tool_calls("The answer is 42.")
    assert result.calls == [] and not result.malformed and result.content == "The answer is 42."
