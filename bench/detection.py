"""Detection benchmark: gradguard against torch.autograd.gradcheck and jax.test_util.check_grads.

    python bench/detection.py                      # the whole corpus; writes bench/RESULTS.md
    python bench/detection.py --quick              # a handful of cases, prints only
    python bench/detection.py --tools gradguard,check_grads --cases sum_ones_rrule
    python bench/detection.py --tools gradguard --max-examples 1   # the time/detection trade-off
    python bench/detection.py --corpus realworld   # the public real-world corpus only; writes its own section
    python bench/detection.py --corpus torch       # the PyTorch rules (tests/corpus/torch_*.py); their own section

Every labelled rule of the corpus (tests/corpus/) runs through each tool. With ``--corpus realworld`` the
rules are those of the public real-world corpus instead (tests/realworld/: correct rules copied from public
projects, and historical bugs beside their fixed twins, told apart by the modules' ``BUGGY``/``FIXED`` lists);
there gradguard flags a correct rule when it reports an error-severity finding (the verdict issue 12 holds it
to), and catches a historical bug when one of the checks its label expects reports an error; the run rewrites
only its own section of bench/RESULTS.md. With ``--corpus torch`` the rules are the labelled
``torch.autograd.Function`` rules of tests/corpus/torch_*.py (declared with ``torch_rule``; the default corpus
leaves them out), counted as the default corpus counts, in a section of their own: gradcheck and gradgradcheck
then run on the Function itself (below), and check_grads does not apply (it takes JAX functions).


* gradguard: ``gradguard.checker.check(rule)`` with every check (or ``--select``); and
  ``gradguard[isolation]``, the isolation families GG1-GG4 only (no contexts, no JAX transforms).
* gradcheck: the rule as a ``torch.autograd.Function`` over ``tensor.numpy()``
  views, float64; variants: plain (``check_undefined_grad=False``), with
  ``check_undefined_grad=True`` (the default), ``fast_mode=True``, and
  ``gradgradcheck`` for JAX-native rules (a NumPy backward is not differentiable).
  On torch rules: ``Function.apply`` itself with the drawn input as float64
  tensors that require grad, by gradcheck (the three variants above),
  ``gradgradcheck`` and ``gradgradcheck[fast]`` (``fast_mode=True``).
* check_grads: the rule as a ``jax.custom_vjp`` over ``jax.pure_callback``
  (JAX-native rules: their own ``custom_vjp``), ``modes=["rev"]``, order 1, and
  order 2 for JAX-native rules.

Anchors check one drawn input (their users' habit); for cases wrong only in a
program (bug classes context and aliasing) they run on the same context
programs gradguard uses, written for each framework (bench/_programs.py), and
count as catching the bug if any program fails; for jax-composition cases
check_grads also runs under jit and vmap. A tool "caught" a buggy rule when it
reported a failure (gradguard: any finding; gradcheck: returned False;
check_grads: AssertionError), "errored" when it raised something else, and
"missed" when it passed. On correct rules, anything but a pass is a false
positive. Times are wall-clock sums over the corpus, measured in this run,
imports excluded, each tool (and gradguard[isolation]) over the whole corpus in a
fresh process of its own: in one process, whichever tool ran first on a JAX rule
paid the compilations of the primitives the others then reused (check_grads took
8.1 s after gradguard on each case, 12.2 s alone). ``--one-process`` runs every
tool on each case in turn in one process, as before. gradguard then checks the whole corpus once more in a
single call on worker processes (``--jobs``, default one per CPU), the way
``gradguard check rules/ --jobs 0`` does, and reports that wall time and
whether the findings match the per-case runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cases import CLASSES, ROOT, BenchCase, load_cases, load_realworld_cases, prepare
from _programs import NAMES as CONTEXT_PROGRAMS
from _results import command_line, write_section

from gradguard.checker.runner import time_limit

TOOLS = {
    "gradguard": ["gradguard", "gradguard[isolation]"],
    "gradcheck": ["gradcheck", "gradcheck[undefined]", "gradcheck[fast]", "gradgradcheck"],
    "check_grads": ["check_grads", "check_grads[order=2]"],
}
TORCH_TOOLS = {**TOOLS, "gradcheck": [*TOOLS["gradcheck"], "gradgradcheck[fast]"]}  # --corpus torch
GROUPS = {"gradcheck": "gradcheck (any)", "check_grads": "check_grads (any)"}  # a variant that caught it
RESULTS = ROOT / "bench" / "RESULTS.md"
ISOLATION = ("GG1", "GG2", "GG3", "GG4")
QUICK = [
    "contract:no_pullback_rrule",
    "numeric:sum_ones_rrule",
    "numeric:tanh_sign_rrule",
    "cotangent:square_no_none_rrule",
    "state:sin_shared_buffer_rrule",
    "correct:square_rrule",
    "correct:cmul_rrule",
    "correct:scaled_into_rrule",
]
QUICK_TORCH = [
    "torch_rules:exp_twice_torch",
    "torch_rules:mul_wrong_flag_torch",
    "torch_rules:sin_once_torch",
    "torch_rules:exp_torch",
    "torch_rules:mul_flags_torch",
]
QUICK_REALWORLD = [
    "bugs_upstream:sinc_zero_buggy_rrule",
    "bugs_upstream:sinc_zero_fixed_rrule",
    "bugs_upstream:matmul_complex_buggy_rrule",
    "bugs_upstream:matmul_complex_fixed_rrule",
]
SECTIONS = {  # --corpus: (RESULTS.md section, its heading)
    "corpus": ("detection", "Detection: gradguard against gradcheck and check_grads"),
    "realworld": ("realworld", "Real-world corpus: gradguard against gradcheck and check_grads"),
    "torch": ("torch", "PyTorch rules: gradguard against gradcheck and gradgradcheck"),
}
NOT_JAX = "check_grads takes JAX functions; a torch.autograd.Function is not one"


MAX_EXAMPLES: int | None = None  # --max-examples: gradguard's examples per rule (None: its default)
VARIANTS: list[str] | None = None  # --variants (a child process of a separated run): only these variants run
ERRORS_ONLY = False  # --corpus realworld: only error-severity findings count as catching (warnings are shown)
CORPUS = "corpus"  # --corpus: which rules this run checks


def run_gradguard(case: BenchCase, select: list[str] | None) -> tuple[str, str, list[str]]:
    from gradguard import check

    report = check(case.rule, select=select, seed=0, max_examples=MAX_EXAMPLES)
    result = report.rules[0]
    ids = sorted({f.check_id for f in result.findings})
    if result.verdict == "error":
        return "errored", (result.error or {}).get("message", "")[:200], ids
    if ERRORS_ONLY:
        # A red verdict on a correct rule is a false positive; a historical bug counts as caught only when one of
        # the checks its label expects reports an error (as tests/realworld/test_realworld_bugs.py holds it).
        errors = sorted({f.check_id for f in result.findings if f.severity == "error"})
        warned = sorted(set(ids) - set(errors))
        detail = ", ".join(errors) + (f" (warnings: {', '.join(warned)})" if warned else "")
        if case.buggy and case.expect and errors and not set(errors) & set(case.expect):
            return "passed", f"{detail.strip()}: none of the expected {', '.join(case.expect)}", ids
        return ("caught" if errors else "passed"), detail.strip(), ids
    return ("caught" if ids else "passed"), ", ".join(ids), ids


class _ToolTimeout(BaseException):
    """One tool on one case ran past --timeout (BaseException: the tools' own handlers must not catch it)."""




def run_case(case: BenchCase, tools: list[str], select: list[str] | None, timeout: float = 0.0) -> dict[str, Any]:
    """Every variant of every tool on one case; an anchor call running past ``timeout`` seconds is an error."""
    row: dict[str, Any] = {"case": case.key, "bug": case.bug, "expect": case.expect, "tools": {}}
    if "upstream_flaw" in case.label:
        row["upstream_flaw"] = case.label["upstream_flaw"]
    for group in tools:
        for variant in TOOLS[group]:
            if VARIANTS is not None and variant not in VARIANTS:
                continue
            limit = 0.0 if group == "gradguard" else timeout  # gradguard has its own per-rule time limit
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    with time_limit(limit, _ToolTimeout, grace_s=0):  # other tools have no safe points
                        outcome, detail = _run_variant(case, group, variant, select, row)
                except _ToolTimeout:
                    outcome, detail = "errored", f"timed out after {limit:g} s"
                except Exception as exc:  # noqa: BLE001 - a tool crashed on this case: record it, go on
                    outcome, detail = "errored", f"{type(exc).__name__}: {str(exc)[:200]}"
            row["tools"][variant] = {"outcome": outcome, "detail": detail, "seconds": time.perf_counter() - start}
    return row


def _run_variant(case: BenchCase, group: str, variant: str, select: list[str] | None, row: dict[str, Any]) -> tuple[str, str]:
    import _jax_tools
    import _torch_tools

    if variant == "gradguard":
        outcome, detail, ids = run_gradguard(case, select)
        row["gradguard_ids"] = ids
        return outcome, detail
    if variant == "gradguard[isolation]":
        outcome, detail, _ = run_gradguard(case, list(ISOLATION))
        return outcome, detail
    if case.rule.kind == "torch":
        return _torch_tools.run_native(case, variant) if group == "gradcheck" else ("n/a", NOT_JAX)
    if group == "gradcheck":
        return _torch_tools.run(case, variant, _programs(case, "gradcheck"))
    return _jax_tools.run(case, variant, _programs(case, "check_grads"))


def _units(tools: list[str]) -> list[list[str]]:
    """The variants each process of a separated run runs: gradguard and its isolation checks apart, and each anchor's
    variants together (what "gradcheck (any)" and "check_grads (any)" time is one user running them all)."""
    units = []
    for group in tools:
        units.extend([[v] for v in TOOLS[group]] if group == "gradguard" else [TOOLS[group]])
    return units


def _run_separately(args: argparse.Namespace, tools: list[str], cases: list[BenchCase]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Each unit of variants over the whole corpus in a fresh process of this script; their rows merged by case."""
    import subprocess
    import tempfile

    rows: dict[str, dict[str, Any]] = {}
    imports: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, unit in enumerate(_units(tools)):
            group = next(g for g in tools if unit[0] in TOOLS[g])
            out = Path(tmp) / f"{k}.json"
            command = [sys.executable, __file__, "--corpus", args.corpus, "--tools", group, "--variants", ",".join(unit),
                       "--json", str(out), "--jobs", "1", "--timeout", str(args.timeout)]
            command += ["--cases", ",".join(c.key for c in cases)] if (args.cases or args.quick) else []
            command += ["--select", args.select] if args.select else []
            command += ["--max-examples", str(args.max_examples)] if args.max_examples is not None else []
            print(f"-- {', '.join(unit)}: a process of its own", flush=True)
            subprocess.run(command, check=True)
            child = json.loads(out.read_text())
            imports.setdefault(group, child["imports"].get(group, 0.0))
            for row in child["rows"]:
                merged = rows.setdefault(row["case"], {**row, "tools": {}})
                merged["tools"].update(row["tools"])
                if "gradguard_ids" in row:
                    merged["gradguard_ids"] = row["gradguard_ids"]
    for group, module in (("gradcheck", "torch"), ("check_grads", "jax")):
        if group in tools:
            __import__(module)  # here too, so that the results' environment line names the versions that ran
    order = {c.key: i for i, c in enumerate(cases)}
    return sorted(rows.values(), key=lambda r: order[r["case"]]), imports


def _programs(case: BenchCase, tool: str) -> list[str] | None:
    """The programs an anchor runs: the rule alone, or every context program for context-only bugs."""
    if case.in_context:
        return list(CONTEXT_PROGRAMS)
    if case.bug == "jax-composition" and tool == "check_grads":
        return ["output-used", "jit", "vmap"]
    return None


def whole_corpus(cases: list[BenchCase], rows: list[dict[str, Any]], select: list[str] | None, jobs: int) -> dict[str, Any]:
    """One ``check`` call over every case on worker processes: its wall time, and whether it found the same."""
    from gradguard import check
    from gradguard.checker.parallel import workers_for

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = check([c.rule for c in cases], select=select, seed=0, max_examples=MAX_EXAMPLES, jobs=jobs)
    seconds = time.perf_counter() - start
    differ = []
    for case, row, result in zip(cases, rows, report.rules):
        ids = sorted({f.check_id for f in result.findings})
        if ids != row.get("gradguard_ids", []) or (result.verdict == "error") != (row["tools"]["gradguard"]["outcome"] == "errored"):
            differ.append(case.key)
    return {"jobs": jobs, "workers": workers_for(jobs, len(cases)), "seconds": seconds, "same": not differ, "differ": differ}


def _group_of(col: str) -> str | None:
    return next((g for g, label in GROUPS.items() if label == col), None)


def _group_outcome(row: dict[str, Any], group: str) -> str:
    outs = [row["tools"][v]["outcome"] for v in TOOLS[group] if v in row["tools"]]
    for kind in ("caught", "errored", "passed"):
        if kind in outs:
            return kind
    return "n/a"


def summarise(rows: list[dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    columns = [v for g in tools for v in TOOLS[g]] + [GROUPS[g] for g in tools if g in GROUPS]
    table: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    false_pos: dict[str, list[str]] = defaultdict(list)
    flaws: dict[str, list[str]] = defaultdict(list)
    seconds: dict[str, float] = defaultdict(float)
    for row in rows:
        for col in columns:
            outcome = _outcome(row, col)
            if row["bug"] == "correct":
                if outcome == "caught" and "upstream_flaw" in row:  # a real flaw of the upstream rule, found
                    table["correct"][col]["flaw"] += 1
                    flaws[col].append(f"{row['case']} ({_detail(row, col)})")
                    continue
                if outcome in ("caught", "errored"):
                    false_pos[col].append(f"{row['case']} ({outcome}: {_detail(row, col)})")
                table["correct"][col]["flagged" if outcome in ("caught", "errored") else outcome] += 1
            else:
                table[row["bug"]][col][{"passed": "missed"}.get(outcome, outcome)] += 1
        for variant, info in row["tools"].items():
            seconds[variant] += info["seconds"]
    for g in tools:
        if g in GROUPS:
            seconds[GROUPS[g]] = sum(seconds[v] for v in TOOLS[g])
    return {"columns": columns, "table": table, "false_positives": false_pos, "flaws": flaws, "seconds": seconds}


def _outcome(row: dict[str, Any], col: str) -> str:
    return _group_outcome(row, _group_of(col)) if _group_of(col) else row["tools"][col]["outcome"]


def _detail(row: dict[str, Any], col: str) -> str:
    variants = TOOLS[_group_of(col)] if _group_of(col) else [col]
    for v in variants:
        info = row["tools"].get(v)
        if info and info["outcome"] in ("caught", "errored"):
            text = _without_paths(info["detail"])[:120]
            return f"{v}: {text}" if len(variants) > 1 else text
    return ""


_ROOT = str(Path(__file__).resolve().parent.parent) + os.sep


def _without_paths(text: str) -> str:
    """An anchor's message as the report shows it: a traceback it quotes names files relative to the repository,
    not where this machine keeps it."""
    return text.replace(_ROOT, "")


def render(summary: dict[str, Any], rows: list[dict[str, Any]], tools: list[str]) -> str:
    cols = summary["columns"]
    table = summary["table"]
    # A tool that applies to none of the rules (check_grads on torch rules) is shown as such, never as misses.
    na = {c for c in cols if rows and all(_outcome(r, c) == "n/a" for r in rows)}
    lines = []
    buggy = [r for r in rows if r["bug"] != "correct"]
    correct = [r for r in rows if r["bug"] == "correct"]
    lines.append(f"{len(buggy)} buggy rules, {len(correct)} correct rules. Cells: caught / missed / errored (n/a: does not apply).")
    lines.append("")
    lines.append("| bug class | cases | " + " | ".join(cols) + " |")
    lines.append("|---|---|" + "---|" * len(cols))
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for bug in [*CLASSES, *sorted(set(table) - set(CLASSES) - {"correct"})]:
        if bug not in table:
            continue
        n = sum(1 for r in buggy if r["bug"] == bug)
        cells = []
        for col in cols:
            c = table[bug][col]
            for k in ("caught", "missed", "errored", "n/a"):
                totals[col][k] += c[k]
            cells.append(f"{c['caught']} / {c['missed']} / {c['errored']}" + (f" ({c['n/a']} n/a)" if c["n/a"] else ""))
        lines.append(f"| {bug} | {n} | " + " | ".join("n/a" if col in na else cell for col, cell in zip(cols, cells)) + " |")
    cells = ["n/a" if c in na else f"{totals[c]['caught']} / {totals[c]['missed']} / {totals[c]['errored']}" for c in cols]
    lines.append(f"| **all buggy** | {len(buggy)} | " + " | ".join(cells) + " |")
    rates = []
    for c in cols:
        judged = totals[c]["caught"] + totals[c]["missed"] + totals[c]["errored"]
        rates.append(f"{100 * totals[c]['caught'] / judged:.0f}% ({100 * (totals[c]['caught'] + totals[c]['errored']) / judged:.0f}%)" if judged else "n/a")
    lines.append("| **detection rate** (caught, and caught or errored) | | " + " | ".join(rates) + " |")
    fp = ["n/a" if c in na else f"{table['correct'][c]['flagged']} / {len(correct)}" for c in cols]
    lines.append(f"| **false positives** on correct rules | {len(correct)} | " + " | ".join(fp) + " |")
    flawed = [r for r in correct if "upstream_flaw" in r]
    if flawed:
        found = [f"{table['correct'][c]['flaw']} / {len(flawed)}" for c in cols]
        lines.append(f"| **documented upstream flaws found** (correct rules with a known flaw) | {len(flawed)} | " + " | ".join(found) + " |")
    secs = summary["seconds"]
    lines.append("| **total wall time (s)** | | " + " | ".join("n/a" if c in na else f"{secs.get(c, 0.0):.1f}" for c in cols) + " |")
    lines.append("")
    for group in tools:
        if GROUPS.get(group) in na:
            why = sorted({_without_paths(info["detail"]) for r in rows for v, info in r["tools"].items() if v in TOOLS[group]})
            lines.append(f"{', '.join(TOOLS[group])}: n/a on every rule ({'; '.join(why)}); not counted as misses.")
            lines.append("")
    anchors = [g for g in tools if g != "gradguard" and GROUPS[g] not in na]
    if "gradguard" in tools and anchors:
        fastest = min((GROUPS[g] for g in anchors), key=lambda g: secs[g])
        ratio = secs["gradguard"] / secs[fastest] if secs[fastest] > 0 else float("inf")
        lines.append(f"gradguard total time / fastest anchor ({fastest}, all its variants): {ratio:.1f}x")
        plain = min((v for v in ("gradcheck", "check_grads") if v not in na), key=lambda v: secs.get(v, float("inf")))
        if plain in secs:
            lines.append(f"gradguard total time / fastest single anchor call ({plain}): {secs['gradguard'] / max(secs[plain], 1e-9):.1f}x")
            iso = secs.get("gradguard[isolation]", 0.0)
            lines.append(
                f"gradguard[isolation] (GG1-GG4 only) total time / fastest anchor: {iso / max(secs[fastest], 1e-9):.1f}x; "
                f"/ {plain}: {iso / max(secs[plain], 1e-9):.1f}x"
            )
        g = totals["gradguard"]
        judged = g["caught"] + g["missed"] + g["errored"]
        rate = g["caught"] / judged if judged else 0.0
        fps = table["correct"]["gradguard"]["flagged"]
        if ERRORS_ONLY:
            met = rate >= 0.95 and fps == 0
            lines.append(
                f"Issue 12's target on this corpus (>= 95% of the historical bugs caught, no error on a correct rule "
                f"beyond documented upstream flaws): {'MET' if met else 'NOT MET'} (caught {100 * rate:.0f}%, "
                f"{fps} false positive(s))."
            )
        elif CORPUS == "corpus":  # the detection target is set on the labelled corpus
            met = rate >= 0.95 and fps == 0 and ratio <= 2.0
            lines.append(
                f"Target (>= 95% caught, 0 false positives, within 2x of the fastest anchor): "
                f"{'MET' if met else 'NOT MET'} (caught {100 * rate:.0f}%, {fps} false positive(s), {ratio:.1f}x)."
            )
        lines.append("")
    whole = summary.get("whole_corpus")
    if whole:
        versus = f", {whole['seconds'] / max(secs[fastest], 1e-9):.1f}x the fastest anchor" if "gradguard" in tools and anchors else ""
        lines.append(
            f"gradguard over the whole corpus in one call on {whole['workers']} worker process(es) "
            f"(`gradguard check --jobs {whole['jobs']}`): {whole['seconds']:.1f} s{versus}; "
            f"the same findings as the per-case runs: {'yes' if whole['same'] else 'NO: ' + ', '.join(whole['differ'][:5])}."
        )
        lines.append("")
    if any(summary["false_positives"].values()):
        lines.append("False positives on correct rules:")
        for col in cols:
            for item in summary["false_positives"].get(col, []):
                lines.append(f"- {col}: {item}")
        lines.append("")
    if any(summary.get("flaws", {}).values()):
        lines.append("Documented upstream flaws found (not false positives; the evidence is in tests/realworld/INDEX.md):")
        for col in cols:
            for item in summary["flaws"].get(col, []):
                lines.append(f"- {col}: {item}")
        lines.append("")
    if CORPUS == "torch":  # a handful of rules: say what "errored" was, PyTorch refusing the Function at run time
        raised: dict[tuple[str, str], list[str]] = defaultdict(list)
        for r in rows:
            for v, i in r["tools"].items():
                if i["outcome"] == "errored":
                    raised[(r["case"], _without_paths(i["detail"])[:160])].append(v)
        if raised:
            lines.append("What the anchors raised (counted as errored):")
            for (case, detail), variants in raised.items():
                lines.append(f"- {case} ({', '.join(variants)}): {detail}")
            lines.append("")
    missed = [r for r in buggy if "gradguard" in r["tools"] and r["tools"]["gradguard"]["outcome"] != "caught"]
    if missed:
        lines.append("Buggy rules gradguard did not catch:")
        for r in missed:
            lines.append(f"- {r['case']} ({r['bug']}, expected {', '.join(r['expect'])}): {r['tools']['gradguard']['outcome']} {_without_paths(r['tools']['gradguard']['detail'])}")
        lines.append("")
    off = [r for r in rows if "gradguard_ids" in r and r["gradguard_ids"] != r["expect"]]
    if ERRORS_ONLY:
        off = []  # real-world labels name the checks expected to catch a bug, not every id gradguard reports
        caught = [r for r in buggy if r["tools"].get("gradguard", {}).get("outcome") == "caught"]
        if caught:
            lines.append("What gradguard reported on the historical bugs (error-severity ids; expected one of the label's):")
            for r in caught:
                lines.append(f"- {r['case']}: {_without_paths(r['tools']['gradguard']['detail'])} (expected one of {', '.join(r['expect'])})")
            lines.append("")
    if off:
        lines.append(
            "Rules where gradguard's ids differ from the label (labels are pinned by tests/checker/test_corpus.py; "
            "there the runner's wall-clock safety net is lifted, here gradguard runs as shipped):"
        )
        for r in off:
            lines.append(f"- {r['case']}: reported {r['gradguard_ids'] or 'nothing'}, label {r['expect'] or 'nothing'}")
        lines.append("")
    return "\n".join(lines)


def per_case(rows: list[dict[str, Any]], tools: list[str]) -> str:
    variants = [v for g in tools for v in TOOLS[g]]
    short = {"caught": "caught", "passed": "pass", "errored": "error", "n/a": "n/a"}
    lines = ["| case | bug | " + " | ".join(variants) + " |", "|---|---|" + "---|" * len(variants)]
    for r in rows:
        lines.append(f"| {r['case']} | {r['bug']} | " + " | ".join(short[r["tools"][v]["outcome"]] for v in variants) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a handful of cases (prints only, unless --results)")
    parser.add_argument(
        "--corpus", choices=sorted(SECTIONS), default="corpus",
        help="which rules: the labelled corpus (tests/corpus/), the public real-world corpus (tests/realworld/), "
        "or the labelled PyTorch rules (tests/corpus/torch_*.py; needs torch)",
    )
    parser.add_argument("--tools", default="gradguard,gradcheck,check_grads", help="comma-separated: gradguard,gradcheck,check_grads")
    parser.add_argument("--cases", default=None, help="comma-separated rule names (or module:name)")
    parser.add_argument("--select", default=None, help="gradguard check id prefixes (default: every check)")
    parser.add_argument("--results", default=None, help=f"write the Markdown report here (default for full runs: {RESULTS.relative_to(ROOT)})")
    parser.add_argument("--json", default=None, help="write per-case outcomes as JSON")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one anchor call may take on one case (0: no limit)")
    parser.add_argument(
        "--jobs", type=int, default=None,
        help="also check the whole corpus in one gradguard call on this many worker processes "
        "(0: one per CPU; 1: skip; default 0 for the corpus, 1 for the real-world and PyTorch corpora)",
    )
    parser.add_argument(
        "--max-examples", type=int, default=None,
        help="gradguard's drawn inputs per rule (default: its own, 20); fewer trade detection for time",
    )
    parser.add_argument(
        "--one-process", action="store_true",
        help="run every tool on each case in this process, one after another (the default runs each tool over the "
        "corpus in a process of its own, so that no tool inherits the programs another compiled)",
    )
    parser.add_argument("--variants", default=None, help=argparse.SUPPRESS)  # a separated run's child: these only
    args = parser.parse_args(argv)
    global MAX_EXAMPLES, ERRORS_ONLY, CORPUS, TOOLS, VARIANTS
    MAX_EXAMPLES = args.max_examples
    VARIANTS = args.variants.split(",") if args.variants else None
    CORPUS = args.corpus
    realworld = args.corpus == "realworld"
    ERRORS_ONLY = realworld
    jobs = args.jobs if args.jobs is not None else (0 if args.corpus == "corpus" else 1)
    if args.corpus == "torch":
        if importlib.util.find_spec("torch") is None:  # not imported here: its import time is measured below
            print("--corpus torch needs PyTorch, which is not installed (pip install torch==2.13.0)", file=sys.stderr)
            return 2
        TOOLS = TORCH_TOOLS

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        parser.error(f"unknown tool(s) {unknown}; choose from {', '.join(TOOLS)}")
    quick = {"corpus": QUICK, "realworld": QUICK_REALWORLD, "torch": QUICK_TORCH}[args.corpus]
    names = args.cases.split(",") if args.cases else (quick if args.quick else None)
    select = args.select.split(",") if args.select else None

    logging.getLogger("jax._src.callback").setLevel(logging.CRITICAL)  # a failing rule in a callback is an outcome, not noise
    started = time.perf_counter()
    imports: dict[str, float] = {}
    separate = not args.one_process and VARIANTS is None and len(_units(tools)) > 1
    for group, module in (("gradguard", "checker"), ("gradcheck", "torch"), ("check_grads", "jax")):
        if group in tools and separate:  # each child imports its own tool and times that
            if importlib.util.find_spec(module if module != "checker" else "gradguard") is None:
                print(f"skipping {group}: {module} is not installed (PyTorch is a benchmark-only extra: pip install torch==2.13.0)")
                tools.remove(group)
        elif group in tools:
            t = time.perf_counter()
            try:
                __import__(module)
            except ImportError as exc:
                print(f"skipping {group}: {exc} (PyTorch is a benchmark-only extra: pip install torch==2.13.0)")
                tools.remove(group)
                continue
            if module == "checker":
                from gradguard.checker.jax_rules import ensure_device

                ensure_device()  # JAX's import is part of gradguard's start-up too
            imports[group] = time.perf_counter() - t
    cases = prepare(load_realworld_cases(names=names) if realworld else load_cases(names=names, torch=args.corpus == "torch"))
    if not cases:
        print("no corpus case matches", file=sys.stderr)
        return 2
    rows = []
    if separate:
        rows, imports = _run_separately(args, tools, cases)
    else:
        for k, case in enumerate(cases, 1):
            row = run_case(case, tools, select, args.timeout)
            rows.append(row)
            outs = "  ".join(f"{v}={i['outcome']}" for v, i in row["tools"].items())
            print(f"[{k}/{len(cases)}] {case.key} ({case.bug}): {outs}", flush=True)
    if VARIANTS is not None:  # a child of a separated run: its rows and import times go back to the parent
        Path(args.json).write_text(json.dumps({"rows": rows, "imports": imports}, default=str))
        return 0
    summary = summarise(rows, tools)
    if "gradguard" in tools and jobs != 1 and len(cases) > 1:
        summary["whole_corpus"] = whole_corpus(cases, rows, select, jobs)
    text = render(summary, rows, tools)
    if separate:
        text += (
            "\nEach tool (and gradguard[isolation]) ran over the corpus in a Python process of its own, so none "
            "found JAX programs or PyTorch kernels another one had already compiled (`--one-process` runs them all "
            "on each case in turn, in one process).\n"
        )
    print()
    print(text)
    print("Import times (s, excluded above): " + ", ".join(f"{g} {s:.1f}" for g, s in imports.items()))
    command = command_line("detection.py", argv)
    partial = args.quick or args.cases or args.max_examples is not None or set(tools) != set(TOOLS)
    results = args.results or (None if partial else str(RESULTS))
    if results:
        imported = "Import times (s, excluded above): " + ", ".join(f"{g} {s:.1f}" for g, s in imports.items())
        body = f"{text}\n{imported}; {time.perf_counter() - started:.0f} s in all.\n\n### Per case\n\n{per_case(rows, tools)}\n"
        if MAX_EXAMPLES is None:
            write_section(results, *SECTIONS[args.corpus], command, body)
        else:
            heading = f"Detection with gradguard limited to {MAX_EXAMPLES} drawn input(s) per rule (the trade-off)"
            write_section(results, "detection_examples", heading, command, body)
        print(f"wrote {results}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
