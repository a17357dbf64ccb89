"""Rule packs: schema, validation with FILE:LINE: rule NAME messages, loading from files and
directories, merging (override, disable), budgets, reload detection, the shipped default pack."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from watchdog.core.rules.decision import Action, Severity
from watchdog.core.rules.pack import (
    DEFAULT_PACK,
    Grace,
    Repeat,
    RulePackError,
    RuleSet,
    glob_problem,
    load_rules,
    load_text,
)
from watchdog.core.runs.terminal import TerminalState

REPO = Path(__file__).resolve().parent.parent
HEADER = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: test\n"
DEFAULT_RULES = ["budget-countdown", "budget-last-call", "budget-exhausted",
                 "budget-cost-countdown", "budget-cost-last-call", "budget-cost-exhausted",
                 "budget-iterations-countdown", "budget-iterations-last-call",
                 "budget-tokens-countdown", "budget-tokens-last-call", "budget-tokens-exhausted",
                 "idle-timeout",
                 "total-timeout", "error-loop", "repeated-tool-call", "repeated-tool-result",
                 "tool-cycle", "tool-outage", "zero-progress", "zero-progress-note",
                 "agent-ping-pong"]


def write(path: Path, body: str, header: bool = True) -> str:
    path.write_text((HEADER if header else "") + textwrap.dedent(body))
    return str(path)


def problems(*paths: str, include_default: bool = False) -> list[str]:
    with pytest.raises(RulePackError) as caught:
        load_rules(list(paths), include_default=include_default)
    return [str(p) for p in caught.value.problems]


# -- the default pack ---------------------------------------------------------------------------

def test_default_pack_loads_with_the_known_rules() -> None:
    ruleset = load_rules([])
    assert [r.name for r in ruleset.rules] == DEFAULT_RULES
    assert ruleset.budgets == ()
    assert ruleset.budget_for("explorer") == {}
    by_name = {r.name: r for r in ruleset.rules}
    assert by_name["budget-countdown"].repeat is Repeat.ON_CHANGE
    assert by_name["idle-timeout"].terminal_state is TerminalState.IDLE_TIMEOUT
    assert by_name["total-timeout"].grace == Grace(tool_calls=4, seconds=60.0)
    assert by_name["zero-progress"].terminal_state is TerminalState.INTERVENTION_REQUIRED
    assert {r.name for r in ruleset.rules if r.timed} == {"idle-timeout", "total-timeout"}
    for rule in ruleset.rules:
        assert rule.description and rule.message.text
        if "run.budget." in rule.when.source:
            assert "has(run.budget." in rule.when.source, rule.name


def test_the_packaged_default_pack_is_the_repository_file() -> None:
    packaged = REPO / "watchdog" / "core" / "rules" / "packs" / "default.yaml"
    assert packaged.is_symlink()
    assert os.path.samefile(packaged, REPO / "rules" / "default.yaml")
    assert os.path.samefile(DEFAULT_PACK, REPO / "rules" / "default.yaml")


def test_default_pack_is_not_loaded_twice_when_named(tmp_path: Path) -> None:
    ruleset = load_rules([str(REPO / "rules" / "default.yaml")])
    assert [r.name for r in ruleset.rules] == DEFAULT_RULES


# -- a valid pack ---------------------------------------------------------------------------------

def test_a_full_rule_reads_every_key(tmp_path: Path) -> None:
    path = write(tmp_path / "mine.yaml", """\
        budgets:
          - agents: ["explorer-*"]
            max_tool_calls: 20
            max_seconds: 10m
          - max_iterations: 50
        rules:
          - name: slow-search
            description: Too many searches.
            agents: ["explorer-*", "scout"]
            when: run.tools['search'] > 10
            for: 1m30s
            action: wind_down
            severity: critical
            message: "searched ${run.tools['search']} times"
            repeat: on_change
            terminal_state: loop_detected
            grace: {tool_calls: 3, seconds: 2m}
          - name: just-say
            when: run.iterations > 100
            action: notify
            message: many iterations
          - name: stop
            when: run.errors > 50
            action: abort
            message: stop
    """)
    ruleset = load_rules([path], include_default=False)
    rule, notify, abort = ruleset.rules
    assert rule.agents == ("explorer-*", "scout")
    assert rule.for_seconds == 90.0
    assert (rule.action, rule.severity, rule.repeat) == (Action.WIND_DOWN, Severity.CRITICAL,
                                                         Repeat.ON_CHANGE)
    assert rule.terminal_state is TerminalState.LOOP_DETECTED
    assert rule.grace == Grace(3, 120.0)
    assert rule.timed  # a `for` needs the timer
    assert (rule.file, rule.line) == (path, 10)
    assert rule.applies_to("explorer-7") and rule.applies_to("scout")
    assert not rule.applies_to("writer")
    assert (notify.agents, notify.severity, notify.repeat, notify.for_seconds) == (
        ("*",), Severity.WARNING, Repeat.ONCE, 0.0)
    assert notify.terminal_state is None
    assert abort.terminal_state is TerminalState.ABORTED  # an abort without a reason
    assert ruleset.budget_for("explorer-1") == {"max_tool_calls": 20.0, "max_seconds": 600.0}
    assert ruleset.budget_for("writer") == {"max_iterations": 50.0}
    described = ruleset.describe()[0]
    assert described["name"] == "slow-search"
    assert described["grace"] == {"tool_calls": 3, "seconds": 120.0}
    assert described["source"] == f"{path}:10"
    assert described["when"] == "run.tools['search'] > 10"


def test_multi_document_files_and_merge_keys(tmp_path: Path) -> None:
    path = tmp_path / "multi.yaml"
    path.write_text(HEADER + "rules:\n"
                    "  - {name: a, when: run.errors > 1, action: notify, message: a}\n"
                    "---\n" + HEADER + "rules:\n"
                    "  - <<: {when: run.errors > 2, action: notify, message: b}\n"
                    "    name: b\n")
    assert [r.name for r in load_rules([str(path)], include_default=False).rules] == ["a", "b"]


def test_merge_keys_let_a_rule_set_its_own_keys_over_the_merged_ones(tmp_path: Path) -> None:
    """YAML's merge key: the mapping's own keys win over merged ones, the first merged mapping
    over the next (they read as duplicate keys, and the merged name as the rule's: "rule
    slow-researcher: duplicate rule name" for the rule named slow-writer)."""
    merged = """\
        rules:
          - &slow
            name: slow-researcher
            agents: ["researcher*"]
            when: "!run.ended && run.elapsed_seconds > 300.0"
            action: wind_down
            message: "Running for ${int(run.elapsed_seconds)} s: wrap up."
          - <<: *slow
            name: slow-writer
            agents: ["writer*"]
          - <<: [{name: first, severity: info}, *slow]
            agents: ["w*"]
    """
    path = write(tmp_path / "merge.yaml", merged + "      - {<<: *slow}\n")
    assert problems(path) == [f"{path}:16: rule slow-researcher: duplicate rule name (first "
                              f"defined on line 5)"]
    path = write(tmp_path / "merge.yaml", merged)
    rules = {r.name: r for r in load_rules([path], include_default=False).rules}
    assert list(rules) == ["slow-researcher", "slow-writer", "first"]
    assert rules["slow-writer"].agents == ("writer*",)
    assert rules["slow-writer"].when.source == rules["slow-researcher"].when.source
    assert (rules["first"].agents, rules["first"].severity) == (("w*",), Severity.INFO)
    assert rules["first"].action is Action.WIND_DOWN
    bad = write(tmp_path / "bad.yaml", "rules:\n  - {<<: [1], name: r, when: 'true', "
                                        "action: notify, message: m}\n")
    assert problems(bad) == [f"{bad}:5: rule r: a merge key (<<) takes a mapping or a list of "
                             f"mappings"]


def test_merge_bombs_and_deep_nesting_are_refused_quickly(tmp_path: Path) -> None:
    """Each rule merging the one before twice (2^30 keys merged if copied), lists nested 10,000
    deep (PyYAML's composer recursed past Python's stack: a traceback): read in a moment, the
    nesting named with its line."""
    lines = ["rules:", "  - &r0 {name: r, when: 'true', action: notify, message: x}"]
    lines += [f"  - &r{i} {{<<: [*r{i - 1}, *r{i - 1}], name: r{i}}}" for i in range(1, 31)]
    bomb = write(tmp_path / "bomb.yaml", "\n".join(lines) + "\n")
    assert len(load_rules([bomb], include_default=False).rules) == 31
    deep = write(tmp_path / "deep.yaml", "rules:\n  - " + "[" * 10_000 + "]" * 10_000 + "\n")
    assert problems(deep) == [f"{deep}:5: bad YAML: nested more than 100 levels deep"]


def test_merge_keys_chained_past_the_stack_are_a_problem_not_a_traceback(tmp_path: Path) -> None:
    """Mappings each merging the one anchored before, read from the last (the rule merges the
    chain's end): a problem with its line (the merges were followed one call inside the next,
    past Python's stack: a RecursionError out of `rules check`, from naming the rule)."""
    lines = ["x-bases:", "  b0: &b0 {name: r, when: 'true', action: notify, message: x}"]
    lines += [f"  b{i}: &b{i} {{<<: *b{i - 1}}}" for i in range(1, 3000)]
    lines += ["rules:", "  - <<: *b2999"]
    path = write(tmp_path / "chain.yaml", "\n".join(lines) + "\n")
    found = problems(path)
    assert f"{path}:2905: rule #1: merge keys (<<) chained more than 100 mappings deep" in found
    shallow = [*lines[:2 + 50], "rules:", "  - <<: *b50"]  # (50 deep: read as YAML says)
    path = write(tmp_path / "shallow.yaml", "\n".join(shallow) + "\n")
    assert problems(path) == [f"{path}:4: RulePack: unknown key 'x-bases'"]


def test_a_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(HEADER.encode() + "rules:\n  - {name: r, when: 'run.agent == \"\xe9\"'"
                     ", action: notify, message: m}\n".encode("latin-1"))
    assert problems(str(path)) == [f"{path}:5: not UTF-8 text (invalid continuation byte at "
                                   f"byte 98); save it as UTF-8"]


# -- merging --------------------------------------------------------------------------------------

def test_later_packs_replace_rules_and_disable_them(tmp_path: Path) -> None:
    path = write(tmp_path / "override.yaml", """\
        budgets:
          - agents: ["*"]
            max_tool_calls: 30
        disable: [repeated-tool-result, tool-cycle]
        rules:
          - name: idle-timeout
            when: "!run.ended && run.idle_seconds > 60.0"
            action: notify
            message: idle
          - name: error-loop
            enabled: false
            when: "true"
            action: notify
            message: "off"
          - name: extra
            when: run.tool_calls > 100
            action: notify
            message: extra
    """)
    ruleset = load_rules([path])
    names = [r.name for r in ruleset.rules]
    assert names == ["budget-countdown", "budget-last-call", "budget-exhausted",
                     "budget-cost-countdown", "budget-cost-last-call", "budget-cost-exhausted",
                     "budget-iterations-countdown", "budget-iterations-last-call",
                     "budget-tokens-countdown", "budget-tokens-last-call",
                     "budget-tokens-exhausted", "idle-timeout", "total-timeout",
                     "repeated-tool-call", "tool-outage", "zero-progress", "zero-progress-note",
                     "agent-ping-pong", "extra"]
    idle = ruleset.get("idle-timeout")
    assert idle is not None and idle.action is Action.NOTIFY and idle.terminal_state is None
    assert {r.name for r in ruleset.disabled} == {"error-loop", "repeated-tool-result",
                                                  "tool-cycle"}
    assert [d["enabled"] for d in ruleset.describe()][-3:] == [False, False, False]
    assert ruleset.budget_for("anyone") == {"max_tool_calls": 30.0}


def test_a_later_pack_can_bring_a_disabled_rule_back(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yaml", "disable: [error-loop]\n")
    second = write(tmp_path / "b.yaml", """\
        rules:
          - {name: error-loop, when: run.repeated_error >= 9, action: abort, message: loop}
    """)
    ruleset = load_rules([first, second])
    rule = ruleset.get("error-loop")
    assert rule is not None and "9" in rule.when.source


def test_a_rule_of_a_name_and_enabled_false_switches_an_earlier_one_off(tmp_path: Path) -> None:
    """What "`disable: [names]` or `enabled: false` switches rules off" reads as: the name and
    `enabled: false` alone (it asked for when, action and message, so the rule had to be written
    out whole to be switched off)."""
    path = write(tmp_path / "off.yaml", """\
        rules:
          - name: idle-timeout
            enabled: false
          - {name: tool-cycle, enabled: false, description: "we loop on purpose"}
    """)
    ruleset = load_rules([path])
    assert {r.name for r in ruleset.disabled} == {"idle-timeout", "tool-cycle"}
    assert ruleset.get("idle-timeout") is None and ruleset.get("error-loop") is not None
    typo = write(tmp_path / "typo.yaml", """\
        rules:
          - {name: idle-timeot, enabled: false}
          - {name: idle-timeout, enabled: true}
    """)
    assert problems(typo, include_default=True) == [
        f"{typo}:5: rule idle-timeot: enabled: false switches off a rule of an earlier pack, and "
        f"there is none of this name (did you mean 'idle-timeout'?) (a new rule needs when, "
        f"action and message)",
        f"{typo}:6: rule idle-timeout: 'when' is required",
        f"{typo}:6: rule idle-timeout: 'action' is required",
        f"{typo}:6: rule idle-timeout: 'message' is required"]


def test_budgets_of_later_packs_come_first(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yaml", """\
        budgets:
          - {agents: ["explorer-*"], max_tool_calls: 10}
          - {agents: ["*"], max_tool_calls: 50}
    """)
    second = write(tmp_path / "b.yaml", """\
        budgets:
          - {agents: ["explorer-big"], max_tool_calls: 100}
    """)
    ruleset = load_rules([first, second], include_default=False)
    assert ruleset.budget_for("explorer-big") == {"max_tool_calls": 100.0}
    assert ruleset.budget_for("explorer-small") == {"max_tool_calls": 10.0}
    assert ruleset.budget_for("writer") == {"max_tool_calls": 50.0}


# -- directories and reload detection -----------------------------------------------------------

def test_directories_load_yaml_files_in_order_skipping_tests_and_hidden(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules / "20-b.yml", "rules: [{name: b, when: 'true', action: notify, message: b}]\n")
    write(rules / "10-a.yaml", "rules: [{name: a, when: 'true', action: notify, message: a}]\n")
    (rules / "a.test.yaml").write_text("tests: []\n")
    (rules / "README.md").write_text("not a pack\n")
    (rules / ".hidden.yaml").write_text("broken: [\n")
    ruleset = load_rules([str(rules)], include_default=False)
    assert [r.name for r in ruleset.rules] == ["a", "b"]
    assert [Path(s.path).name for s in ruleset.sources] == ["rules", "10-a.yaml", "20-b.yml"]


def test_a_configmap_style_mount_is_read_through_its_symlinks(tmp_path: Path) -> None:
    mount = tmp_path / "mount"
    data = mount / "..2026_11_22_04_00_00.1"
    data.mkdir(parents=True)
    write(data / "team.yaml", "rules: [{name: t, when: 'true', action: notify, message: t}]\n")
    (mount / "..data").symlink_to(data.name)
    (mount / "team.yaml").symlink_to("..data/team.yaml")
    ruleset = load_rules([str(mount)], include_default=False)
    assert [r.name for r in ruleset.rules] == ["t"]
    assert not ruleset.stale()
    # Kubernetes swaps the ..data symlink to a new directory: the file behind the name changes.
    fresh = mount / "..2026_11_22_05_00_00.2"
    fresh.mkdir()
    write(fresh / "team.yaml", "rules: [{name: u, when: 'true', action: notify, message: u}]\n")
    (mount / "..data_tmp").symlink_to(fresh.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    assert ruleset.stale()
    assert [r.name for r in load_rules([str(mount)], include_default=False).rules] == ["u"]


def test_stale_when_a_file_changes_or_appears(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "rules: []\n")
    ruleset = load_rules([path], include_default=False)
    assert not ruleset.stale()
    Path(path).write_text(Path(path).read_text() + "# changed, and longer\n")
    assert ruleset.stale()
    directory = tmp_path / "d"
    directory.mkdir()
    in_dir = load_rules([str(directory)], include_default=False)
    assert in_dir.rules == () and not in_dir.stale()
    write(directory / "new.yaml", "rules: []\n")
    assert in_dir.stale()


# -- problems -------------------------------------------------------------------------------------

def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.yaml", "rules:\n  - name: a\n    when: [1, 2\n")
    assert problems(path) == [f"{path}:7: bad YAML: while parsing a flow sequence expected ',' "
                              f"or ']', but got '<stream end>' (the construct began on line 6)"]
    tabs = write(tmp_path / "tabs.yaml", "rules:\n\t- name: a\n")
    assert problems(tabs) == [f"{tabs}:5: bad YAML: while scanning for the next token found "
                              f"character '\\t' that cannot start any token"]


def test_every_problem_is_reported_with_file_line_and_rule(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.yaml", """\
        budgets:
          - agents: ["explorer-*"]
            max_tool_calls: 0
            max_cost: 3
        rules:
          - name: unknown-action
            when: run.tool_calls > 3
            action: explode
            message: hi
          - name: syntax
            when: run.tool_calls >
            action: notify
            message: hi
          - name: unknown-variable
            when: runn.tool_calls > 3
            action: notify
            message: hi
          - name: unknown-field
            when: run.tool_call > 3
            action: notify
            message: "count ${run.tool_calss}"
          - name: syntax
            when: run.tool_calls > 3
            action: notify
            message: dup
          - name: bad-duration
            when: run.idle_seconds > 300
            for: 5 minutes
            action: notify
            message: hi
          - name: bad-glob
            agents: ["explorer-[ab"]
            when: run.tool_calls > 3
            action: abort
            grace: {tool_calls: 2}
            message: hi
            terminal_state: completed
          - name: Bad_Name
            when: |
              run.tool_calls > 3 &&
                run.agent > 2
            action: notify
            message: hi
            frobnicate: true
          - when: run.tool_calls > 3
            action: notify
        disable: [idle-timout]
    """)
    assert problems(path, include_default=True) == [
        f"{path}:6: budgets: max_tool_calls: expected an integer >= 1, got 0",
        f"{path}:7: budgets: unknown key 'max_cost' (did you mean 'max_cost_usd'?)",
        f"{path}:11: rule unknown-action: action: 'explode' is not one of notify, wind_down, "
        f"abort",
        f"{path}:14: rule syntax: when: syntax error: unexpected end of expression (column 17)",
        f"{path}:18: rule unknown-variable: when: undeclared reference to 'runn.tool_calls' "
        f"(the variables are run, session and fleet) (column 5)",
        f"{path}:22: rule unknown-field: when: unknown field 'tool_call' in run (did you mean "
        f"'tool_calls'?) (column 4)",
        f"{path}:24: rule unknown-field: message: ${{run.tool_calss}}: unknown field "
        f"'tool_calss' in run (did you mean 'tool_calls'?) (column 12)",
        f"{path}:25: rule syntax: duplicate rule name (first defined on line 13)",
        f"{path}:30: rule bad-duration: when: no operator '>' for (double, int); hint: CEL does "
        f"not mix int and double; write 300.0 (column 18)",
        f"{path}:31: rule bad-duration: for: expected a duration like 500ms, 30s, 1m30s, 1h, 1d "
        f"(units ms s m h d w y, largest first), got '5 minutes'",
        f"{path}:35: rule bad-glob: agents: bad glob 'explorer-[ab': unclosed '['",
        f"{path}:38: rule bad-glob: grace: only a wind_down can escalate (this rule is abort)",
        f"{path}:40: rule bad-glob: terminal_state: 'completed' is not one of "
        f"tool_limit_reached, time_limit_reached, idle_timeout, loop_detected, "
        f"intervention_required, aborted",
        f"{path}:41: rule Bad_Name: name: 'Bad_Name' is not allowed: use lowercase letters, "
        f"digits and '-' (at most 63 characters)",
        f"{path}:44: rule Bad_Name: when: no operator '>' for (string, int) (column 13)",
        f"{path}:47: rule Bad_Name: unknown key 'frobnicate'",
        f"{path}:48: rule #9: 'name' is required",
        f"{path}:48: rule #9: 'message' is required",
        f"{path}:50: disable: no rule named 'idle-timout' in this or an earlier pack (did you "
        f"mean 'idle-timeout'?)",
    ]


def test_problems_of_several_files_come_in_file_order(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yaml", "rules: [{name: a, when: 'x', action: notify, "
                                       "message: a}]\n")
    second = write(tmp_path / "b.yaml", "kind: Other\n")
    missing = str(tmp_path / "missing.yaml")
    found = problems(first, missing, second)
    assert found[0].startswith(f"{first}:4: rule a: when: undeclared reference to 'x'")
    assert found[1:] == [f"{missing}: no such file or directory",
                         f"{second}:4: RulePack: duplicate key 'kind'"]


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.yaml", """\
        rules:
          - name: a
            when: run.errors > 1
            action: notify
            message: a
            when: run.errors > 2
    """)
    assert problems(path) == [f"{path}:9: rule a: duplicate key 'when'"]


@pytest.mark.parametrize(("text", "expected"), [
    ("", ": empty: expected a RulePack (apiVersion: agent-watchdog/v1)"),
    ("# only a comment\n", ": empty: expected a RulePack (apiVersion: agent-watchdog/v1)"),
    ("- a\n- b\n", ":1: RulePack must be a mapping, not a list"),
    ("apiVersion: v2\nkind: RulePack\nname: x\n",
     ":1: apiVersion: 'v2' is not supported (expected agent-watchdog/v1)"),
    ("apiVersion: agent-watchdog/v1\nkind: Rules\nname: x\n", ":2: kind: 'Rules' is not RulePack"),
    ("apiVersion: agent-watchdog/v1\nkind: RulePack\n", ":1: RulePack: 'name' is required"),
    ("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: x\nrules: {a: 1}\n",
     ":4: rules: expected a list, got a mapping"),
    ("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: x\nrule: []\n",
     ":4: RulePack: unknown key 'rule' (did you mean 'rules'?)"),
])
def test_pack_level_problems(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert f"{path}{expected}" in problems(str(path))


@pytest.mark.parametrize(("rule", "message"), [
    ("{name: r, when: run.errors > 1, action: notify, message: m, grace: {tool_calls: 1}}",
     "rule r: grace: only a wind_down can escalate (this rule is notify)"),
    ("{name: r, when: run.errors > 1, action: wind_down, message: m, grace: {}}",
     "rule r: grace: set tool_calls, seconds or both"),
    ("{name: r, when: run.errors > 1, action: wind_down, message: m, grace: {tool_calls: -1}}",
     "rule r: grace: tool_calls: expected an integer >= 0, got -1"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, terminal_state: aborted}",
     "rule r: terminal_state: a notify rule does not stop the run (use wind_down or abort)"),
    ("{name: r, when: run.errors, action: notify, message: m}",
     "rule r: when: must be a bool condition, but it is of type int (column 1)"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, severity: high}",
     "rule r: severity: 'high' is not one of info, warning, critical"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, repeat: always}",
     "rule r: repeat: 'always' is not one of once, on_change, each_time"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, enabled: maybe}",
     "rule r: enabled: expected true or false, got 'maybe'"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, agents: explorer}",
     "rule r: agents: expected a list of strings, got 'explorer'"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, agents: []}",
     "rule r: agents: empty list (the rule would never apply; use enabled: false)"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, for: -5s}",
     "rule r: for: expected a duration like 500ms, 30s, 1m30s, 1h, 1d (units ms s m h d w y, "
     "largest first), got '-5s'; a duration is written without a sign"),
    ("{name: r, when: run.errors > 1, action: notify, message: m, for: 5}",
     "rule r: for: expected a duration like 500ms, 30s, 1m30s, 1h, 1d (units ms s m h d w y, "
     "largest first), got 5; a bare number has no unit: write 5s"),
    ("{name: r, when: '', action: notify, message: m}",
     "rule r: when: expected a non-empty string, got ''"),
    ("{name: r, when: run.errors > 1, action: notify, message: 'a ${run.errors'}",
     "rule r: message: unclosed '${' (a placeholder ends with '}'; write $${ for a literal ${) "
     "(column 3)"),
    # Helm's or Python's braces, sent to the agent as written: the placeholder to write instead
    ("{name: r, when: run.errors > 1, action: notify, message: 'errors: {{ run.errors }}'}",
     "rule r: message: '{{ run.errors }}' is not a placeholder: write ${run.errors} (column 9)"),
    ("{name: r, when: run.errors > 1, action: notify, message: 'left: {run.budget.remaining_"
     "tool_calls}, {\"json\": 1}'}",
     "rule r: message: '{run.budget.remaining_tool_calls}' is not a placeholder: write "
     "${run.budget.remaining_tool_calls} (column 7)"),
    ("just-a-string", "rule #1: a rule must be a mapping, not 'just-a-string'"),
    ("{name: r, when: run.errors > 1, action: notify, message: no}",
     "rule r: message: expected a non-empty string (YAML reads no as a boolean: quote it), "
     "got false"),
])
def test_rule_problems(tmp_path: Path, rule: str, message: str) -> None:
    path = write(tmp_path / "r.yaml", f"rules:\n  - {rule}\n")
    assert problems(path) == [f"{path}:5: {message}"]


@pytest.mark.parametrize("key", ["expr", "condition", "if"])
def test_a_condition_under_another_languages_key_is_told_when(tmp_path: Path, key: str) -> None:
    """Prometheus' ``expr`` (or ``condition``, ``if``): told it is ``when``, not the closest
    spelling (``condition`` read as ``action``)."""
    path = write(tmp_path / "r.yaml", f"rules:\n  - {{name: r, {key}: run.errors > 1, "
                                      f"action: notify, message: m}}\n")
    assert problems(path) == [f"{path}:5: rule r: unknown key '{key}' (did you mean 'when'?)",
                              f"{path}:5: rule r: 'when' is required"]


def test_budget_problems(tmp_path: Path) -> None:
    path = write(tmp_path / "b.yaml", """\
        budgets:
          - agents: ["*"]
          - max_seconds: 0
          - max_tool_calls: 2.5
          - agents: ["[x"]
            max_tokens: 100
          - agents: ["a"]
            actions: bash
          - agents: ["a"]
            max_tool_calls: 2
            stop_answer: "done"
          - agents: ["a"]
            actions: text
            stop_answer: ""
    """)
    assert problems(path) == [
        f"{path}:5: budgets: an entry sets no limit (use one of max_tool_calls, max_iterations, "
        f"max_seconds, max_tokens, max_cost_usd, actions: text, or finish)",
        f"{path}:6: budgets: max_seconds: must be more than 0",
        f"{path}:7: budgets: max_tool_calls: expected an integer >= 1, got 2.5",
        f"{path}:8: budgets: agents: bad glob '[x': unclosed '['",
        f"{path}:11: budgets: actions: 'bash' is not tools, text or code",
        f"{path}:14: budgets: stop_answer: only for agents that act in text (actions: text or "
        f"code)",
        f"{path}:17: budgets: stop_answer: expected a non-empty string, got ''",
    ]


def test_action_pattern_problems(tmp_path: Path) -> None:
    path = write(tmp_path / "b.yaml", """\
        budgets:
          - agents: ["a"]
            max_tool_calls: 2
            action_pattern: "Action: (.*)"
          - agents: ["a"]
            actions: text
            action_pattern: "Action: (.*"
          - agents: ["a"]
            actions: text
            action_pattern: "%s"
          - agents: ["a"]
            actions: text
            action_pattern: "Action: (.*)(?=Action Input)"
    """ % ("x" * 501))
    found = problems(path)
    assert found[0] == (f"{path}:7: budgets: action_pattern: only for agents that act in "
                        "text (actions: text)")
    assert found[1].startswith(f"{path}:10: budgets: action_pattern: not a regular expression "
                               "(missing ), unterminated subpattern")
    assert found[2] == f"{path}:13: budgets: action_pattern: 1 to 500 characters"
    # (a look-around: the matcher that searches an answer in linear time reads none)
    assert found[3].startswith(f"{path}:16: budgets: action_pattern: not one the linear-time "
                               "matcher reads (no look-around or back-reference): ")
    assert len(found) == 4


def test_action_key_problems_and_its_entry(tmp_path: Path) -> None:
    """``action_key`` (the key whose value names the tool a JSON object in an answer asks
    for): for agents that act in text, 1 to 100 characters, with an ``action_pattern`` or
    not (the objects read in what it matches); kept as written, and shown in the pack's
    description."""
    path = write(tmp_path / "k.yaml", """\
        budgets:
          - agents: ["a"]
            max_tool_calls: 2
            action_key: request
          - agents: ["a"]
            actions: text
            action_pattern: "(.*)"
            action_key: request
          - agents: ["a"]
            actions: text
            action_key: "%s"
          - agents: ["a"]
            actions: code
            action_key: request
    """ % ("x" * 101))
    assert problems(path) == [
        f"{path}:7: budgets: action_key: only for agents that act in text (actions: text)",
        f"{path}:14: budgets: action_key: 1 to 100 characters",
        f"{path}:17: budgets: action_key: only for agents that act in text (actions: text)"]
    ruleset = load_text(HEADER + """\
budgets:
  - agents: ["langroid*"]
    max_tool_calls: 3
    actions: text
    action_key: request
  - agents: ["qwen*"]
    actions: text
    action_pattern: '(?s)<tool_call>.*</tool_call>'
    action_key: name
""")
    entry = ruleset.acts_in_text("langroid-agent")
    assert entry is not None and entry.action_key == "request" and entry.action_pattern is None
    entry = ruleset.acts_in_text("qwen-agent")
    assert entry is not None and (entry.action_key, entry.action_pattern) == (
        "name", "(?s)<tool_call>.*</tool_call>")


def test_answer_tools_problems_and_its_entry(tmp_path: Path) -> None:
    """``answer_tools`` (the tools whose action is the agent's answer): with an
    ``action_key`` or ``action_pattern`` (what names an action's tool), 1 to 16 names of 1
    to 100 characters; kept in order, once each."""
    path = write(tmp_path / "t.yaml", """\
        budgets:
          - agents: ["a"]
            actions: text
            answer_tools: [done_tool]
          - agents: ["a"]
            actions: text
            action_key: request
            answer_tools: []
          - agents: ["a"]
            actions: text
            action_key: request
            answer_tools: ["%s"]
          - agents: ["a"]
            actions: text
            action_key: request
            answer_tools: done_tool
    """ % ("x" * 101))
    found = problems(path)
    assert found[:3] == [
        f"{path}:7: budgets: answer_tools: only with an action_key or action_pattern (what "
        "names an action's tool)",
        f"{path}:11: budgets: answer_tools: 1 to 16 names, each 1 to 100 characters",
        f"{path}:15: budgets: answer_tools: 1 to 16 names, each 1 to 100 characters"]
    assert found[3].startswith(f"{path}:19: budgets: answer_tools: expected a list of strings")
    assert len(found) == 4
    ruleset = load_text(HEADER + """\
budgets:
  - agents: ["langroid*"]
    actions: text
    action_key: request
    answer_tools: [done_tool, final_result_tool, done_tool]
""")
    entry = ruleset.acts_in_text("langroid-agent")
    assert entry is not None and entry.answer_tools == ("done_tool", "final_result_tool")


def test_answer_key_problems_and_its_entry(tmp_path: Path) -> None:
    """``answer_key`` (the key of the JSON object that is the agent's answer): with an
    ``action_key``, 1 to 100 characters, not the action_key; kept, and dumped."""
    path = write(tmp_path / "t.yaml", """\
        budgets:
          - agents: ["a"]
            actions: text
            answer_key: finalAnswer
          - agents: ["a"]
            actions: text
            action_key: action
            answer_key: action
          - agents: ["a"]
            actions: text
            action_key: action
            answer_key: "%s"
    """ % ("x" * 101))
    assert problems(path) == [
        f"{path}:7: budgets: answer_key: only with an action_key (what names an action's tool)",
        f"{path}:11: budgets: answer_key: 1 to 100 characters, not the action_key",
        f"{path}:15: budgets: answer_key: 1 to 100 characters, not the action_key"]
    ruleset = load_text(HEADER + """\
budgets:
  - agents: ["kaibanjs*"]
    actions: text
    action_key: action
    answer_key: finalAnswer
""")
    entry = ruleset.acts_in_text("kaibanjs-agent")
    assert entry is not None and (entry.action_key, entry.answer_key) == ("action", "finalAnswer")


def test_an_entry_may_say_its_agents_act_in_text(tmp_path: Path) -> None:
    """``actions: text`` needs no limit; its ``stop_answer`` is kept as written; the first
    matching entry says how an agent acts, as it says its budget."""
    ruleset = load_text(HEADER + """\
budgets:
  - agents: ["mini*"]
    actions: text
    stop_answer: "${note}\\n```sh\\nsubmit\\n```"
    action_pattern: "```sh\\n(.*?)```"
  - agents: ["*"]
    max_tool_calls: 5
    actions: tools
""")
    entry = ruleset.acts_in_text("mini-swe-agent")
    assert entry is not None and entry.stop_answer == "${note}\n```sh\nsubmit\n```"
    assert entry.action_pattern == "```sh\n(.*?)```"
    assert ruleset.budget_for("mini-swe-agent") == {}
    assert ruleset.acts_in_text("other") is None and ruleset.budget_for("other") == {
        "max_tool_calls": 5.0}


def test_an_entry_may_say_its_agents_act_by_the_code_blocks_in_their_answers() -> None:
    """``actions: code`` acts in text too (its stop_answer allowed, no finish call)."""
    ruleset = load_text(HEADER + """\
budgets:
  - agents: ["open-interpreter"]
    max_tool_calls: 10
    actions: code
""")
    entry = ruleset.acts_in_text("open-interpreter")
    assert entry is not None and entry.actions == "code" and entry.stop_answer is None
    assert ruleset.budget_for("open-interpreter") == {"max_tool_calls": 10.0}
    with pytest.raises(RulePackError, match="finish: only for agents that act by tool calls "
                                            r"\(for actions: code, stop_answer\)"):
        load_text(HEADER + """\
budgets:
  - agents: ["a"]
    actions: code
    finish: {tool: bash, arguments: {command: "done"}}
""")


@pytest.mark.parametrize(("glob", "problem"), [
    ("explorer-*", None), ("[!a]*", None), ("[]]x", None), ("a[bc]", None), ("*", None),
    ("x[", "unclosed '['"), ("[!", "unclosed '['"), (" x", "leading or trailing whitespace"),
])
def test_globs(glob: str, problem: str | None) -> None:
    assert glob_problem(glob) == problem


def test_load_text_for_tests_and_the_api() -> None:
    ruleset = load_text(HEADER + "rules: [{name: a, when: 'true', action: notify, message: a}]")
    assert isinstance(ruleset, RuleSet) and [r.name for r in ruleset.rules] == ["a"]
    with pytest.raises(RulePackError, match=r"<string>:4: rule a: when: undeclared reference"):
        load_text(HEADER + "rules: [{name: a, when: 'x', action: notify, message: a}]")


# -- countdowns ---------------------------------------------------------------------------------

def test_the_default_packs_budget_rules_declare_their_countdowns() -> None:
    ruleset = load_rules([])
    declared = {rule.name: rule.countdown for rule in ruleset.rules if rule.countdown}
    assert declared == {
        "budget-countdown": "tool_calls", "budget-last-call": "tool_calls",
        "budget-exhausted": "tool_calls", "budget-cost-countdown": "cost_usd",
        "budget-cost-last-call": "cost_usd", "budget-cost-exhausted": "cost_usd",
        "budget-iterations-countdown": "iterations",
        "budget-iterations-last-call": "iterations", "budget-tokens-countdown": "tokens",
        "budget-tokens-last-call": "tokens", "budget-tokens-exhausted": "tokens"}
    assert ruleset.get("budget-countdown").describe()["countdown"] == "tool_calls"  # type: ignore[union-attr]


CALLS_LEFT = """\
        rules:
          - name: calls-left
            countdown: tool_calls
            when: run.tool_calls > 3
            action: wind_down
            message: "calls left"
"""


def test_a_countdown_is_declared_and_checked_at_its_line(tmp_path: Path) -> None:
    """``countdown:`` names a budget; only a wind_down or an abort counts one down, with no
    grace; each problem with the rule's line."""
    path = write(tmp_path / "countdowns.yaml", CALLS_LEFT + """\
          - name: unknown-budget
            countdown: tool_call
            when: run.tool_calls > 3
            action: wind_down
            message: hi
          - name: a-note
            countdown: tokens
            when: run.tool_calls > 3
            action: notify
            message: hi
          - name: with-grace
            countdown: cost_usd
            when: run.tool_calls > 3
            action: wind_down
            grace: {tool_calls: 2}
            message: hi
    """)
    found = problems(path)
    assert found == [
        f"{path}:11: rule unknown-budget: countdown: 'tool_call' is not one of tool_calls, "
        f"cost_usd, tokens, iterations, none (did you mean 'tool_calls'?)",
        f"{path}:16: rule a-note: countdown: only a wind_down (the countdown) or an abort (the "
        f"budget's end) counts a budget down (this rule is notify)",
        f"{path}:21: rule with-grace: countdown: a countdown has no grace (the budget is its "
        f"limit): remove grace, or the countdown"], found
    good = write(tmp_path / "good.yaml", CALLS_LEFT + """\
          - name: guard
            when: run.tool_calls > 3
            action: wind_down
            message: "[budget: mine]"
    """)
    ruleset = load_rules([good], include_default=False)
    assert [(r.name, r.countdown) for r in ruleset.rules] == [("calls-left", "tool_calls"),
                                                                ("guard", None)]


def test_a_rule_replacing_a_countdown_keeps_it_unless_it_says_otherwise(tmp_path: Path) -> None:
    """A pack written before ``countdown:`` existed, which copied the default pack's budget
    rules by name, counts down as it did; ``countdown: none`` makes such a rule an ordinary
    one, and a replacement that cannot count down (a notify) keeps nothing."""
    path = write(tmp_path / "copied.yaml", """\
        rules:
          - name: budget-countdown
            when: "has(run.budget.remaining_tool_calls) && run.budget.remaining_tool_calls <= 5"
            action: wind_down
            message: "[budget: ${run.budget.remaining_tool_calls} left]"
          - name: budget-last-call
            countdown: none
            when: "has(run.budget.remaining_tool_calls) && run.budget.remaining_tool_calls == 1"
            action: wind_down
            message: "last one"
          - name: budget-cost-countdown
            when: run.tool_calls > 100
            action: notify
            message: "a note"
          - name: budget-tokens-countdown
            countdown: iterations
            when: run.tool_calls > 100
            action: wind_down
            message: "model calls"
    """)
    ruleset = load_rules([path])
    countdowns = {name: ruleset.get(name).countdown  # type: ignore[union-attr]
                  for name in ("budget-countdown", "budget-last-call", "budget-cost-countdown",
                               "budget-tokens-countdown", "budget-exhausted")}
    assert countdowns == {"budget-countdown": "tool_calls", "budget-last-call": None,
                          "budget-cost-countdown": None, "budget-tokens-countdown": "iterations",
                          "budget-exhausted": "tool_calls"}


def test_an_entry_may_say_its_budget_covers_the_whole_conversation(tmp_path: Path) -> None:
    """``budget_per: conversation`` (default ``run``), for any way the agents act; the first
    matching entry says it; any other value is refused with the key and what is allowed."""
    ruleset = load_text(HEADER + """\
budgets:
  - agents: ["nudger"]
    max_tool_calls: 5
    budget_per: conversation
  - agents: ["*"]
    max_tool_calls: 5
    budget_per: run
""")
    assert ruleset.per_conversation("nudger") and not ruleset.per_conversation("other")
    assert ruleset.budget_for("nudger") == {"max_tool_calls": 5.0}
    path = write(tmp_path / "b.yaml", """\
        budgets:
          - agents: ["a"]
            max_tool_calls: 2
            budget_per: session
    """)
    assert problems(path) == [
        f"{path}:7: budgets: budget_per: 'session' is not run or conversation"]


def test_an_entry_may_say_whether_its_agent_runs_the_work_beside_its_answer(
        tmp_path: Path) -> None:
    """``work_beside_answer: run`` or ``skipped`` (default: as the answer tool's conventions
    say), with no limit needed, for agents that act by tool calls; any other value, or an
    entry whose agents act in text, is refused with the key."""
    ruleset = load_text(HEADER + """\
budgets:
  - agents: ["exhaustive-*"]
    work_beside_answer: run
  - agents: ["smol-*"]
    max_tool_calls: 5
    work_beside_answer: skipped
  - agents: ["*"]
    max_tool_calls: 5
""")
    assert [ruleset.work_beside_answer(agent) for agent in (
        "exhaustive-a", "smol-b", "other")] == ["run", "skipped", None]
    assert ruleset.budget_for("exhaustive-a") == {}
    path = write(tmp_path / "b.yaml", """\
        budgets:
          - agents: ["a"]
            max_tool_calls: 2
            work_beside_answer: sometimes
          - agents: ["b"]
            actions: text
            work_beside_answer: run
    """)
    assert problems(path) == [
        f"{path}:7: budgets: work_beside_answer: 'sometimes' is not run or skipped",
        f"{path}:10: budgets: work_beside_answer: only for agents that act by tool calls "
        "(for actions: text, answer_tools)"]
