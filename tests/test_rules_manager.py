"""The rule manager: packs loaded at start, reloaded when a file changes (a broken edit keeps
the running rules and is reported once), and a ConfigMap-style symlink swap noticed."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from watchdog.core.rules.pack import RulePackError, RuleSet
from watchdog.shell.rule_files import RuleManager, pack_failure

HEADER = "apiVersion: agent-watchdog/v1\nkind: RulePack\nname: mine\n"
RULE = ("rules:\n  - name: {name}\n    when: {when}\n    action: notify\n"
        "    message: x\n")


def write(path: Path, name: str, when: str = "run.tool_calls > 100") -> None:
    path.write_text(HEADER + RULE.format(name=name, when=when))
    # a new mtime even on a filesystem with coarse timestamps
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def rule_names(manager: RuleManager) -> set[str]:
    assert manager.engine is not None
    return {rule.name for rule in manager.engine.ruleset.rules}


def test_a_changed_file_is_reloaded_and_a_broken_edit_keeps_the_rules_and_is_said_once(
        tmp_path: Path) -> None:
    pack = tmp_path / "mine.yaml"
    write(pack, "first")
    outcomes: list[bool] = []
    manager = RuleManager([str(pack)], include_default=False, reloaded=outcomes.append)

    async def scenario() -> None:
        await manager.start()
        assert rule_names(manager) == {"first"} and outcomes == [True]
        await manager.watch()  # nothing changed: nothing loaded
        assert outcomes == [True]

        write(pack, "second")
        await manager.watch()
        assert rule_names(manager) == {"second"} and outcomes == [True, True]

        write(pack, "broken", when="run.nope > 1")
        await manager.watch()
        await manager.watch()  # the same broken file: not reported again
        assert rule_names(manager) == {"second"} and outcomes == [True, True, False]

        write(pack, "third")
        await manager.watch()
        assert rule_names(manager) == {"third"} and outcomes[-1] is True

    asyncio.run(scenario())


def test_a_symlink_swapped_to_another_file_is_noticed(tmp_path: Path) -> None:
    """What Kubernetes does to a mounted ConfigMap: the link points to a new file."""
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    write(tmp_path / "v1" / "mine.yaml", "old")
    write(tmp_path / "v2" / "mine.yaml", "new")
    link = tmp_path / "mine.yaml"
    link.symlink_to(tmp_path / "v1" / "mine.yaml")
    manager = RuleManager([str(link)], include_default=False)

    async def scenario() -> None:
        await manager.start()
        assert rule_names(manager) == {"old"}
        swap = tmp_path / "swap"
        swap.symlink_to(tmp_path / "v2" / "mine.yaml")
        os.replace(swap, link)
        await manager.watch()
        assert rule_names(manager) == {"new"}

    asyncio.run(scenario())


def test_a_bad_pack_at_start_is_an_error_said_in_one_line(tmp_path: Path) -> None:
    pack = tmp_path / "mine.yaml"
    write(pack, "broken", when="run.nope > 1")
    manager = RuleManager([str(pack)], include_default=False)
    with pytest.raises(RulePackError) as caught:
        asyncio.run(manager.start())
    line = pack_failure(caught.value)
    assert "\n" not in line and "nope" in line and "watchdog rules check" in line
    assert manager.engine is None


def test_a_reload_that_fails_outside_the_packs_keeps_the_rules_and_says_why(
        tmp_path: Path) -> None:
    """A load that fails with something other than a pack problem (here: the rules directory
    gone between the look and the listing, as a ConfigMap swap can make it) is a failed
    reload like a bad pack's: the running rules kept, the outcome False, the error said."""
    pack = tmp_path / "mine.yaml"
    write(pack, "first")
    outcomes: list[bool] = []

    class Swapped(RuleManager):
        gone = False

        def _load(self) -> RuleSet:
            if self.gone:
                os.listdir(tmp_path / "gone")  # FileNotFoundError
            return super()._load()

    manager = Swapped([str(pack)], include_default=False, reloaded=outcomes.append)

    async def scenario() -> tuple[bool, str]:
        await manager.start()
        manager.gone = True
        return await manager.reload()

    ok, message = asyncio.run(scenario())
    assert not ok and outcomes == [True, False]
    assert message.startswith("rule reload failed, keeping the previous rules: "
                              "FileNotFoundError: ")
    assert rule_names(manager) == {"first"}


def test_reloads_asked_for_at_once_share_the_one_that_begins_next(tmp_path: Path) -> None:
    """200 ``POST /-/reload`` at once were 200 loads one after the other (1.1 CPU seconds of
    the sidecar, against 0.1 shared). Those asked for while a reload waits to begin share it:
    one load running, one waiting, however many ask; and a reload asked for once a load has
    begun gets the next one, which reads the files as they are after it asked."""
    pack = tmp_path / "mine.yaml"
    write(pack, "first")
    manager = RuleManager([str(pack)], include_default=False)
    loads: list[set[str]] = []
    begun = threading.Event()
    release = threading.Event()
    load = manager._load

    def held_load() -> RuleSet:
        ruleset = load()
        loads.append({rule.name for rule in ruleset.rules})
        begun.set()
        release.wait(10)
        return ruleset

    async def scenario() -> None:
        await manager.start()
        manager._load = held_load  # type: ignore[method-assign]
        running = asyncio.ensure_future(manager.reload())
        await asyncio.to_thread(begun.wait, 10)  # the first load has read the files
        write(pack, "second")
        waiting = [asyncio.ensure_future(manager.reload()) for _ in range(50)]
        await asyncio.sleep(0)
        release.set()
        answers = await asyncio.gather(running, *waiting)
        assert loads == [{"first"}, {"second"}]
        assert answers == [(True, "rules reloaded: 1 active")] * 51
        assert rule_names(manager) == {"second"}

    asyncio.run(scenario())
