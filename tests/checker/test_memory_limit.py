"""The per-rule memory budget: a rule that grows the process's memory past it is an error of type MemoryLimit
naming the budget, what was measured and the option that raises it; the next rule is checked as usual."""

from __future__ import annotations

import re
import signal
import textwrap
import time

import numpy as np
import pytest
from click.testing import CliRunner

from gradguard.checker import UsageError, arrays, check, rrule
from gradguard.checker._memory import GRACE_S, MemoryLimit, RuleMemoryLimit, map_count, max_map_count, resident_bytes
from gradguard.checker.cli import main
from gradguard.checker.config import ConfigError, check_kwargs, validate

pytestmark = pytest.mark.skipif(resident_bytes() is None, reason="resident memory is measured through /proc")

MB = 2**20
FIX = ("; raise it with --memory-limit MB (check(memory_limit_mb=), memory-limit in [tool.gradguard]; 0: no limit), "
       "or check the rule with smaller inputs")
GREW = re.compile(r"exceeded the 50 MB per-rule memory limit before every check had run: its resident memory grew "
                  r"by (\d+\.\d) MB since the rule started" + re.escape(FIX))


def double(x):
    return 2.0 * x


@rrule(double, arrays(shape=(3,)))
def eats_at_once_rrule(x):
    hoard = np.ones(400 * MB // 8)  # 400 MB in one allocation, written
    return 2.0 * x + 0.0 * hoard[-1], lambda ybar: (2.0 * ybar,)


@rrule(double, arrays(shape=(3,)))
def eats_gradually_rrule(x):
    hoard = []
    for _ in range(400):  # 400 MB, one at a time, all inside one call
        hoard.append(np.ones(MB // 8))
    return 2.0 * x, lambda ybar: (2.0 * ybar,)


@rrule(double, arrays(shape=(3,)))
def eats_then_waits_rrule(x):
    hoard = np.ones(80 * MB // 8)
    time.sleep(60)  # over its budget and stuck in one call: only the signal ends it
    return 2.0 * x + 0.0 * hoard[-1], lambda ybar: (2.0 * ybar,)


@rrule(double, arrays(shape=(3,)))
def asks_too_much_rrule(x):
    np.ones(2**45)  # 256 TB: the allocation itself fails
    return 2.0 * x, lambda ybar: (2.0 * ybar,)


@rrule(double, arrays(shape=(3,)))
def raises_memory_error_rrule(x):
    raise MemoryError()  # no size: nothing says the budget ran out


@rrule(double, arrays(shape=(3,)))
def double_rrule(x):
    scratch = np.ones(MB // 8)  # the correct twin: it allocates, but little
    return 2.0 * x + 0.0 * scratch[0], lambda ybar: (2.0 * ybar,)


def _growth(result) -> float:
    assert result.verdict == "error" and result.error["type"] == "MemoryLimit", (result.verdict, result.error)
    match = GREW.fullmatch(result.error["message"])
    assert match, result.error["message"]
    return float(match.group(1))


def test_a_rule_that_allocates_far_beyond_its_budget_at_once_is_stopped_and_the_next_rule_passes():
    report = check([eats_at_once_rrule, double_rrule], select=["GG1"], memory_limit_mb=50)
    eats, twin = report.rules
    assert 50 < _growth(eats) <= 420
    assert eats.findings == [] and eats.error["traceback"] == ""
    assert twin.verdict == "pass" and twin.error is None


def test_a_rule_that_grows_inside_one_call_is_interrupted_before_it_holds_everything():
    report = check([eats_gradually_rrule, double_rrule], select=["GG1"], memory_limit_mb=50)
    eats, twin = report.rules
    assert 50 < _growth(eats) < 300  # stopped at about twice its budget, not at the 400 MB it wanted
    assert twin.verdict == "pass"


def test_a_rule_over_its_budget_and_stuck_in_one_call_is_interrupted_after_the_grace():
    previous = signal.getsignal(signal.SIGUSR2)
    started = time.monotonic()
    report = check([eats_then_waits_rrule], select=["GG101"], memory_limit_mb=50)
    assert 50 < _growth(report.rules[0]) < 200
    assert time.monotonic() - started < GRACE_S + 10  # not the rule's 60 s
    assert signal.getsignal(signal.SIGUSR2) is previous  # the handler is put back


def test_one_allocation_larger_than_the_budget_left_is_over_the_budget():
    result = check(asks_too_much_rrule, select=["GG1"], memory_limit_mb=50).rules[0]
    assert result.verdict == "error" and result.error["type"] == "MemoryLimit"
    assert re.fullmatch(r"exceeded the 50 MB per-rule memory limit before every check had run: it asked for one "
                        r"allocation of 256\.0 TB with \d+\.\d MB of its budget in use" + re.escape(FIX),
                        result.error["message"]), result.error["message"]


def test_without_a_budget_or_without_a_size_a_memory_error_stays_what_it_was():
    """Only what was measured is blamed on the budget: with no budget the failed allocation is the rule's
    exception, as before; a MemoryError that does not say its size established nothing about the budget."""
    unbounded = check(asks_too_much_rrule, select=["GG101"], memory_limit_mb=0).rules[0]
    assert unbounded.verdict == "fail" and "raised MemoryError" in unbounded.findings[0].message
    sizeless = check(raises_memory_error_rrule, select=["GG101"], memory_limit_mb=50).rules[0]
    assert sizeless.verdict == "fail" and "raised MemoryError" in sizeless.findings[0].message


def test_what_a_stopped_rule_held_is_given_back():
    check(double_rrule, select=["GG101"], memory_limit_mb=50)  # the checker's own first-use costs, not measured
    before = resident_bytes()
    check(eats_at_once_rrule, select=["GG1"], memory_limit_mb=50)
    assert resident_bytes() - before < 100 * MB


def test_the_limit_only_notes_at_first_and_raises_at_a_safe_point():
    from gradguard.checker._deadline import at_safe_point

    with MemoryLimit(30) as limit:
        hoard = np.ones(40 * MB // 8)  # over the budget, below twice it: no signal within the grace
        limit.sample()
        assert limit.spent is not None  # noted, not raised: no library call is cut in half
        with pytest.raises(RuleMemoryLimit, match=r"exceeded the 30 MB per-rule memory limit: its resident memory grew"):
            at_safe_point()
        del hoard
    at_safe_point()  # nothing left over once the block is gone


def test_a_budget_must_be_a_number_of_megabytes():
    for bad in (-1, True, "50", float("nan"), float("inf")):
        with pytest.raises(UsageError, match=r"must be a number of megabytes >= 0 \(0 or None: no limit\)"):
            check(double_rrule, memory_limit_mb=bad)


RULES = textwrap.dedent('''
    import numpy as np
    from gradguard.checker import rrule, arrays

    def double(x):
        return 2.0 * x

    @rrule(double, arrays(shape=(3,)))
    def a_eats_rrule(x):
        hoard = np.ones(400 * 2**20 // 8)
        return 2.0 * x + 0.0 * hoard[-1], lambda ybar: (2.0 * ybar,)

    @rrule(double, arrays(shape=(3,)))
    def b_double_rrule(x):
        return 2.0 * x, lambda ybar: (2.0 * ybar,)
''')


def _verdicts(output: str) -> list[str]:
    return re.findall(r"^(PASS|FAIL|ERROR) +(\w+)", output, flags=re.M)


def test_the_command_line_option_sets_the_budget(tmp_path):
    (tmp_path / "eat_rules.py").write_text(RULES)
    result = CliRunner().invoke(main, ["check", str(tmp_path / "eat_rules.py"), "--select", "GG101", "--no-cache",
                                       "--memory-limit", "50"])
    assert result.exit_code == 1, result.output
    assert _verdicts(result.output) == [("ERROR", "a_eats_rrule"), ("PASS", "b_double_rrule")]
    assert "MemoryLimit: exceeded the 50 MB per-rule memory limit" in result.output
    unbounded = CliRunner().invoke(main, ["check", str(tmp_path / "eat_rules.py"), "--select", "GG101", "--no-cache",
                                          "--memory-limit", "0"])
    assert unbounded.exit_code == 0, unbounded.output
    refused = CliRunner().invoke(main, ["check", str(tmp_path), "--memory-limit", "-5"])
    assert refused.exit_code == 2 and "Invalid value for '--memory-limit'" in refused.output, refused.output


def test_the_config_key_sets_the_budget_and_the_command_line_overrides_it(tmp_path, monkeypatch):
    (tmp_path / "eat_rules.py").write_text(RULES)
    (tmp_path / "pyproject.toml").write_text('[tool.gradguard]\nmemory-limit = 50\nselect = ["GG101"]\ncache = false\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "eat_rules.py"])
    assert _verdicts(result.output) == [("ERROR", "a_eats_rrule"), ("PASS", "b_double_rrule")], result.output
    overridden = CliRunner().invoke(main, ["check", "eat_rules.py", "--memory-limit", "0"])
    assert overridden.exit_code == 0, overridden.output
    assert check_kwargs(validate({"memory-limit": 0})) == {"memory_limit_mb": None}
    assert check_kwargs(validate({"memory-limit": 512})) == {"memory_limit_mb": 512.0}
    with pytest.raises(ConfigError, match=r"got memory-limit = 'lots', but memory-limit must be a number >= 0"):
        validate({"memory-limit": "lots"})


def test_worker_processes_keep_the_budget(tmp_path):
    (tmp_path / "eat_rules.py").write_text(RULES)
    report = check(tmp_path / "eat_rules.py", select=["GG101"], memory_limit_mb=50, jobs=2)
    eats, twin = report.rules
    assert eats.error["type"] == "MemoryLimit" and GREW.fullmatch(eats.error["message"])
    assert twin.verdict == "pass"


def test_a_verdict_cached_under_one_budget_is_not_reused_under_another(tmp_path):
    """Errors are never cached, passes are: a pass without a budget says nothing about a run with one."""
    (tmp_path / "eat_rules.py").write_text(RULES)
    cache = tmp_path / "cache"
    first = check(tmp_path / "eat_rules.py", select=["GG101"], memory_limit_mb=0, cache_dir=cache)
    assert first.rules[0].verdict == "pass"
    again = check(tmp_path / "eat_rules.py", select=["GG101"], memory_limit_mb=50, cache_dir=cache)
    assert again.rules[0].error["type"] == "MemoryLimit" and not again.rules[0].cached


def test_the_monitor_samples_more_often_as_the_budget_runs_out():
    from gradguard.checker import _memory

    roomy, tight = MemoryLimit(12000), MemoryLimit(50)
    assert roomy.period() == _memory.SAMPLE_AT_MOST_S  # seconds of the fastest growth left: the longest wait
    tight.peak = 49 * MB  # 1 MB left: gone in well under the shortest wait at the fastest growth
    assert tight.period() == _memory.SAMPLE_EVERY_S
    middle = MemoryLimit(500)
    middle.peak = 500 * MB - int(0.02 * _memory.GROWTH_RATE)  # 20 ms of the fastest growth left
    assert middle.period() == pytest.approx(0.02)


_MAPPED: list = []  # the maps the rule below leaves behind (kept, as a leak keeps them)


@rrule(double, arrays(shape=(3,)))
def maps_and_never_unmaps_rrule(x):
    import mmap
    import tempfile

    with tempfile.TemporaryFile() as f:
        f.write(b"\0" * mmap.PAGESIZE)
        f.flush()
        for _ in range(100):  # one file's first page mapped again and again: maps the kernel cannot merge
            _MAPPED.append(mmap.mmap(f.fileno(), mmap.PAGESIZE, access=mmap.ACCESS_READ))
    time.sleep(0.02)
    return 2.0 * x, lambda ybar: (2.0 * ybar,)


def _as_if_fresh(monkeypatch) -> int:
    """This process's maps counted from 500, as a fresh process's are, and a kernel limit (returned) whose 90% line lies
    2000 maps above: a test process that has run many JAX tests holds tens of thousands, where a rule is blamed for
    reaching the line only if it mapped half of it itself (otherwise a fresh process judges it)."""
    import gradguard.checker._memory as memory

    real = memory.map_count
    offset = real() - 500
    monkeypatch.setattr(memory, "map_count", lambda: real() - offset)
    lowered = int(2500 / memory.MAPS_SHARE) + 1
    monkeypatch.setattr(memory, "max_map_count", lambda: lowered)
    return lowered


@pytest.mark.skipif(map_count() is None or max_map_count() is None, reason="memory maps are counted through /proc")
def test_a_rule_that_maps_memory_it_never_unmaps_stops_near_the_kernels_limit_on_maps(monkeypatch) -> None:
    """Past 90% of vm.max_map_count a process cannot map memory and JAX's compiler crashes it; the rule is stopped
    before that, with an error that says what was counted (the kernel's limit lowered here, so as to reach it)."""
    import gradguard.checker._memory as memory

    monkeypatch.setattr(memory, "MAPS_EVERY_S", 0.02)
    lowered = _as_if_fresh(monkeypatch)
    try:
        (stopped,) = check([maps_and_never_unmaps_rrule], select=["GG101", "GG102"], max_examples=50).rules
    finally:
        for m in _MAPPED:  # what the leak held goes back: the next rule starts with room
            m.close()
        _MAPPED.clear()
    (after,) = check([double_rrule], select=["GG101", "GG102"]).rules
    assert stopped.verdict == "error" and stopped.error["type"] == "MemoryLimit", stopped.error
    assert re.fullmatch(
        r"stopped before every check had run: its process holds [\d,]+ memory maps \([\d,]+ when the rule started, "
        r"[\d,]+ mapped since\), "
        rf"past 90% of the {lowered:,} the kernel allows one process \(vm.max_map_count\)\. A process at that "
        r"limit can map no more memory whatever its size, .* or raise vm\.max_map_count \(sysctl\)", stopped.error["message"])
    assert after.verdict == "pass", after.error  # the next rule is checked as usual


@rrule(double, arrays(shape=(3,)))
def slow_double_rrule(x):
    time.sleep(0.03)  # long enough for the monitor to count the maps while it runs
    return 2.0 * x, lambda ybar: (2.0 * ybar,)


@pytest.mark.skipif(map_count() is None or max_map_count() is None, reason="memory maps are counted through /proc")
def test_a_rule_stopped_by_maps_an_earlier_rule_left_is_not_blamed_and_is_checked_in_a_fresh_process(monkeypatch):
    """jax_fdm's eager solvers left 59,000 maps in the process, and every rule checked after them in it was stopped at
    once and told that its calls map memory they do not unmap. Such a rule's error now says the maps were there before
    it, and a run checks it again in a process of its own (here, one with the kernel's real limit): it passes."""
    import gradguard.checker._memory as memory
    from gradguard.checker.options import Options
    from gradguard.checker.per_rule import INHERITED_MAPS, check_rule

    monkeypatch.setattr(memory, "MAPS_EVERY_S", 0.02)
    lowered = _as_if_fresh(monkeypatch)
    ids = ["GG101", "GG102"]
    try:
        leaky, after = check([maps_and_never_unmaps_rrule, slow_double_rrule], select=ids, max_examples=50).rules
        alone = check_rule(slow_double_rrule, ids, Options())  # in this process, the leak's maps still held
    finally:
        for m in _MAPPED:
            m.close()
        _MAPPED.clear()
    assert leaky.verdict == "error" and leaky.error["type"] == "MemoryLimit", leaky.error
    assert after.verdict == "pass" and after.error is None, after.error
    assert alone.verdict == "error" and alone.error["type"] == INHERITED_MAPS
    assert re.fullmatch(
        r"not checked: its process holds ([\d,]+) memory maps \(([\d,]+) when the rule started, [\d,]+ mapped since\), "
        rf"past 90% of the {lowered:,} the kernel allows one process \(vm.max_map_count\)\. This rule mapped too few of "
        r"them to reach that line from a fresh start: the rest were there before it, mapped by the calls of rules "
        r"checked before it in the same process, so the limit says nothing about this rule; a run checks such a rule "
        r"again in a process of its own\. Alone: gradguard check FILE::NAME", alone.error["message"]), alone.error["message"]
