"""CI's own rules bite (.ci/summary.py, .ci/lint): a skip fails CI unless it is listed with a
reason; a missing or failing lint tool fails the lint, never prints "clean"."""

import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SUMMARY = os.path.join(ROOT, ".ci", "summary.py")

CTEST_XML = """<testsuite tests="3">
  <testcase name="Keyed.HashesAreFixed" classname="Keyed.HashesAreFixed" status="run"/>
  <testcase name="deploy_debs" classname="deploy_debs" status="notrun"><skipped message="77"/></testcase>
  <testcase name="integration" classname="integration" status="run"/>
</testsuite>
"""
PYTEST_XML = """<testsuites><testsuite tests="2" skipped="1">
  <testcase classname="test_netns" name="test_hosts"><skipped message="needs root"/></testcase>
  <testcase classname="test_reports" name="test_counts"/>
</testsuite></testsuites>
"""


def summary(build, *args):
    p = subprocess.run([sys.executable, SUMMARY, str(build)] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    return p.returncode, p.stdout.decode()


def results(tmp_path):
    d = tmp_path / "build" / "test-results"
    d.mkdir(parents=True)
    (d / "ctest.xml").write_text(CTEST_XML)
    (d / "integration.xml").write_text(PYTEST_XML)
    return tmp_path / "build"


def test_a_skip_fails_ci_and_is_printed(tmp_path):
    build = results(tmp_path)
    rc, out = summary(build)  # a newcomer's run: printed, not failed
    assert rc == 0, out
    assert "suite integration" in out and "1 run,   1 skipped,   0 failed" in out, out
    assert "suite deploy_debs" in out and "0 run,   1 skipped" in out, out
    rc, out = summary(build, "--ci", "--allowed", str(tmp_path / "none"))
    assert rc == 1, out
    assert "integration::test_netns::test_hosts" in out and "deploy_debs::deploy_debs" in out, out


def test_a_listed_skip_with_a_reason_passes_and_one_without_a_reason_is_refused(tmp_path):
    build = results(tmp_path)
    allowed = tmp_path / "allowed"
    allowed.write_text("# comment\nintegration::test_netns::* no namespaces here\n"
                       "deploy_debs::* no dpkg here\n")
    rc, out = summary(build, "--ci", "--allowed", str(allowed))
    assert rc == 0, out
    allowed.write_text("deploy_debs::*\n")
    rc, out = summary(build, "--ci", "--allowed", str(allowed))
    assert rc != 0 and "has no reason" in out, out


def test_a_failure_fails_the_summary(tmp_path):
    build = results(tmp_path)
    (build / "test-results" / "integration.xml").write_text(
        PYTEST_XML.replace('name="test_counts"/>', 'name="test_counts"><failure message="x"/></testcase>'))
    rc, out = summary(build, "--allowed", str(tmp_path / "none"))
    assert rc == 1 and "1 failed" in out, out


def lint_with(tmp_path, tidy):
    """.ci/lint with a PATH of the tools it needs, clang-tidy replaced by `tidy` (None: absent)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "git", "clang-format", "xargs", "nproc", "grep", "sort", "head", "dirname",
                 "cat", "env", "sh"):
        for d in ("/usr/bin", "/bin"):
            if os.path.exists(os.path.join(d, tool)):
                os.symlink(os.path.join(d, tool), bin_dir / tool)
                break
    if tidy is not None:
        (bin_dir / "clang-tidy").write_text("#!/bin/bash\n" + tidy + "\n")
        (bin_dir / "clang-tidy").chmod(0o755)
    build = tmp_path / "build"
    build.mkdir()
    (build / "compile_commands.json").write_text("[]")
    p = subprocess.run(["/bin/bash", os.path.join(ROOT, ".ci", "lint"), str(build), "core/common/src/parse.cpp"],
                       env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, cwd=ROOT, timeout=600)
    return p.returncode, p.stdout.decode()


def test_lint_fails_without_clang_tidy(tmp_path):
    rc, out = lint_with(tmp_path, None)
    assert rc == 1 and "clang-tidy not found" in out and "clean" not in out, out


def test_lint_fails_when_clang_tidy_cannot_run(tmp_path):
    rc, out = lint_with(tmp_path, 'echo "error: unable to handle compilation" >&2; exit 1')
    assert rc == 1 and "clang-tidy (exit" in out and "clean" not in out, out
