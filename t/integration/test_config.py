"""`nginx -t` accepts a complete valid configuration and rejects every kind of
bad grl directive with one message naming the directive and the value, at
FILE:LINE; a reload with a broken file leaves the running configuration
serving."""

import atexit
import os
import re
import shutil
import tempfile

import pytest

import grl_harness as h

ZONE = "grl_zone grl:1m;"
HOST = "grl_host id=h1 zone=z1 region=r1;"
COLLECTOR = "grl_collector tcp://127.0.0.1:5555;"

# CURVE key files for the grl_curve_* cases (the layout `grlctl keygen` writes).
KEYS = tempfile.mkdtemp(prefix="grl-test-keys-")
atexit.register(shutil.rmtree, KEYS, True)
PUB = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
SEC = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"


def key_file(name, text):
    path = os.path.join(KEYS, name)
    with open(path, "w") as fh:
        fh.write(text)
    return path


PAIR = key_file("host.key", 'curve\n    public-key = "%s"\n    secret-key = "%s"\n' % (PUB, SEC))
SERVER = key_file("collector.key.pub", 'curve\n    public-key = "%s"\n' % PUB)
SHORT = key_file("short.pub", 'curve\n    public-key = "short"\n')

# (id, http-level lines, expected message, text of the line the message must point at;
#  None when the error is found at the end of the http block)
BAD = [
    ("quota-period", [ZONE, "grl_bucket api quota=10/fortnight;"],
     '"grl_bucket" "api": invalid quota "10/fortnight", expected N/minute, N/hour, N/day or '
     'N/month with N in 1-1099511627776', "quota=10/fortnight"),
    ("quota-zero", [ZONE, "grl_bucket api rate=10r/s quota=0/day;"],
     '"grl_bucket" "api": invalid quota "0/day"', "quota=0/day"),
    ("quota-offset", [ZONE, "grl_bucket api quota=10/hour window_offset=soon;"],
     '"grl_bucket" "api": invalid window_offset "soon", expected e.g. 30s, 5m or 2h', "soon"),
    ("quota-offset-long", [ZONE, "grl_bucket api quota=10/hour window_offset=2h;"],
     '"grl_bucket" "api": window_offset "2h" is not shorter than a hour', "window_offset=2h"),
    ("quota-keyed-offset", [ZONE, "grl_bucket api key=$remote_addr quota=10/day window_offset=25h;"],
     '"grl_bucket" "api": window_offset "25h" is not shorter than a day', "window_offset=25h"),
    ("offset-no-quota", [ZONE, "grl_bucket api rate=10r/s window_offset=5m;"],
     '"grl_bucket" "api": window_offset=5m needs quota=', "window_offset=5m"),
    ("no-rate-no-quota", [ZONE, "grl_bucket api scope=zone;"],
     '"grl_bucket" "api" must have "rate" or "quota" parameter', "grl_bucket api"),
    ("invalid-rate", [ZONE, "grl_bucket api rate=fast;"],
     '"grl_bucket" "api": invalid rate "fast", expected e.g. 100r/s or 600r/m', "rate=fast"),
    ("zero-rate", [ZONE, "grl_bucket api rate=0r/s;"],
     '"grl_bucket" "api": invalid rate "0r/s"', "rate=0r/s"),
    ("rate-unit", [ZONE, "grl_bucket api rate=10r/h;"],
     '"grl_bucket" "api": invalid rate "10r/h"', "rate=10r/h"),
    ("bad-scope", [ZONE, "grl_bucket api rate=10r/s scope=planet;"],
     '"grl_bucket" "api": invalid scope "planet", expected global, region or zone', "scope=planet"),
    ("duplicate-scope", [ZONE, "grl_bucket api rate=10r/s scope=zone scope=region;"],
     '"grl_bucket" "api": invalid scope "region"', "scope=zone scope=region"),
    ("bad-mode", [ZONE, "grl_bucket api rate=10r/s mode=loud;"],
     '"grl_bucket" "api": invalid mode "loud", expected deny or shadow', "mode=loud"),
    ("bad-bucket-name", [ZONE, "grl_bucket a/b rate=10r/s;"],
     '"grl_bucket": invalid bucket name "a/b", expected 1-63 of [A-Za-z0-9_.:-]', "a/b"),
    ("long-bucket-name", [ZONE, "grl_bucket %s rate=10r/s;" % ("x" * 64)],
     '"grl_bucket": invalid bucket name "%s"' % ("x" * 64), "x" * 64),
    ("duplicate-bucket", [ZONE, "grl_bucket api rate=10r/s;", "grl_bucket api procedure=/x rate=5r/s;"],
     '"grl_bucket" "api": duplicate bucket "api"', "procedure=/x"),
    ("unknown-parameter", [ZONE, "grl_bucket api rate=10r/s burst=5;"],
     '"grl_bucket" "api": invalid parameter "burst=5"', "burst=5"),
    ("bad-cost", [ZONE, "grl_bucket api rate=10r/s cost=-1;"],
     '"grl_bucket" "api": invalid "cost=-1", expected 0-4294967295 or one variable', "cost=-1"),
    ("huge-cost", [ZONE, "grl_bucket api rate=10r/s cost=4294967296;"],
     '"grl_bucket" "api": invalid "cost=4294967296"', "cost=4294967296"),
    ("cost-complex-value", [ZONE, "grl_bucket api rate=10r/s cost=${arg_c}0;"],
     '"grl_bucket" "api": cost=: invalid value "${arg_c}0", expected 0-4294967295 or one variable',
     "cost=${arg_c}0"),
    ("cost-after-number", [ZONE, "grl_bucket api rate=10r/s cost_after=5;"],
     '"grl_bucket" "api": invalid "cost_after=5", expected one variable', "cost_after=5"),
    ("duplicate-cost", [ZONE, "grl_bucket api rate=10r/s cost=2 cost=3;"],
     '"grl_bucket" "api": duplicate "cost=3"', "cost=2 cost=3"),
    ("two-caller-matches", [ZONE, "grl_caller $http_x_caller;",
                            "grl_bucket api caller=a caller_prefix=b rate=10r/s;"],
     '"grl_bucket" "api": more than one caller/procedure match in "caller_prefix=b"', "caller_prefix=b"),
    ("two-procedure-matches", [ZONE, "grl_bucket api procedure=/a procedure_regex=^/b rate=10r/s;"],
     '"grl_bucket" "api": more than one caller/procedure match in "procedure_regex=^/b"', "procedure=/a"),
    ("empty-match", [ZONE, "grl_bucket api procedure_prefix= rate=10r/s;"],
     '"grl_bucket" "api": empty value in "procedure_prefix="', "procedure_prefix="),
    ("bad-regex", [ZONE, "grl_bucket api procedure_regex=^/(a rate=10r/s;"],
     '"grl_bucket" "api": invalid regex "^/(a": missing closing parenthesis', "procedure_regex"),
    ("missing-rate", [ZONE, "grl_bucket api procedure=/api;"],
     '"grl_bucket" "api" must have "rate" or "quota" parameter', "procedure=/api;"),
    ("bucket-before-zone", ["grl_bucket api rate=10r/s;", ZONE],
     '"grl_bucket" needs "grl_zone" before it', "grl_bucket api"),
    ("caller-bucket-without-grl_caller", [ZONE, "grl_bucket api caller=alice rate=10r/s;"],
     '"grl_bucket" "api" matches on caller but "grl_caller" is not set', None),
    ("zone-without-size", ["grl_zone grl;"],
     '"grl_zone": invalid zone "grl", expected name:size', "grl_zone grl;"),
    ("zone-bad-size", ["grl_zone grl:lots;"],
     '"grl_zone": invalid size "lots"', "grl_zone grl:lots;"),
    ("zone-too-small", ["grl_zone grl:16k;"],
     '"grl_zone": zone "grl:16k" is too small, at least', "grl_zone grl:16k;"),
    ("zone-duplicate", [ZONE, "grl_zone other:1m;"],
     '"grl_zone" directive is duplicate', "grl_zone other"),
    ("bad-collector-endpoint", [ZONE, HOST, "grl_collector http://127.0.0.1:5555;"],
     '"grl_collector": invalid endpoint "http://127.0.0.1:5555", expected tcp://host:port or ipc://path',
     "grl_collector"),
    ("collector-endpoint-without-port", [ZONE, HOST, "grl_collector tcp://127.0.0.1;"],
     '"grl_collector": invalid endpoint "tcp://127.0.0.1"', "grl_collector"),
    ("bad-instructions-endpoint", [ZONE, HOST, "grl_instructions tcp://127.0.0.1:5556 tcp://h:port;"],
     '"grl_instructions": invalid endpoint "tcp://h:port"', "grl_instructions"),
    ("report-interval-too-short", ["grl_report_interval 50ms;"],
     '"grl_report_interval": "50ms" is out of range, expected 100ms..60s', "grl_report_interval"),
    ("report-interval-too-long", ["grl_report_interval 2m;"],
     '"grl_report_interval": "2m" is out of range, expected 100ms..60s', "grl_report_interval"),
    ("bad-duration", ["grl_instruction_ttl soon;"],
     '"grl_instruction_ttl": invalid duration "soon"', "grl_instruction_ttl"),
    ("ttl-equal-interval", ["grl_report_interval 2s;", "grl_instruction_ttl 2s;"],
     '"grl_instruction_ttl" 2000ms must be longer than "grl_report_interval" 2000ms', None),
    ("ttl-below-default-interval", ["grl_instruction_ttl 500ms;"],
     '"grl_instruction_ttl" 500ms must be longer than "grl_report_interval" 1000ms', None),
    ("bad-reject-status", ["grl_reject_status 200;"],
     '"grl_reject_status": invalid status "200", expected 400..599', "grl_reject_status"),
    ("non-numeric-reject-status", ["grl_reject_status teapot;"],
     '"grl_reject_status": invalid status "teapot"', "grl_reject_status"),
    ("retry-after-too-short", ["grl_retry_after 500ms;"],
     '"grl_retry_after": invalid delay "500ms", expected off or at least 1s', "grl_retry_after"),
    ("retry-after-bad-jitter", ["grl_retry_after 2s spread=1s;"],
     '"grl_retry_after": invalid parameter "spread=1s", expected jitter=DURATION', "grl_retry_after"),
    ("retry-after-off-with-jitter", ["grl_retry_after off jitter=1s;"],
     '"grl_retry_after": invalid parameter "jitter=1s"', "grl_retry_after"),
    ("collector-without-host", [ZONE, "grl_collector tcp://127.0.0.1:5555;"],
     '"grl_collector" and "grl_instructions" need "grl_host" with zone= and region=', None),
    ("instructions-without-host", [ZONE, "grl_instructions tcp://127.0.0.1:5555;"],
     '"grl_collector" and "grl_instructions" need "grl_host" with zone= and region=', None),
    ("collector-without-zone", [HOST, "grl_collector tcp://127.0.0.1:5555;"],
     '"grl_collector" and "grl_instructions" need "grl_zone"', None),
    ("host-without-region", [ZONE, "grl_host id=h1 zone=z1;"],
     '"grl_host" must have "zone" and "region" parameters', "grl_host"),
    ("host-without-zone", [ZONE, "grl_host region=r1;"],
     '"grl_host" must have "zone" and "region" parameters', "grl_host"),
    ("host-bad-parameter", [ZONE, "grl_host zone=z1 region=r1 rack=7;"],
     '"grl_host": invalid parameter "rack=7", expected id=, zone= or region=', "grl_host"),
    ("host-bad-name", [ZONE, "grl_host zone=z/1 region=r1;"],
     '"grl_host": invalid zone "z/1"', "grl_host"),
    ("missing-caller-bad-value", ["grl_missing_caller drop;"],
     '"grl_missing_caller": invalid value "drop", expected skip or value=NAME', "grl_missing_caller"),
    ("caller-without-variable", ["grl_caller fixed;"],
     '"grl_caller": "fixed" has no variable, so every request would look the same', "grl_caller"),
    ("duplicate-grl_host", [ZONE, HOST, "grl_host id=h2 zone=z1 region=r1;"],
     '"grl_host" directive is duplicate', "id=h2"),
    ("duplicate-grl_collector", [ZONE, HOST, "grl_collector tcp://127.0.0.1:1;", "grl_collector tcp://127.0.0.1:2;"],
     '"grl_collector" directive is duplicate', "127.0.0.1:2"),
    ("duplicate-grl_instructions", [ZONE, HOST, "grl_instructions tcp://127.0.0.1:1;",
                                    "grl_instructions tcp://127.0.0.1:2;"],
     '"grl_instructions" directive is duplicate', "127.0.0.1:2"),
    ("duplicate-grl_report_interval", ["grl_report_interval 1s;", "grl_report_interval 2s;"],
     '"grl_report_interval" directive is duplicate', "grl_report_interval 2s"),
    ("duplicate-grl_instruction_ttl", ["grl_instruction_ttl 5s;", "grl_instruction_ttl 6s;"],
     '"grl_instruction_ttl" directive is duplicate', "grl_instruction_ttl 6s"),
    ("duplicate-grl_caller", ["grl_caller $http_x_caller;", "grl_caller $http_x_other;"],
     '"grl_caller" directive is duplicate', "x_other"),
    ("duplicate-grl_procedure", ["grl_procedure $uri;", "grl_procedure $request_uri;"],
     '"grl_procedure" directive is duplicate', "request_uri"),
    ("duplicate-grl_missing_caller", ["grl_missing_caller skip;", "grl_missing_caller value=anon;"],
     '"grl_missing_caller" directive is duplicate', "value=anon"),
    ("duplicate-grl_reject_status", ["grl_reject_status 429;", "grl_reject_status 503;"],
     '"grl_reject_status" directive is duplicate', "503"),
    ("curve-keypair-unreadable", [ZONE, HOST, COLLECTOR, "grl_curve_keypair /nonexistent/host.key;"],
     '"grl_curve_keypair": cannot read "/nonexistent/host.key": No such file or directory',
     "grl_curve_keypair"),
    ("curve-keypair-empty-name", [ZONE, HOST, COLLECTOR, 'grl_curve_keypair "";'],
     '"grl_curve_keypair": empty file name', "grl_curve_keypair"),
    ("curve-keypair-public-only", [ZONE, HOST, COLLECTOR, "grl_curve_keypair %s;" % SERVER],
     '"grl_curve_keypair": %s: a key pair file needs public-key and secret-key lines' % SERVER,
     "grl_curve_keypair"),
    ("curve-server-key-invalid", [ZONE, HOST, COLLECTOR, "grl_curve_server_key %s;" % SHORT],
     '"grl_curve_server_key": %s:2: invalid public-key, expected 40 Z85 characters' % SHORT,
     "grl_curve_server_key"),
    ("curve-keypair-without-server-key", [ZONE, HOST, COLLECTOR, "grl_curve_keypair %s;" % PAIR],
     '"grl_curve_keypair" needs "grl_curve_server_key" (CURVE needs this host\'s key pair and the '
     'collector\'s public key)', None),
    ("curve-server-key-without-keypair", [ZONE, HOST, COLLECTOR, "grl_curve_server_key %s;" % SERVER],
     '"grl_curve_server_key" needs "grl_curve_keypair"', None),
    ("curve-without-control-plane", [ZONE, "grl_curve_keypair %s;" % PAIR,
                                     "grl_curve_server_key %s;" % SERVER],
     '"grl_curve_keypair" needs "grl_collector" or "grl_instructions"', None),
    ("duplicate-grl_curve_keypair", [ZONE, HOST, COLLECTOR, "grl_curve_keypair %s;" % PAIR,
                                     "grl_curve_keypair %s ;" % PAIR],
     '"grl_curve_keypair" directive is duplicate', "host.key ;"),
    ("duplicate-grl_retry_after", ["grl_retry_after 1s;", "grl_retry_after 2s;"],
     '"grl_retry_after" directive is duplicate', "grl_retry_after 2s"),
    ("bad-grl_dry_run", ["grl_dry_run maybe;"],
     'invalid value "maybe" in "grl_dry_run" directive, it must be "on" or "off"', "grl_dry_run"),
    ("duplicate-grl_ratelimit_headers", ["grl_ratelimit_headers on;", "grl_ratelimit_headers off;"],
     '"grl_ratelimit_headers" directive is duplicate', "grl_ratelimit_headers off"),
    ("bad-grl_problem_json", ["grl_problem_json yes;"],
     'invalid value "yes" in "grl_problem_json" directive, it must be "on" or "off"',
     "grl_problem_json"),
]


def line_of(text, needle):
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line and not line.lstrip().startswith("#"):
            return i
    raise AssertionError("%r not in the configuration" % needle)


@pytest.mark.parametrize("lines,message,at", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_nginx_t_rejects_bad_directive(nginx_factory, lines, message, at):
    n = nginx_factory("\n".join(lines), start=False)
    rc, out = n.test_config()
    assert rc != 0, "nginx -t accepted a bad configuration:\n%s\n%s" % ("\n".join(lines), out)
    emerg = [l for l in out.splitlines() if "[emerg]" in l]
    assert len(emerg) == 1, "expected exactly one [emerg] line, got:\n" + out
    assert message in emerg[0], "expected %r in the error, got:\n%s" % (message, out)
    text = open(n.conf_path).read()
    where = re.escape(n.conf_path) + r":(\d+)$"
    m = re.search(where, emerg[0])
    assert m, "the error does not end with %s:LINE:\n%s" % (n.conf_path, emerg[0])
    if at is not None:
        assert int(m.group(1)) == line_of(text, at), (
            "the error points at line %s, the bad directive is on line %d:\n%s"
            % (m.group(1), line_of(text, at), emerg[0]))


VALID = """\
grl_zone grl:1m;
grl_host id=host-1.a zone=eu-west-1a region=eu-west-1;
grl_collector tcp://127.0.0.1:5555;
grl_instructions tcp://127.0.0.1:5556 ipc:///tmp/grl-nowhere.sock;
grl_curve_keypair %s;
grl_curve_server_key %s;
grl_report_interval 250ms;
grl_instruction_ttl 3s;
grl_caller $http_x_caller;
grl_procedure $uri;
grl_missing_caller value=anonymous;
grl_reject_status 503;
grl_retry_after 2s jitter=3s;
grl_log_level warn;
grl_dry_run off;
grl_ratelimit_headers on;
grl_problem_json on;
grl_bucket all rate=1000r/s;
grl_bucket alice caller=alice rate=600r/m scope=zone;
grl_bucket svc caller_prefix=svc- procedure_prefix=/api/ rate=50r/s scope=region mode=shadow;
grl_bucket teams caller_regex=^team[0-9]+$ rate=5r/s mode=deny;
grl_bucket users procedure=/api/users rate=1r/s;
grl_bucket rx procedure_regex=^/rx/[0-9]+$ rate=2r/s;
grl_bucket odd-name_1.x:y procedure=/odd rate=1r/m;
grl_bucket per-key-day key=$http_x_api_key keys=64 procedure=/keyed quota=1000/day;
""" % (PAIR, SERVER)


def test_nginx_t_accepts_valid_configuration(nginx_factory):
    n = nginx_factory(VALID, start=False)
    rc, out = n.test_config()
    assert rc == 0, "nginx -t rejected a valid configuration:\n" + out
    assert "test is successful" in out
    assert "[emerg]" not in out and "[warn]" not in out, out


def test_valid_configuration_starts_and_serves(nginx_factory):
    n = nginx_factory(VALID)
    st = n.status()
    assert (st["host"], st["zone"], st["region"]) == ("host-1.a", "eu-west-1a", "eu-west-1")
    names = [b["name"] for b in st["buckets"]]
    assert names == ["all", "alice", "svc", "teams", "users", "rx", "odd-name_1.x:y", "per-key-day"]
    by = {b["name"]: b for b in st["buckets"]}
    # A quota per key lists up to 256 keys a report (docs/design/009-per-key-quotas.md).
    assert by["per-key-day"]["keyed"]["report_keys"] == 256
    assert by["per-key-day"]["keyed"]["quota_units_lost"] == 0
    assert by["alice"]["configured_limit_rps"] == 10.0 and by["alice"]["scope"] == "zone"
    assert by["svc"]["configured_mode"] == "shadow" and by["svc"]["scope"] == "region"
    assert by["odd-name_1.x:y"]["configured_limit_rps"] == pytest.approx(1 / 60, abs=0.001)
    assert st["control_plane"]["curve"] is True
    assert n.get("/").status == 200


def test_bad_reload_keeps_old_configuration_serving(nginx_factory):
    n = nginx_factory(h.grl_conf(["api procedure_prefix=/api rate=10r/s"]))
    pids = n.worker_pids()
    assert n.get("/api/x").status == 200
    assert n.bucket("api")["offered"] == 1

    good = open(n.conf_path).read()
    n.expect_log(r'invalid rate "lots"', "the test reloads a bad configuration")
    bad = n.render(http_extra=h.grl_conf(["api procedure_prefix=/api rate=lots"]), gen=99)
    n.write_raw_conf(bad)

    # `nginx -s reload` parses the file itself and refuses to signal.
    with pytest.raises(h.NginxError) as e:
        n.signal_reload(use_signaller=True)
    assert 'invalid rate "lots"' in str(e.value)

    # A plain SIGHUP (systemctl reload): the master reads the bad file, logs and keeps going.
    n.signal_reload(use_signaller=False)
    h.wait_until(lambda: 'invalid rate "lots"' in n.error_log(), 10, what="the reload error in the error log")
    # The master's line (the `nginx -s reload` process above may have logged its own).
    master = " %d#%d: " % (n.proc.pid, n.proc.pid)
    h.wait_until(lambda: any('invalid rate "lots"' in l and master in l
                             for l in n.error_log().splitlines()), 10, what="the master's line")
    err = [l for l in n.error_log().splitlines() if 'invalid rate "lots"' in l and master in l]
    assert len(err) == 1 and "%s:%d" % (n.conf_path, line_of(bad, "rate=lots")) in err[0], err

    assert n.worker_pids() == pids, "the workers were replaced despite the bad configuration"
    for _ in range(20):
        r = n.get("/api/x")
        assert r.status == 200 and r.headers["x-gen"] == "1", r
    assert n.bucket("api")["offered"] == 21, "the old configuration's bucket stopped counting"

    # Fixing the file makes the next reload work.
    n.write_raw_conf(good)
    n.reload()
    assert n.get("/api/x").headers["x-gen"] == "2"
    assert n.bucket("api")["offered"] == 22, "counters must survive the reload"


def smallest_zone(nginx_factory):
    """The size the "too small" message names, e.g. "77k" (it depends on the zone layout)."""
    n = nginx_factory("grl_zone grl:16k;", start=False)
    rc, out = n.test_config()
    assert rc != 0, out
    return re.search(r"at least (\d+k)", out).group(1)


def test_nginx_t_rejects_more_buckets_than_the_zone_holds(nginx_factory):
    size = smallest_zone(nginx_factory)
    buckets = ["b%d rate=1r/s" % i for i in range(300)]
    n = nginx_factory(h.grl_conf(buckets, host=None, interval=None, zone="grl:" + size), start=False)
    rc, out = n.test_config()
    assert rc != 0, out
    assert re.search(r'\[emerg\].*grl_zone "grl": too small: no free slot for bucket "b\d+"', out), out


def test_smallest_accepted_zone_works(nginx_factory):
    # The size named by the "too small" message must itself be usable.
    size = smallest_zone(nginx_factory)
    n = nginx_factory("grl_zone grl:%s;\ngrl_bucket a procedure=/a rate=1r/s;" % size)
    assert n.get("/a").status == 200
    assert n.bucket("a")["offered"] == 1


def test_failed_reloads_do_not_reset_running_counters(nginx_factory):
    # The reloads fail inside init_shm (more buckets than slots), i.e. after
    # View::assign() has advanced the shm's configuration generation; slots are
    # freed only relative to configurations whose workers actually ran.
    zone = "grl:" + smallest_zone(nginx_factory)
    running = h.grl_conf(["x procedure=/x rate=1r/s", "y procedure=/y rate=1r/s"],
                         host=None, interval=None, zone=zone)
    failing = h.grl_conf(["y procedure=/y rate=1r/s"] + ["n%d rate=1r/s" % i for i in range(300)],
                         host=None, interval=None, zone=zone)
    n = nginx_factory(running)
    n.expect_log("too small: no free slot", "the test's reloads need more slots than the shm has")
    for _ in range(10):
        n.get("/x")
    assert n.bucket("x")["offered"] == 10
    for i in (1, 2):
        n.write_raw_conf(n.render(http_extra=failing, gen=100 + i))
        n.signal_reload(use_signaller=False)
        h.wait_until(lambda: n.error_log().count("no free slot") == i, 10, what="failed reload %d" % i)
        assert n.get("/x").status == 200
        assert n.get("/x").headers["x-gen"] == "1"
    assert n.bucket("x")["offered"] == 14, (
        "the running configuration's cumulative counter went backwards after two failed reloads")
