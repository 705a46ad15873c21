"""Every /metrics output of a real fleet, and the alert rules and dashboards that use them.

A fleet with CURVE on both hops, a shadow bucket and a candidate limit (so that the
conditional families appear too) and grl-rlc serve --metrics: `promtool check metrics` must
find nothing in the nginx status page (Prometheus form), the collector's, the controller's or
grl-rlc's output; every metric name conf/prometheus/grl-alerts.yml or a Grafana dashboard
(conf/grafana/dashboards/*.json) uses must be one of the names this fleet exports; every
dashboard query must parse as PromQL (promtool check rules on a rule file made of them).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest
import yaml

import fleet as f
import grl_harness as h
from fleet import fleet  # noqa: F401  (pytest fixture)
from test_fleet_curve import keygen

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(ROOT, "conf", "prometheus", "grl-alerts.yml")
DASHBOARDS = sorted(glob.glob(os.path.join(ROOT, "conf", "grafana", "dashboards", "*.json")))
DATASOURCES = os.path.join(ROOT, "conf", "grafana", "provisioning", "datasources", "grl.yaml")
RLC_BIN = os.path.join(f.BUILD_DIR, "rlc", "grl-rlc")
PROMTOOL = shutil.which("promtool")
BUCKETS = ["g procedure_prefix=/g rate=50r/s", "sh procedure_prefix=/s rate=10r/s mode=shadow"]
LIMITS = "buckets:\n  g:\n    limit: 50r/s\n    mode: deny\n    candidate: 20r/s\n"
# Series Prometheus itself adds to every target.
BUILTIN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}

# Required, never skipped: bash .ci/install-deps installs it (package prometheus).
assert PROMTOOL, "promtool not found: apt-get install prometheus (bash .ci/install-deps)"


def names_in(text):
    """Metric names a Prometheus text exposes: its TYPE lines and its samples."""
    out = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) ", line) or re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", line)
        if m:
            out.add(m.group(1))
    return out


def names_used(expr):
    """Metric names a PromQL expression uses: identifiers outside strings, label matchers
    and by/on/without lists that are not functions or keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    out = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        word, rest = m.group(0), e[m.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or aggregation
        if word in ("and", "or", "unless", "bool", "offset", "inf", "nan", "e"):
            continue
        out.add(word)
    return out


def rule_exprs():
    with open(RULES) as fh:
        doc = yaml.safe_load(fh)
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs():
    """(dashboard, panel title, expr) for every query, after structural checks of each file."""
    with open(DATASOURCES) as fh:
        uids = {d["uid"] for d in yaml.safe_load(fh)["datasources"]}
    out = []
    uids_seen = set()
    for path in DASHBOARDS:
        with open(path) as fh:
            d = json.load(fh)
        name = os.path.basename(path)
        for k in ("uid", "title", "panels", "schemaVersion"):
            assert k in d, "%s: no %r" % (name, k)
        assert d["uid"] not in uids_seen, "%s: uid %s used twice" % (name, d["uid"])
        uids_seen.add(d["uid"])
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), "%s: panel ids repeat" % name
        for p in d["panels"]:
            assert p.get("type") and p.get("title"), "%s: panel %r" % (name, p.get("id"))
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, "%s: %s" % (name, p["title"])
            assert p["targets"], "%s: %s has no query" % (name, p["title"])
            for t in p["targets"]:
                assert t["datasource"]["uid"] in uids, "%s: %s: datasource %r is not provisioned" % (
                    name, p["title"], t["datasource"])
                out.append((name, p["title"], t["expr"]))
        for v in d["templating"]["list"]:
            assert v["datasource"]["uid"] in uids
            q = v["query"]["query"]
            m = re.match(r"label_values\((.*),\s*(\w+)\)$", q)
            assert m, "%s: variable %s: %r" % (name, v["name"], q)
            out.append((name, "variable " + v["name"], m.group(1)))
    return out


def grafana_to_promql(expr):
    """Grafana's variables replaced by values Prometheus parses."""
    return expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$bucket", "g")


def test_dashboard_queries_parse_as_promql(tmp_path):
    exprs = dashboard_exprs()
    assert len(DASHBOARDS) == 3 and exprs
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": "grl_dashboard:q%d" % i, "expr": grafana_to_promql(e)}
        for i, (_, _, e) in enumerate(exprs)]}]}
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    p = subprocess.run([PROMTOOL, "check", "rules", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert p.returncode == 0, p.stdout.decode()
    # And the check itself can fail: a broken query is refused.
    path.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": "sum by (bucket) (rate(grl_bucket_offered_total[1m])"}]}]}))
    p = subprocess.run([PROMTOOL, "check", "rules", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert p.returncode != 0


def test_names_used_finds_metric_names_only():
    assert names_used('sum by (bucket) (rate(grl_bucket_dropped_total{job="grl-collector"}[5m]))'
                      ' / on (bucket) grl_x > 0.1 or time() - grl_y{a="b"} > 3 * 3600') == {
        "grl_bucket_dropped_total", "grl_x", "grl_y"}


def start_rlc_serve(tmp_path, limits_path):
    """grl-rlc serve with a synthetic history and --metrics; (process, metrics URL)."""
    store = str(tmp_path / "rlc.db")
    cfg = tmp_path / "rlc.yaml"
    cfg.write_text("store: %s\nlimits_file: %s\nwindow: 4w\n" % (store, limits_path))
    subprocess.run([RLC_BIN, "synth", "--store", store, "--bucket", "g", "--base", "30",
                    "--weeks", "5", "--limit", "50", "--seed", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    log_path = str(tmp_path / "serve.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen([RLC_BIN, "serve", "--config", str(cfg), "--every", "1h",
                             "--metrics", "127.0.0.1:0"], stdout=log, stderr=log)
    log.close()

    def text():
        with open(log_path, errors="replace") as fh:
            return fh.read()
    h.wait_until(lambda: "cycle (start)" in text(), 30, what="grl-rlc serve's first cycle")
    return proc, re.search(r"metrics on (http://\S+/metrics)", text()).group(1)


def fetch(url):
    import urllib.request
    return urllib.request.urlopen(url, timeout=5).read().decode()


def test_fleet_metrics_lint_clean_and_cover_rules_and_dashboards(fleet, tmp_path):
    ctl_key, _ = keygen(tmp_path, "controller")
    col_key, col_keys = keygen(tmp_path, "collector")
    h1_key, h1_keys = keygen(tmp_path, "h1")
    (tmp_path / "collectors").write_text(col_keys["public-key"].decode() + "\n")
    (tmp_path / "hosts").write_text(h1_keys["public-key"].decode() + "\n")
    limits = tmp_path / "limits.yaml"
    limits.write_text(LIMITS)
    ctl = fleet.controller(limits=str(limits), extra=[
        "--curve-keypair", ctl_key, "--curve-clients", str(tmp_path / "collectors")])
    col = fleet.collector("z1", [ctl], extra=[
        "--curve-keypair", col_key, "--curve-server-key", ctl_key + ".pub",
        "--curve-clients", str(tmp_path / "hosts")])
    n = fleet.nginx("h1", "z1", col, BUCKETS, extra="grl_curve_keypair %s;\ngrl_curve_server_key %s;"
                    % (h1_key, col_key + ".pub"))
    fleet.wait_hosts(ctl, 1)
    for _ in range(3):
        n.blast("/g/x", 40)
        n.blast("/s/x", 20)
    h.wait_until(lambda: f.metric(col.metrics(), "grl_bucket_offered_total", bucket="g"), 10,
                 what="the collector to count bucket g")
    outputs = {"nginx": n.prometheus(),
               "collector": fetch("http://%s/metrics" % col.endpoints["metrics"]),
               "controller": fetch("http://%s/metrics" % ctl.endpoints["metrics"])}
    rlc = None
    if os.path.exists(RLC_BIN):
        (tmp_path / "rlc-limits.yaml").write_text("buckets:\n  g:\n    limit: 50r/s\n")
        rlc, url = start_rlc_serve(tmp_path, str(tmp_path / "rlc-limits.yaml"))
    try:
        if rlc:
            outputs["rlc"] = fetch(url)
        problems = []
        for who, text in outputs.items():
            p = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if p.returncode != 0 or p.stdout.strip():
                problems.append("%s:\n%s" % (who, p.stdout.decode()))
        assert not problems, "promtool check metrics:\n" + "\n".join(problems)

        exported = set(BUILTIN)
        for who, text in outputs.items():
            assert "grl_build_info{" in text, who
            assert not re.search(r"^[^#].* -1$", text, re.M), "%s: a -1 sentinel" % who
            exported |= names_in(text)
        missing = []
        for alert, expr in rule_exprs():
            missing += ["alert %s: %s" % (alert, m) for m in sorted(names_used(expr) - exported)]
        for dash, title, expr in dashboard_exprs():
            missing += ["%s / %s: %s" % (dash, title, m) for m in sorted(names_used(expr) - exported)]
        if not rlc:
            missing = [m for m in missing if "grl_rlc_" not in m]
        assert not missing, "metric names nothing exports:\n" + "\n".join(missing)
        # The test can fail: a made-up name is caught.
        assert names_used("rate(grl_bucket_nonexistent_total[5m])") - exported
    finally:
        if rlc:
            rlc.terminate()
            rlc.wait(10)
