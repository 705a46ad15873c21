"""Reports to a test collector (ZMQ PULL bound here, nginx's PUSH connects):
cumulative counts, continuity across `nginx -s reload`, buckets added and
removed by a reload, and failing open without any control plane."""

import os
import signal
import time

import grl_harness as h
from grl_harness import bucket_entry, report_buckets


def counts(report):
    return {name: b["offered"] for name, b in report_buckets(report).items()}


def test_report_content(nginx_factory, collector):
    n = nginx_factory(h.grl_conf(["a procedure_prefix=/a rate=100r/s",
                                  "b procedure_prefix=/b rate=600r/m scope=zone mode=shadow"],
                                 collector=collector, host="id=web-7 zone=z1 region=r1"))
    r = collector.wait_for(lambda r: True, 5)
    assert (r["v"], r["type"], r["host"], r["zone"], r["region"], r["interval_ms"]) == (
        1, "report", "web-7", "z1", "r1", 100), r
    assert abs(r["ts_ms"] - time.time() * 1000) < 60000, "ts_ms is the wall clock in ms"
    assert "%016x" % r["epoch"] == n.status()["epoch"], "the status page shows the report's epoch"
    assert [(b["name"], b["scope"], b["mode"], b["limit_mrps"]) for b in r["buckets"]] == [
        ("a", "global", "deny", 100000), ("b", "zone", "shadow", 10000)]
    assert all(b["offered"] == b["admitted"] == b["dropped"] == b["shadow_dropped"] == 0
               for b in r["buckets"])


def test_reports_are_cumulative_and_survive_reloads(nginx_factory, collector):
    two = ["a procedure_prefix=/a rate=100r/s", "b procedure_prefix=/b rate=10r/s"]
    n = nginx_factory(h.grl_conf(two, collector=collector))
    first = collector.wait_for(lambda r: True, 5)
    epoch = first["epoch"]

    n.blast("/a/1", 150)
    n.blast("/b/1", 50)
    collector.wait_for(lambda r: counts(r) == {"a": 150, "b": 50}, 5, "a report with a=150 b=50")
    seq_before = max(r["seq"] for r in collector.reports)

    # Reload 1 (with `nginx -s reload`): add bucket c.
    n.write_conf(http_extra=h.grl_conf(two + ["c procedure_prefix=/c rate=1r/s"], collector=collector))
    n.reload(use_signaller=True)
    collector.wait_for(lambda r: set(counts(r)) == {"a", "b", "c"}, 5, "a report with the new bucket c")
    n.blast("/a/2", 100)
    n.blast("/c/2", 30)
    collector.wait_for(lambda r: counts(r) == {"a": 250, "b": 50, "c": 30}, 5,
                       "a report with a=250 b=50 c=30 (counted across the reload)")

    # Reload 2 (SIGHUP): remove bucket b.
    seq_before2 = max(r["seq"] for r in collector.reports)
    n.write_conf(http_extra=h.grl_conf(["a procedure_prefix=/a rate=100r/s",
                                        "c procedure_prefix=/c rate=1r/s"], collector=collector))
    n.reload(use_signaller=False)
    n.blast("/a/3", 10)
    n.blast("/b/3", 10)  # matches nothing now
    collector.wait_for(lambda r: counts(r) == {"a": 260, "c": 30}, 5, "a report with a=260 c=30, no b")
    time.sleep(0.35)
    collector.poll()
    assert all(set(counts(r)) == {"a", "c"} for r in collector.reports[-3:]), "bucket b still reported"
    assert [b["name"] for b in n.status()["buckets"]] == ["a", "c"]

    reports = collector.reports
    assert all(r["epoch"] == epoch for r in reports), "the epoch must survive reloads"
    seqs = [r["seq"] for r in reports]
    assert len(set(seqs)) == len(seqs), "duplicate seq: %s" % seqs
    # Arrival order interleaves at most two senders (old and new worker 0 during
    # a reload); each configuration's reports (told apart by their bucket sets)
    # come from one sender and have strictly increasing seq.
    by_conf = {}
    for r in reports:
        by_conf.setdefault(tuple(sorted(counts(r))), []).append(r["seq"])
    for conf, s in by_conf.items():
        assert s == sorted(s), "seq not increasing for configuration %s: %s" % (conf, s)
    assert min(by_conf[("a", "b", "c")]) > seq_before
    assert min(by_conf[("a", "c")]) > seq_before2
    # Cumulative: ordered by seq, no counter ever goes backwards.
    for name in ("a", "b", "c"):
        vals = [report_buckets(r)[name]["offered"] for r in sorted(reports, key=lambda r: r["seq"])
                if name in report_buckets(r)]
        assert vals == sorted(vals), "offered of %s went backwards: %s" % (name, vals)


def test_fail_open_without_control_plane(nginx_factory, zctx):
    collector_ep = h.unused_endpoint()
    instructions_ep = h.unused_endpoint()
    n = nginx_factory(h.grl_conf(["api rate=1r/s"], collector_endpoint=collector_ep,
                                 instructions=instructions_ep, ttl="1s"))
    rs = n.blast("/", 200)
    assert all(r.status == 200 for r in rs), "no control plane: every request must pass"
    assert all(e["decision"] == "pass" for e in n.access_log() if e["uri"] == "/")

    st = h.wait_until(lambda: (lambda s: s["control_plane"]["reports_dropped"] >= 5 and s)(n.status()), 5,
                      what="reports_dropped to grow")
    cp = st["control_plane"]
    assert cp["state"] == "waiting" and cp["reporting"] is True and cp["reports_sent"] == 0, cp
    assert cp["last_instruction_age_ms"] is None  # null: no instruction yet, no -1 sentinel
    b = st["buckets"][0]
    assert (b["offered"], b["admitted"], b["dropped"], b["ratio_state"]) == (200, 200, 0, "waiting"), b
    time.sleep(0.3)
    assert n.status()["control_plane"]["reports_dropped"] > cp["reports_dropped"], "keeps counting"
    log = n.error_log()
    assert "grl: reporter started" in log
    for bad in ("[alert]", "[crit]", "[emerg]", "grl: reporter not started"):
        assert bad not in log, log[-2000:]

    # The daemons come up after nginx: nginx (which connects) finds them.
    collector = h.Collector(zctx, bind=collector_ep)
    publisher = h.Publisher(zctx, bind=instructions_ep)
    try:
        r = collector.wait_for(lambda r: True, 5, "a report once the collector is up")
        assert r["reports_dropped"] >= 5
        assert counts(r) == {"api": 200}
        publisher.set([h.bucket_entry("api", 1000000)])
        h.wait_ratio(n, "api", 1.0)
        assert all(r.status == 429 for r in n.blast("/", 20))
        assert n.status()["control_plane"]["reports_sent"] >= 1
    finally:
        collector.close()
        publisher.close()


def test_zone_resize_on_reload_starts_a_new_epoch(nginx_factory, collector):
    buckets = ["a rate=100r/s"]
    n = nginx_factory(h.grl_conf(buckets, collector=collector, zone="grl:1m"))
    n.blast("/", 40)
    old = collector.wait_for(lambda r: counts(r) == {"a": 40}, 5, "a report with a=40")

    n.write_conf(http_extra=h.grl_conf(buckets, collector=collector, zone="grl:2m"))
    n.reload()
    n.blast("/", 5)
    new = collector.wait_for(lambda r: r["epoch"] != old["epoch"] and counts(r) == {"a": 5}, 5,
                             "a report with a new epoch and counters restarted from zero")
    assert "%016x" % new["epoch"] == n.status()["epoch"]
    assert n.bucket("a")["offered"] == 5


def reporters(n):
    """The reporter processes: children of nginx's workers ("nginx: grl reporter")."""
    return [p for w in n.worker_pids() for p in h.children_of(w)]


def threads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def fd_targets(pid):
    out = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            out.add(os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            pass
    return out


def test_the_reporter_is_a_process_of_its_own_and_no_worker_has_a_second_thread(
        nginx_factory, collector, publisher):
    n = nginx_factory(h.grl_conf(["a procedure=/a rate=100r/s"], collector=collector,
                                 publisher=publisher))
    collector.wait_for(lambda r: True, 5, "a first report")
    [rep] = reporters(n)
    with open("/proc/%d/cmdline" % rep, "rb") as f:
        assert b"grl reporter" in f.read()
    assert threads(rep) > 1, "ZeroMQ's I/O thread lives in the reporter"
    assert [threads(w) for w in n.worker_pids()] == [1, 1], "workers stay single-threaded"
    # It holds none of the workers' sockets (listening, clients, the master's channel).
    held = {f for f in fd_targets(rep) if f.startswith("socket:")}
    workers = set()
    for w in n.worker_pids():
        workers |= fd_targets(w)
    # The socket pair's two ends are two sockets, one in each process: nothing shared.
    assert not held & workers, ("the reporter holds the workers' sockets", held & workers)


def test_reporter_survives_a_worker_crash(nginx_factory, collector, publisher):
    n = nginx_factory(h.grl_conf(["a procedure=/a rate=100r/s", "b procedure=/b rate=1r/s"],
                                 collector=collector, publisher=publisher))
    n.blast("/a", 30)
    first = collector.wait_for(lambda r: counts(r)["a"] == 30, 5, "a report with a=30")
    started = [l for l in n.error_log().splitlines() if "grl: reporter started" in l]
    assert len(started) == 1, started
    reporter = int(started[0].split("#")[1].split(":")[0])  # "... [notice] PID#TID: ..."
    assert reporters(n) == [reporter]
    worker0 = [w for w in n.worker_pids() if reporter in h.children_of(w)][0]

    n.kill_worker(worker0)
    h.wait_until(lambda: worker0 not in n.worker_pids() and len(n.worker_pids()) == 2, 10,
                 what="the master to respawn the killed worker")
    h.wait_until(lambda: n.error_log().count("grl: reporter started") == 2, 10,
                 what="the respawned worker 0 to start a reporter")
    h.wait_until(lambda: h.pid_gone(reporter), 5, what="the old reporter to end with its worker")

    n.blast("/a", 20)
    r = collector.wait_for(lambda r: counts(r)["a"] == 50, 5, "a report with a=50 after the crash")
    assert r["epoch"] == first["epoch"] and r["seq"] > first["seq"]
    # The new reporter also applies instructions.
    publisher.set([bucket_entry("b", 1000000)])
    h.wait_ratio(n, "b", 1.0)
    assert all(x.status == 429 for x in n.blast("/b", 10))


def test_a_killed_reporter_is_started_again_by_worker_0(nginx_factory, collector, publisher):
    n = nginx_factory(h.grl_conf(["a procedure=/a rate=100r/s", "b procedure=/b rate=1r/s"],
                                 collector=collector, publisher=publisher))
    n.blast("/a", 10)
    collector.wait_for(lambda r: counts(r)["a"] == 10, 5, "a report with a=10")
    time.sleep(1.1)  # a reporter that ends within 1 s of its start is started again after 1 s
    [reporter] = reporters(n)
    workers = n.worker_pids()
    n.expect_log(r"reporter process %d ended|unknown process %d exited on signal 9" % (reporter, reporter),
                 "the test kills the reporter")
    os.kill(reporter, signal.SIGKILL)
    h.wait_until(lambda: len(reporters(n)) == 1 and reporters(n) != [reporter], 5,
                 what="worker 0 to start another reporter")
    assert n.worker_pids() == workers, "the workers go on"
    log = n.error_log()
    assert "grl: reporter process %d ended after" % reporter in log, log[-2000:]
    n.blast("/a", 5)
    collector.wait_for(lambda r: counts(r)["a"] == 15, 5, "a report with a=15 from the new one")
    publisher.set([bucket_entry("b", 1000000)])
    h.wait_ratio(n, "b", 1.0)


def test_a_graceful_reload_ends_the_old_reporter_with_its_worker(nginx_factory, collector):
    n = nginx_factory(h.grl_conf(["a procedure=/a rate=100r/s"], collector=collector))
    collector.wait_for(lambda r: True, 5, "a first report")
    [old] = reporters(n)
    n.reload()
    h.wait_until(lambda: h.pid_gone(old), 10, what="the old reporter to end")
    h.wait_until(lambda: len(reporters(n)) == 1, 10, what="one reporter, the new worker 0's")
    assert "unknown process" not in n.error_log(), "workers never see a reporter end"


def test_the_reporter_follows_a_rotated_error_log(nginx_factory, collector, publisher):
    """logrotate: the log is moved, the master reopens it on USR1 and tells its workers; the
    reporter, not a worker, notices within a second by itself and writes to the new file."""
    n = nginx_factory(h.grl_conf(["b procedure=/b rate=10r/s"], collector=collector,
                                 publisher=publisher))
    h.wait_until(lambda: "grl: reporter started" in n.error_log(), 5, what="the reporter")
    os.rename(n.error_log_path, n.error_log_path + ".1")
    os.kill(n.proc.pid, signal.SIGUSR1)
    h.wait_until(lambda: os.path.exists(n.error_log_path), 5, what="nginx to reopen its log")
    time.sleep(1.5)  # the reporter looks once a second
    publisher.set([bucket_entry("b", 500000)])
    h.wait_until(lambda: 'grl: bucket "b" ratio active' in n.error_log(), 5,
                 what="the reporter's line in the new error log")
    with open(n.error_log_path + ".1") as f:
        assert 'ratio active' not in f.read()


def test_the_reporter_logs_to_syslog_also_when_worker_0_opened_it(nginx_factory, collector,
                                                                   publisher):
    """`error_log syslog:` opens its socket at the first line. Worker 0 writes one (the alert
    when its reporter died) before it forks the next reporter, which must keep that socket
    (closed there, its number reused by ZeroMQ, the lines would go nowhere or into a ZeroMQ
    descriptor)."""
    import socket
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.2)
    port = udp.getsockname()[1]
    n = nginx_factory(h.grl_conf(["b procedure=/b rate=10r/s"], collector=collector,
                                 publisher=publisher),
                      main_extra="error_log syslog:server=127.0.0.1:%d,tag=grl notice;" % port)
    lines = []

    def read(until, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                lines.append(udp.recv(65536).decode(errors="replace"))
            except socket.timeout:
                pass
            if until():
                return True
        return False

    assert read(lambda: any("grl: reporter started" in l for l in lines), 5), lines
    time.sleep(1.1)  # started again at once, not after 1 s
    [first] = reporters(n)
    n.expect_log(r"reporter process %d ended|unknown process %d exited on signal 9" % (first, first),
                 "the test kills the reporter")
    os.kill(first, signal.SIGKILL)
    assert read(lambda: any("grl: reporter process %d ended" % first in l for l in lines), 5), lines
    assert read(lambda: sum("grl: reporter started" in l for l in lines) == 2, 5), lines
    publisher.set([bucket_entry("b", 500000)])
    assert read(lambda: any('grl: bucket "b" ratio active' in l for l in lines), 5), lines
    udp.close()
