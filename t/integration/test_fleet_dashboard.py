"""The controller's dashboard (docs/dashboard.md) and `grlctl top`, against a running fleet: a
controller, two zones each with a collector and an nginx, a global bucket enforcing and a zone
bucket in shadow mode, a run-time bucket, constant load.

- headless Chromium (Debian's `chromium`) loads the page; the DOM after its scripts ran shows
  the fleet's real bucket instances with the numbers of the controller's /metrics, the zones,
  the run-time bucket, how well each limit held, and a chart per instance drawn from the
  history; a screenshot is saved
  to $GRL_BUILD_DIR/artifacts/dashboard.png (kept by CI);
- `grlctl top` runs in a tmux pane: the table shows the busiest instances with the limits of
  /metrics, and the screen refreshes.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

import fleet as f
import grl_harness as h

LIMIT = 100      # r/s, global, deny
ZONE_LIMIT = 40  # r/s, per zone, shadow
OFFERED = 150    # r/s over both nginx, 2:1
BUCKETS = ["api procedure_prefix=/api rate=%dr/s" % LIMIT,
           "api-zone procedure_prefix=/api rate=%dr/s scope=zone mode=shadow" % ZONE_LIMIT]
ARTIFACTS = os.path.join(f.BUILD_DIR, "artifacts")


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed (.ci/install-deps installs it)")


def browse(url, *args):
    """Runs headless Chromium on `url` with its own profile; returns stdout."""
    profile = tempfile.mkdtemp(prefix="grl-chromium-")
    try:
        p = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                            "--no-first-run", "--user-data-dir=" + profile,
                            "--virtual-time-budget=10000"] + list(args) + [url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=90)
        assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
        return p.stdout.decode(errors="replace")
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def get_json(url):
    return json.loads(urllib.request.urlopen(url, timeout=5).read().decode())


def get_state(base):
    """/api/state as the page reads it: the first read after a quiet spell answers 503 while
    the dashboard's thread renders the newest snapshot (docs/dashboard.md), then 200."""
    return h.wait_until(lambda: get_json(base + "/api/state"), 5, interval=0.1,
                        what="/api/state rendered")


@pytest.fixture(scope="module")
def running():
    """The fleet under load, for both tests (started once: ~10 s)."""
    fl = f.Fleet()
    load = None
    try:
        ctl = fl.controller(interval="250ms")
        col_a = fl.collector("zone-a", [ctl])
        col_b = fl.collector("zone-b", [ctl])
        n1 = fl.nginx("h1", "zone-a", col_a, BUCKETS)
        n2 = fl.nginx("h2", "zone-b", col_b, BUCKETS)
        fl.wait_hosts(ctl, 2)
        f.grlctl(ctl, "add", "emergency", "--limit", "5r/s", "--procedure-prefix", "/api/emergency")
        load = f.Load([(n1, 2), (n2, 1)], "%d:90" % OFFERED, "/api/x")
        base = "http://%s" % ctl.endpoints["metrics"]

        def settled():
            s = get_json(base + "/api/state")
            offered = {(b["name"], b["zone"]): b["offered_rps"] for b in s["buckets"]}
            near = lambda v, want: v is not None and abs(v - want) <= 0.05 * want
            return (near(offered.get(("api", "")), OFFERED) and
                    near(offered.get(("api-zone", "zone-a")), OFFERED * 2 / 3) and
                    near(offered.get(("api-zone", "zone-b")), OFFERED / 3) and
                    s["history"]["recorded"] >= 6)
        h.wait_until(settled, 40, interval=0.25, what="the load settled, 6 history points")
        yield fl, ctl, base
    except BaseException:
        fl.dump()
        raise
    finally:
        if load:
            load.stop()
        fl.close()


def cells(dom, cls):
    return re.findall(r'<td class="n %s">([^<]*)</td>' % cls, dom)


def rows(dom):
    """The bucket table's rows: {(bucket, scope, zone): {column: text}}."""
    out = {}
    for m in re.finditer(r'<tr class="bucket" data-bucket="([^"]*)" data-scope="([^"]*)" '
                         r'data-zone="([^"]*)">(.*?)</tr>', dom):
        cols = dict(re.findall(r'<td class="(?:n )?(\w+)">([^<]*)</td>', m.group(4)))
        out[(m.group(1), m.group(2), m.group(3))] = cols
    return out


def test_fleet_dashboard_shows_the_fleets_buckets_and_numbers(running):
    fl, ctl, base = running
    page = urllib.request.urlopen(base + "/", timeout=5)
    assert page.headers["Content-Type"].startswith("text/html")
    before = ctl.metrics()
    dom = browse(base + "/", "--dump-dom")
    ms = ctl.metrics()

    def near(shown, name, labels, slack=1):
        """The page's value is within 15% (+slack) of /metrics' just before or just after."""
        return any(abs(float(shown) - f.metric(m, name, **labels)) <= 0.15 * f.metric(m, name, **labels) + slack
                   for m in (before, ms))
    shown = rows(dom)
    print("dashboard rows:", shown)
    expected = {("api", "global", ""), ("api-zone", "zone", "zone-a"), ("api-zone", "zone", "zone-b"),
                ("emergency", "global", "")}
    assert expected <= set(shown), (sorted(shown), dom[:3000])
    for (bucket, scope, zone), col in shown.items():
        labels = {"bucket": bucket, "scope": scope, "zone": zone}
        # Limits, hosts and mode do not move under constant load: equal to /metrics.
        assert float(col["limit"]) == f.metric(ms, "grl_bucket_limit_rps", **labels), (labels, col)
        assert int(col["hosts"]) == f.metric(ms, "grl_bucket_hosts", **labels), (labels, col)
        shadow = f.metric(ms, "grl_bucket_shadow", **labels) == 1
        assert col["mode"] == ("shadow" if shadow else "deny"), (labels, col)
        # Smoothed rates move a little between the page's read and ours.
        assert near(col["offered"], "grl_bucket_offered_rps", labels), (labels, col, before, ms)
        # So does the ratio (a tick every 250 ms): near /metrics' just before or just after.
        ratios = [f.metric(m, "grl_bucket_ratio", **labels) for m in (before, ms)]
        assert any(abs(float(col["ratio"]) - r) <= 0.1 for r in ratios), (labels, col, ratios)
        if shadow:
            # Shadow drops are sampled (each request would-drops with the ratio): noisier.
            assert near(col["shadow"], "grl_bucket_shadow_dropped_rps", labels, 12), (labels, col)
    # The fleet's real numbers, not just a table: the global bucket offered ~150 r/s and drops.
    api = shown[("api", "global", "")]
    assert abs(float(api["offered"]) - OFFERED) <= 0.25 * OFFERED, api
    assert float(api["ratio"]) > 0.2, api
    assert float(shown[("api-zone", "zone", "zone-a")]["shadow"]) > 30, shown  # 100 offered, 40 limit
    # Loop health: both zones and their collectors, fresh; the run-time bucket listed.
    for zone, collector in (("zone-a", "col-zone-a"), ("zone-b", "col-zone-b")):
        assert re.search(r"<td>%s</td><td>%s</td>.*?>fresh</td>" % (zone, collector), dom), dom
    assert re.search(r'<td>emergency</td><td>run-time \(global\)</td><td class="n">5.0</td>', dom), dom
    assert "procedure_prefix=/api/emergency" in dom
    # A chart per instance, from the history: a path through several points for api.
    charts = re.findall(r'<div class="chart" data-bucket="([^"]*)">(.*?)</div>', dom)
    assert {b for b, _ in charts} >= {"api", "api-zone", "emergency"}, charts
    api_chart = [c for b, c in charts if b == "api"][0]
    paths = re.findall(r'<path d="([^"]*)"', api_chart)
    assert max(p.count("L") for p in paths) >= 4, paths
    assert '"live"' not in dom and ">live<" in dom, "status pill"
    # How well the limit held: the enforcing bucket over its limit shows admitted / limit near 1
    # (as /metrics says) and the seconds its demand took to settle; shadow buckets show none.
    held = dict((b, (float(v), rest)) for b, v, rest in re.findall(
        r'<tr class="bucket" data-bucket="([^"]*)" data-scope="global" data-zone="">(?:(?!</tr>).)*?'
        r'<td class="n held \w+">([\d.]+) L(.*?)</td>', dom))
    assert "api" in held, dom[:4000]
    assert 0.8 <= held["api"][0] <= 1.3, held  # the minute holds the first seconds of load
    over = [f.metric(m, "grl_bucket_admitted_over_limit", bucket="api", scope="global", zone="")
            for m in (before, ms)]
    # The page read it between the two scrapes (the minute moves on every second).
    assert min(over) - 0.02 <= held["api"][0] <= max(over) + 0.02, (held, over)
    assert f.metric(ms, "grl_bucket_settle_seconds", bucket="api", scope="global", zone="") < 30
    assert "settled in" in held["api"][1], held
    assert not re.search(r'data-bucket="api-zone"[^>]*>(?:(?!</tr>).)*held (?:good|warn|bad)', dom)

    os.makedirs(ARTIFACTS, exist_ok=True)
    png = os.path.join(ARTIFACTS, "dashboard.png")
    if os.path.exists(png):
        os.unlink(png)
    browse(base + "/", "--screenshot=" + png, "--window-size=1280,1400", "--hide-scrollbars")
    with open(png, "rb") as fh:
        data = fh.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000, len(data)
    print("screenshot:", png, len(data), "bytes")


def test_fleet_grlctl_explain_says_why(running):
    """`grlctl explain`: the enforcing bucket over its limit is dropping, since when, from which
    zones and hosts; the shadow bucket would drop; the run-time bucket under its limit does not."""
    fl, ctl, base = running
    rc, text, err = f.grlctl(ctl, "explain", "api", json_out=False)
    print(text)
    assert rc == 0 and text.startswith("api (global, deny)\n"), (text, err)
    m = re.search(r"DROPPING ([\d.]+)% of requests since \S+Z \((\d+)m (\d+)s ago\)", text)
    assert m and 20 <= float(m.group(1)) <= 45, text  # (150 - 100) / 150
    assert 0 < int(m.group(2)) * 60 + int(m.group(3)) < 300, text
    assert "exceeds the limit 100.0 r/s (from conf)" in text, text
    zones = dict(re.findall(r" (zone-[ab]) ([\d.]+) r/s from 1 host\(s\)", text))
    assert set(zones) == {"zone-a", "zone-b"}, text
    assert float(zones["zone-a"]) > float(zones["zone-b"]), text  # load 2:1
    assert "2 host(s) report it, of this region: h1 h2" in text, text
    rc, text, _ = f.grlctl(ctl, "explain", "api-zone", json_out=False)
    assert "api-zone (zone zone-a, shadow)\n  WOULD DROP" in text, text
    assert "every request is admitted" in text, text
    rc, text, _ = f.grlctl(ctl, "explain", "emergency", json_out=False)
    assert "not dropping: offered 0.0 r/s is within the limit 5.0 r/s (from override)" in text, text
    rc, text, _ = f.grlctl(ctl, "explain", "nope", json_out=False)
    assert 'no host reports bucket "nope"' in text, text


def test_fleet_dashboard_history_json_matches_state(running):
    fl, ctl, base = running
    hist = get_json(base + "/api/history")
    state = get_state(base)
    assert len(hist["times"]) == min(hist["recorded"], state["history"]["capacity"])
    assert hist["times"] == sorted(hist["times"])
    api = [s for s in hist["series"] if s["bucket"] == "api" and s["scope"] == "global"][0]
    assert len(api["offered"]) == len(hist["times"])
    assert api["limit"][-1] == LIMIT
    assert state["history"]["capacity"] == 900 and state["history"]["max_bytes"] < 10 * 2 ** 20


def test_fleet_grlctl_top_refreshes_under_tmux(running):
    fl, ctl, base = running
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed (.ci/install-deps installs it)")
    sock = "grl-top-%d" % os.getpid()  # our own tmux server
    cmd = "%s --controller %s top --interval 500ms" % (f.GRLCTL_BIN, ctl.admin)
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "120", "-y", "30", cmd], check=True)
    try:
        def screen():
            return subprocess.run(["tmux", "-L", sock, "capture-pane", "-p"], check=True,
                                  stdout=subprocess.PIPE).stdout.decode()

        h.wait_until(lambda: "BUCKET" in screen(), 10, what="grlctl top's table")
        first = screen()
        print(first)
        lines = first.splitlines()
        assert lines[0].startswith("grlctl top: controller %s (region r1)" % ctl.name), first
        assert "zones 2/2 fresh, hosts 2" in lines[1], first
        table = [l.split() for l in lines if l.startswith(("api ", "api-zone ", "emergency "))]
        assert [r[0] for r in table][:1] == ["api"], table  # the busiest first: 150 r/s offered
        assert sorted(r[0] for r in table) == ["api", "api-zone", "api-zone", "emergency"], table
        ms = ctl.metrics()
        for r in table:
            zone = r[2] if r[1] == "zone" else ""
            assert float(r[5]) == f.metric(ms, "grl_bucket_limit_rps", bucket=r[0], scope=r[1], zone=zone), r
        stamp = re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lines[0]).group(0)
        h.wait_until(lambda: stamp not in screen().splitlines()[0], 5, what="grlctl top to refresh")
        assert "BUCKET" in screen()
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], check=False)


def test_fleet_dashboard_snapshots_only_when_used():
    """A controller at 250 ms hands its dashboard a snapshot once per history step (1 s) while
    nobody reads /api/state, and one per tick while the page reads it (docs/dashboard.md, "The
    tick never waits for it"): at 10,000 instances each snapshot costs a copy and a rendering."""
    fl = f.Fleet()
    try:
        ctl = fl.controller(interval="250ms")
        base = "http://%s" % ctl.endpoints["metrics"]

        def counts():
            ms = ctl.metrics()
            return (f.metric(ms, "grl_controller_tick_seconds_count"),
                    f.metric(ms, "grl_controller_dashboard_snapshots_total"))

        h.wait_until(lambda: counts()[0] >= 2, 10, what="the controller's first ticks")
        ticks0, snaps0 = counts()
        assert snaps0 is not None, "grl_controller_dashboard_snapshots_total is missing"
        time.sleep(3)
        ticks1, snaps1 = counts()
        assert ticks1 - ticks0 >= 8, (ticks0, ticks1)
        # One a second (a tick a little early still takes the point): 3 or 4 in 3 s.
        assert 2 <= snaps1 - snaps0 <= 4, (ticks1 - ticks0, snaps1 - snaps0)

        # The page reads /api/state: every tick's snapshot from the next tick on.
        get_state(base)
        ticks2, snaps2 = counts()
        for _ in range(6):
            time.sleep(0.5)
            get_json(base + "/api/state")  # rendered at every tick while read: never 503
        ticks3, snaps3 = counts()
        assert ticks3 - ticks2 >= 8, (ticks2, ticks3)
        assert snaps3 - snaps2 >= ticks3 - ticks2 - 1, (ticks3 - ticks2, snaps3 - snaps2)
    except BaseException:
        fl.dump()
        raise
    finally:
        fl.close()
