#!/usr/bin/env python3
"""One line per test suite (tests run, skipped, failed) from the results ctest and the suites
wrote, and CI's skip rule: with --ci, a skipped test fails the run unless .ci/allowed-skips
lists it with a reason.

Suites: each pytest suite (its JUnit file in BUILD/test-results/, written by the ctest entry of
the same name), each GoogleTest binary (its tests are ctest entries, grouped by the binary they
run), and every other ctest entry on its own (deploy_*, prometheus_*, module_links, ...).

Usage: .ci/summary.py BUILD [--ci] [--allowed FILE] [--extra DIR]...
  --extra DIR   more JUnit files (e.g. the sanitizer build's GoogleTest XML), a suite each
"""

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def outcome(case):
    """'failed', 'skipped' or 'passed' for one JUnit <testcase> (pytest, GoogleTest or ctest)."""
    if case.find("failure") is not None or case.find("error") is not None or case.get("status") == "fail":
        return "failed"
    if (case.find("skipped") is not None or case.get("status") in ("notrun", "disabled")
            or case.get("result") == "skipped"):
        return "skipped"
    return "passed"


def cases_of(path):
    """[(test id, outcome)] of a JUnit file."""
    root = ET.parse(path).getroot()
    out = []
    for c in root.iter("testcase"):
        name = c.get("name", "?")
        cls = c.get("classname", "")
        out.append(("%s::%s" % (cls, name) if cls and cls != name else name, outcome(c)))
    return out


def ctest_commands(build):
    """{ctest entry: the basename of the program it runs}."""
    p = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = {}
    if p.returncode != 0:
        return out
    for t in json.loads(p.stdout)["tests"]:
        cmd = t.get("command") or ["?"]
        out[t["name"]] = os.path.basename(cmd[0])
    return out


def allowed_skips(path):
    """[(suite::test glob, reason)]; a line without a reason is an error."""
    rules = []
    if not os.path.exists(path):
        return rules
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            pattern, _, reason = line.partition(" ")
            if not reason.strip():
                sys.exit("%s:%d: %r has no reason" % (path, n, pattern))
            rules.append((pattern, reason.strip()))
    return rules


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--ci", action="store_true")
    ap.add_argument("--allowed", default=os.path.join(os.path.dirname(__file__), "allowed-skips"))
    ap.add_argument("--extra", action="append", default=[])
    a = ap.parse_args()

    results_dir = os.path.join(a.build, "test-results")
    suites = {}  # suite -> [(test id, outcome)]
    problems = []
    ctest_xml = os.path.join(results_dir, "ctest.xml")
    if not os.path.exists(ctest_xml):
        sys.exit("summary: %s missing (ctest --output-junit did not run)" % ctest_xml)
    programs = ctest_commands(a.build)
    for name, result in cases_of(ctest_xml):
        own = os.path.join(results_dir, name + ".xml")
        if os.path.exists(own):
            if result == "skipped":
                suites.setdefault(name, []).append((name, "skipped"))
            continue  # a pytest suite: its own file has its tests (read below)
        prog = programs.get(name, "")
        if prog.startswith("pytest"):
            problems.append("%s: a pytest suite that wrote no results (%s)" % (name, result))
            suites.setdefault(name, []).append((name, "failed"))
            continue
        suite = prog if prog.startswith("grl_") and prog.endswith("_tests") else name
        suites.setdefault(suite, []).append((name, result))
    for d in [results_dir] + a.extra:
        for fn in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if fn.endswith(".xml") and fn != "ctest.xml":
                # Another build's results are named by that build: build-asan/grl_unit_tests.
                other = os.path.basename(os.path.dirname(os.path.abspath(d)))
                suite = fn[:-4] if d == results_dir else "%s/%s" % (other, fn[:-4])
                suites.setdefault(suite, []).extend(cases_of(os.path.join(d, fn)))

    rules = allowed_skips(a.allowed)
    bad_skips = []
    for suite in sorted(suites):
        cases = suites[suite]
        count = {k: sum(1 for _, o in cases if o == k) for k in ("passed", "skipped", "failed")}
        ran = count["passed"] + count["failed"]
        print("suite %-32s %5d run, %3d skipped, %3d failed" % (suite, ran, count["skipped"], count["failed"]))
        for test, o in cases:
            if o == "skipped" and not any(fnmatch.fnmatchcase("%s::%s" % (suite, test), p) for p, _ in rules):
                bad_skips.append("%s::%s" % (suite, test))
        if ran == 0 and count["skipped"] == 0:
            problems.append("%s: no tests ran" % suite)
    failed = sum(1 for c in suites.values() for _, o in c if o == "failed")
    if a.ci and bad_skips:
        problems.append("skipped in CI without a reason in %s:\n    %s" % (a.allowed, "\n    ".join(bad_skips)))
    for p in problems:
        print("summary: " + p)
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
