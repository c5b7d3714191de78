from aworld_train.rollout.tokens.calls.registry import parse_tool_calls


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


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "properties": {"s": {"type": "string"}, "n": {"type": "integer"}, "b": {"type": "boolean"}}
            },
        },
    }
]


def calls(result):
    return [(c.name, c.arguments) for c in result.calls]


def test_every_native_format_parses_its_calls():
    cases = {
        "llama3_json": '<|python_tag|>{"name": "f", "parameters": {"s": "x"}}',
        "qwen3_coder": "Sure.\n\n<tool_call>\n<function=f>\n<parameter=s>\n012\n</parameter>\n<parameter=n>\n7\n"
        "</parameter>\n<parameter=b>\nTrue\n</parameter>\n</function>\n</tool_call>",
        "glm45": "<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>012</arg_value>\n<arg_key>n</arg_key>\n"
        "<arg_value>7</arg_value>\n</tool_call>",
        "mistral": '[TOOL_CALLS][{"name": "f", "arguments": {"s": "x"}, "id": "abcDEF123"}]',
        "deepseek": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{"s": "x"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "kimi_k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.f:3<|tool_call_argument_begin|>{"s": "x"}'
        "<|tool_call_end|><|tool_calls_section_end|>",
        "harmony": '<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"s": "x"}',
        "granite": '<|tool_call|>[{"name": "f", "arguments": {"s": "x"}}]',
    }
    typed = {"s": "012", "n": 7, "b": True}
    for name, text in cases.items():
        result = parse_tool_calls(text, name, TOOLS)
        assert not result.malformed, (name, result.errors)
        expected = {"qwen3_coder": typed, "glm45": {"s": "012", "n": 7}}.get(name, {"s": "x"})
        assert calls(result) == [("f", expected)], name
    assert parse_tool_calls(cases["mistral"], "mistral").calls[0].id == "abcDEF123"
    assert parse_tool_calls(cases["kimi_k2"], "kimi_k2").calls[0].id == "functions.f:3"
    assert parse_tool_calls(cases["qwen3_coder"], "qwen3_coder").content == "Sure."


def test_second_forms_of_mistral_deepseek_and_harmony():
    small = '[TOOL_CALLS]f[CALL_ID]abcDEF123[ARGS]{"s": "x"}[TOOL_CALLS]g[ARGS]{}'
    assert calls(parse_tool_calls(small, "mistral")) == [("f", {"s": "x"}), ("g", {})]
    r1 = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"s": "x"}\n```<｜tool▁call▁end｜>'
    assert calls(parse_tool_calls(r1, "deepseek")) == [("f", {"s": "x"})]
    # the template writes the recipient before the channel
    header_first = ' to=functions.f<|channel|>commentary json<|message|>{"s": "x"}'
    assert calls(parse_tool_calls(header_first, "harmony")) == [("f", {"s": "x"})]
    final = "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>It is 4."
    answer = parse_tool_calls(final, "harmony")
    assert answer.calls == [] and answer.content == "It is 4."


def test_broken_native_calls_are_reported_not_guessed():
    broken = {
        "llama3_json": '{"name": "f", "parameters": {"s": ',
        "glm45": "<tool_call>\n<arg_key>s</arg_key><arg_value>x</arg_value></tool_call>",
        "mistral": "[TOOL_CALLS][{]",
        "deepseek": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f{}<｜tool▁call▁end｜>",
        "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{oops"
        "<|tool_call_end|>",
        "harmony": "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops",
        "granite": "<|tool_call|>[{]",
        "qwen3_coder": "<tool_call>\n<parameter=s>\nx\n</parameter>\n</tool_call>",
    }
    for name, text in broken.items():
        result = parse_tool_calls(text, name, TOOLS)
        assert result.malformed and result.calls == [], name


def test_each_parser_reads_back_what_it_writes():
    from aworld_train.rollout.tokens.calls.registry import ParsedCall, get_parser, parser_names

    call = ParsedCall("f", {"s": "a b", "n": 2})
    for name in parser_names():
        parser = get_parser(name)
        text = parser.format("", [call])
        assert calls(parser.parse(text, TOOLS)) == [("f", {"s": "a b", "n": 2})], (name, text)


def test_unknown_parser_names_the_known_ones():
    import pytest

    with pytest.raises(ValueError, match="use 'auto'.*glm45.*harmony"):
        parse_tool_calls("x", "nope")
