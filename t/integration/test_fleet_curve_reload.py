"""CURVE key lists reloaded on SIGHUP (docs/control-plane.md, "CURVE"), with the real
daemons and real CURVE: a bad new file is refused whole, naming the file and the line, and
the list in force stays; a good one is taken at once: a removed key's live connection is
refused from then on (its reports, usage and admin requests: key_not_listed), a new
connection with it fails the handshake, an added key is admitted without a restart; and a
first-come binding lapses after its idle time, counted and logged."""

import signal
import time

import msgpack
import zmq

import fleet as f
import test_fleet_curve as tc
from fleet import fleet  # noqa: F401  (pytest fixture)


def test_key_lists_reload_on_sighup(fleet, tmp_path):
    ctl_key, ctl_keys = tc.keygen(tmp_path, "controller")
    col_key, col_keys = tc.keygen(tmp_path, "collector")
    _, a_keys = tc.keygen(tmp_path, "a")  # stays listed
    _, b_keys = tc.keygen(tmp_path, "b")  # removed by the reload
    _, c_keys = tc.keygen(tmp_path, "c")  # added by the reload
    adm1_key, adm1_keys = tc.keygen(tmp_path, "adm1")
    adm2_key, adm2_keys = tc.keygen(tmp_path, "adm2")
    pub = lambda k: k["public-key"].decode()  # noqa: E731
    hosts = tmp_path / "hosts"
    hosts.write_text("%s\n%s\n" % (pub(a_keys), pub(b_keys)))
    collectors = tmp_path / "collectors"
    collectors.write_text("%s z1\n" % pub(col_keys))
    admins = tmp_path / "admins"
    admins.write_text("%s\n" % pub(adm1_keys))
    ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(collectors),
                                  "--curve-admin-clients", str(admins)])
    # Hosts are forgotten, and their first-come bindings lapse, after 8 x 250 ms.
    col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key,
                                               "--curve-server-key", ctl_key + ".pub",
                                               "--curve-clients", str(hosts),
                                               "--stale-intervals", "4", "--forget-intervals", "8"])
    ctx = zmq.Context()

    def client(kind, keys, server_keys, ep):
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.curve_serverkey = server_keys["public-key"]
        s.curve_publickey = keys["public-key"]
        s.curve_secretkey = keys["secret-key"]
        s.connect(ep)
        return s

    def m(d, name, **labels):
        return f.metric(d.metrics(), name, **labels) or 0

    def taken(d):
        """Reports that passed the key checks (every result of grl_collector_reports_total)."""
        return sum(v for _, v in d.metrics().get("grl_collector_reports_total", []))

    seq = [0]

    def send(sock, host):
        seq[0] += 1
        try:
            sock.send(tc.report(host, seq[0]), zmq.NOBLOCK)
        except zmq.Again:
            pass  # no connection (a refused handshake): nothing to queue on

    def admin(sock):
        sock.send(msgpack.packb({"v": 1, "type": "admin_request", "ts_ms": int(time.time() * 1000),
                                 "seq": 1, "op": "status"}, use_bin_type=True))
        assert sock.poll(5000), "no admin reply"
        return msgpack.unpackb(sock.recv(), raw=False)

    try:
        a = client(zmq.PUSH, a_keys, col_keys, col.report)
        b = client(zmq.PUSH, b_keys, col_keys, col.report)
        for _ in range(3):
            send(a, "h1")
            send(b, "h2")
            time.sleep(0.1)
        f.h.wait_until(lambda: m(col, "grl_collector_reports_total", result="first") == 2, 5,
                       what="h1 and h2 (keys a and b) to be taken")
        assert m(col, "grl_curve_key_bindings", domain="nginx") == 2
        assert m(col, "grl_curve_keys", domain="nginx") == 2

        # 1. A bad file: refused whole, naming the file and the line; the old list stays.
        hosts.write_text("%s\nnot-a-key h3\n" % pub(a_keys))
        col.signal(signal.SIGHUP)
        f.h.wait_until(lambda: m(col, "grl_curve_key_list_reloads_total", list="--curve-clients",
                                 result="rejected") == 1, 5, what="the bad list to be refused")
        assert ("SIGHUP: --curve-clients refused: %s:2: invalid public key, expected 40 Z85 "
                "characters; the list in force stays (2 keys)" % hosts) in col.log()
        assert m(col, "grl_curve_key_list_ok", list="--curve-clients") == 0
        before = taken(col)
        for _ in range(3):
            send(b, "h2")  # b is still listed
            time.sleep(0.1)
        f.h.wait_until(lambda: taken(col) >= before + 3, 5,
                       what="b's reports to be taken under the old list")

        # 2. A good file: b removed, c added.
        hosts.write_text("%s\n%s h3\n" % (pub(a_keys), pub(c_keys)))
        col.signal(signal.SIGHUP)
        f.h.wait_until(lambda: m(col, "grl_curve_key_list_reloads_total", list="--curve-clients",
                                 result="ok") == 1, 5, what="the new list to be taken")
        assert ("SIGHUP: --curve-clients %s reloaded (2 keys: 1 added, 1 removed; 1 host "
                "binding(s) the new list contradicts dropped)" % hosts) in col.log()
        assert m(col, "grl_curve_key_list_ok", list="--curve-clients") == 1
        # b's live connection (its handshake predates the reload) is refused from now on.
        for _ in range(3):
            send(b, "h2")
            time.sleep(0.1)
        f.h.wait_until(lambda: m(col, "grl_collector_reports_refused_total",
                                 reason="key_not_listed") >= 3, 5,
                       what="the removed key's reports to be refused")
        assert ("from key %s: key_not_listed (removed from --curve-clients by a reload; its "
                "connection predates it)" % pub(b_keys)) in col.log()
        # A new connection with b's key fails the handshake; c, added, is admitted.
        denied = m(col, "grl_curve_handshakes_total", domain="nginx", result="denied")
        b2 = client(zmq.PUSH, b_keys, col_keys, col.report)
        c = client(zmq.PUSH, c_keys, col_keys, col.report)
        for _ in range(3):
            send(b2, "h4")
            send(c, "h3")
            send(a, "h1")
            time.sleep(0.1)
        f.h.wait_until(lambda: m(col, "grl_curve_handshakes_total", domain="nginx",
                                 result="denied") > denied, 5, what="b's new handshake refused")
        f.h.wait_until(lambda: m(col, "grl_collector_reports_total", result="first") == 3, 5,
                       what="h3 (key c, added) to be taken without a restart")

        # 3. a and c go quiet: their first-come bindings lapse after 8 x 250 ms, counted and logged.
        f.h.wait_until(lambda: m(col, "grl_curve_key_bindings_lapsed_total", domain="nginx") >= 1,
                       6, what="a's binding to lapse")
        assert "host binding(s) lapsed, unused for 2 s: their keys may speak for another host now" \
            in col.log()
        f.h.wait_until(lambda: m(col, "grl_curve_key_bindings", domain="nginx") == 0, 5,
                       what="a's and c's bindings to lapse")

        # 4. The controller's lists: a bad --curve-clients is refused (collector's usage goes
        # on), and a key removed from --curve-admin-clients is refused on its live connection.
        adm1 = client(zmq.REQ, adm1_keys, ctl_keys, ctl.admin)
        assert admin(adm1)["ok"] is True
        rc, _, err = f.grlctl(ctl, "status", check=False,
                              extra=["--curve-keypair", adm2_key, "--curve-server-key", ctl_key + ".pub",
                                     "--timeout", "1s"])
        assert rc != 0, "adm2 is not listed yet"
        collectors.write_text("%s z1\n%s zone with blanks\n" % (pub(col_keys), pub(a_keys)))
        admins.write_text("%s\n" % pub(adm2_keys))
        ctl.signal(signal.SIGHUP)
        f.h.wait_until(lambda: m(ctl, "grl_curve_key_list_reloads_total", list="--curve-admin-clients",
                                 result="ok") == 1, 5, what="the admin list to be taken")
        log = ctl.log()
        assert "SIGHUP: --curve-clients refused: %s:2: invalid name" % collectors in log, log[-2000:]
        assert m(ctl, "grl_curve_key_list_reloads_total", list="--curve-clients", result="rejected") == 1
        assert m(ctl, "grl_curve_key_list_ok", list="--curve-clients") == 0
        assert ("SIGHUP: --curve-admin-clients %s reloaded (1 keys: 1 added, 1 removed)" % admins) in log
        reply = admin(adm1)  # the same connection, its key removed
        assert reply["ok"] is False and "not listed" in reply["error"], reply
        assert m(ctl, "grl_controller_messages_ignored_total", kind="admin_request",
                 reason="key_not_listed") == 1
        st = f.grlctl(ctl, "status", extra=["--curve-keypair", adm2_key,
                                            "--curve-server-key", ctl_key + ".pub"])
        assert [z["zone"] for z in st["zones"] if z["fresh"]] == ["z1"], st  # old list in force
    finally:
        ctx.destroy(0)
