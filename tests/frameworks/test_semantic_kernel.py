"""Semantic Kernel (Python): a ChatCompletionAgent with auto function calling, and the kernel
alone (``kernel.invoke_prompt`` with plugins and ``FunctionChoiceBehavior.Auto``), traced by SK's
own OTel diagnostics (``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS[_SENSITIVE]``),
in a current release and in 1.37, the last one with SK's own model-call operation names.

What SK emits (details: the recordings): one trace per invocation, ``invoke_agent <name>``
(``gen_ai.agent.name``; with content on, ``gen_ai.input/output.messages``) >
``AutoFunctionInvocationLoop`` (``sk.available_functions``) > ``chat <model>`` +
``execute_tool <plugin>-<function>`` (``gen_ai.tool.name`` the function's fully qualified name,
``gen_ai.tool.call.arguments|result``; a raising function: status ERROR, ``error.type`` and an
``exception`` event). Model calls: ``gen_ai.operation.name`` = ``chat`` (1.38 on) or
``chat.completions`` / ``chat.streaming_completions`` (up to 1.37), the finish reason as
``gen_ai.response.finish_reason`` = ``FinishReason.STOP`` (the str() of SK's enum), usage as
``gen_ai.usage.input/output_tokens``; their messages go to log records, never to the span.

The cap on auto-invoke rounds (``maximum_auto_invoke_attempts``) is on no span: without
streaming SK then asks once more without tools, and the model's answer is the run's; streaming,
it stops without an answer. Each case runs live and from its committed recording; the client
SDK's count of model and tool calls is checked on SK's spans too.

Without an agent SK emits no agent span: ``invoke_prompt`` wraps the prompt in a kernel function
of a random name and invokes it, so the trace's root is ``execute_tool <random name>``
(``gen_ai.tool.name`` that name, ``gen_ai.tool.call.arguments`` ``{}``,
``gen_ai.tool.call.result`` the str() of what it returned: a list of ``ChatMessageContent``, or
of streamed chunks) with no ``gen_ai.tool.call.id`` — no model asked for it — above
``AutoFunctionInvocationLoop`` and the same model and tool calls (those with a call id). That
root is the invocation, not a fourth tool call; the last model call says whether it answered.
"""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import (
    CLIENT_SRC,
    DRIVERS,
    RECORDINGS,
    Expect,
    check_runs,
    replay,
    run_driver,
)
from tests.frameworks.scenarios import ANSWER, ERROR_ANSWER, SUMMARY, script, scripted
from tests.harness import RunningServer

AGENT = "sk-researcher"
SERVICE = "semantic-kernel-service"  # no agent, no agent name: the run's is the service's
TOOL = "Lookup-lookup"  # the kernel function's fully qualified name: what the model calls
CURRENT, LEGACY = "semantic_kernel_agent", "semantic_kernel_137_agent"
ENVS = {CURRENT: "semantic_kernel", LEGACY: "semantic_kernel_137"}


def outcome(agent: str, iterations: int, tool_calls: int, errors: int = 0,
            answered: bool = True) -> Expect:
    """One run as SK's scenarios end: answered (completed) or not (no_response)."""
    return Expect(agent=agent, iterations=iterations, tool_calls=tool_calls, errors=errors,
                  terminal_state="completed" if answered else "no_response",
                  has_final_answer=answered, terminal_reason=None, parent_agent=None)


COMPLETED_3 = outcome(AGENT, 4, 3)
# The tool span fails (RuntimeError); SK hands the error to the model, which answers.
TOOL_ERROR = outcome(AGENT, 2, 1, errors=1)
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [COMPLETED_3],
    "three_tools_stream": [COMPLETED_3],
    "tool_error": [TOOL_ERROR],
    "tool_error_stream": [TOOL_ERROR],
    # maximum_auto_invoke_attempts=3: three rounds of model call + tool call, then one more
    # call without tools, answered with the summary. Nothing on the spans says it was a cap.
    "limit": [COMPLETED_3],
    # streamed, SK stops after the third round: the agent's output is an empty message
    "limit_stream": [outcome(AGENT, 3, 3, answered=False)],
}
TOOLS_CALLED = {"three_tools": 3, "limit": 3, "tool_error": 1}
REQUESTS = {"three_tools": 4, "limit": 4, "tool_error": 2}
# Live: every scenario on the current release; on 1.37, the two operation names it has.
LIVE = [(CURRENT, scenario) for scenario in EXPECTED] + \
    [(LEGACY, scenario) for scenario in ("three_tools", "three_tools_stream")]
RECORDED = [(driver, scenario) for driver in (CURRENT, LEGACY) for scenario in EXPECTED]


def ids(cases: list[tuple[str, str]]) -> list[str]:
    return [f"{driver}-{scenario}" for driver, scenario in cases]


# The kernel without an agent: one run per invoke_prompt, named after the service.
KERNEL_3 = outcome(SERVICE, 4, 3)
KERNEL_ERROR = outcome(SERVICE, 2, 1, errors=1)
KERNEL: dict[str, list[Expect]] = {
    "kernel_three_tools": [KERNEL_3],
    "kernel_three_tools_stream": [KERNEL_3],
    "kernel_tool_error": [KERNEL_ERROR],
    "kernel_limit": [KERNEL_3],  # the cap, then the answer to SK's last request, without tools
    # streamed, the loop stops after the third round, which asked for a tool: no answer,
    # whatever the prompt function returned (the chunks it streamed)
    "kernel_limit_stream": [outcome(SERVICE, 3, 3, answered=False)],
    "kernel_twice": [KERNEL_3, KERNEL_ERROR],  # two invoke_prompt calls: two runs
}
# What the prompt function returned (its result on the root span) holds the model's answer.
KERNEL_ANSWERS = {"kernel_three_tools": [ANSWER], "kernel_tool_error": [ERROR_ANSWER],
                  "kernel_limit": [SUMMARY], "kernel_twice": [ANSWER, ERROR_ANSWER]}
KERNEL_LIVE = [(CURRENT, scenario) for scenario in KERNEL] + \
    [(LEGACY, scenario) for scenario in ("kernel_three_tools", "kernel_three_tools_stream")]
KERNEL_RECORDED = [(driver, scenario) for driver in (CURRENT, LEGACY) for scenario in KERNEL]


def kernel_script(scenario: str) -> Script:
    if scenario == "kernel_twice":
        return fakellm.steps(*(fakellm.call(TOOL, key=key) for key in "abc"),
                             fakellm.answer(ANSWER), fakellm.call(TOOL, key="broken"),
                             fakellm.answer(ERROR_ANSWER))
    return script(scenario.removeprefix("kernel_"), TOOL)


@pytest.mark.parametrize(("driver", "scenario"), LIVE, ids=ids(LIVE))
def test_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str) -> None:
    model = scripted(llm, driver, scenario, tool=TOOL)
    run_driver(ENVS[driver], driver, scenario, sidecar, llm, model)
    [run] = check_runs(sidecar, EXPECTED[scenario])
    base = scenario.removesuffix("_stream")
    assert run["signals"]["tools"] == {TOOL: TOOLS_CALLED[base]}
    requests = llm.requests(model)
    if scenario == "limit":  # the cap, then SK's last request, without tools
        assert len(requests) == 4 and not requests[-1].get("tools")
    elif scenario == "limit_stream":
        assert len(requests) == 3
    else:
        assert len(requests) == REQUESTS[base]


# Inside a run of the client SDK: (model calls, tool calls) its span processor counted, and the
# run the sidecar reports. The kernel's prompt function (an execute_tool no model asked for,
# with the model loop inside it) is no tool call there either: the budget is the model's calls.
CLIENT = {
    (LEGACY, "three_tools_client"): (4, 3, COMPLETED_3),
    (LEGACY, "three_tools_stream_client"): (4, 3, COMPLETED_3),
    (CURRENT, "kernel_three_tools_client"): (4, 3, COMPLETED_3),
    (CURRENT, "kernel_twice_client"): (6, 4, outcome(AGENT, 6, 4, errors=1)),
}


@pytest.mark.parametrize(("driver", "scenario"), list(CLIENT), ids=ids(list(CLIENT)))
def test_client_sdk_counts(sidecar: RunningServer, llm: FakeLLM, driver: str,
                           scenario: str) -> None:
    # SK sets a model call's attributes after the span started: the client's span processor
    # knows it for one only when it ends, by SK's own operation names (1.37).
    base = scenario.removesuffix("_client")
    model = llm.script(f"{driver}-{scenario}", kernel_script(base)
                       if base.startswith("kernel_") else script(base, TOOL))
    result = run_driver(ENVS[driver], driver, scenario, sidecar, llm, model,
                        extra_env={"PYTHONPATH": f"{DRIVERS}:{CLIENT_SRC}"})
    model_calls, tool_calls, run = CLIENT[driver, scenario]
    assert f"client counted: {model_calls} model calls, {tool_calls} tool calls" \
        in result.stdout
    check_runs(sidecar, [run])


@pytest.mark.parametrize(("driver", "scenario"), RECORDED, ids=ids(RECORDED))
def test_replay(sidecar: RunningServer, driver: str, scenario: str) -> None:
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])


@pytest.mark.parametrize(("driver", "scenario"), KERNEL_LIVE, ids=ids(KERNEL_LIVE))
def test_kernel_live(sidecar: RunningServer, llm: FakeLLM, driver: str, scenario: str) -> None:
    model = llm.script(f"{driver}-{scenario}", kernel_script(scenario))
    run_driver(ENVS[driver], driver, scenario, sidecar, llm, model)
    runs = check_runs(sidecar, KERNEL[scenario])
    tools = [{TOOL: run["tool_calls"]} for run in runs]  # the prompt function is no tool
    assert [run["signals"]["tools"] for run in runs] == tools
    requests = {"kernel_limit_stream": 3, "kernel_twice": 6, "kernel_tool_error": 2}
    assert len(llm.requests(model)) == requests.get(scenario, 4)
    for run, answer in zip(runs, KERNEL_ANSWERS.get(scenario, ()), strict=False):
        assert answer in run["final_output"]


@pytest.mark.parametrize(("driver", "scenario"), KERNEL_RECORDED, ids=ids(KERNEL_RECORDED))
def test_kernel_replay(sidecar: RunningServer, driver: str, scenario: str) -> None:
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl")
    runs = check_runs(sidecar, KERNEL[scenario])
    for run, answer in zip(runs, KERNEL_ANSWERS.get(scenario, ()), strict=False):
        assert answer in run["final_output"]
