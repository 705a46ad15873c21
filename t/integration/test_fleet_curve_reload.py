"""CURVE key lists reloaded on SIGHUP (docs/control-plane.md, "CURVE"), with the real
daemons and real CURVE: a bad new file is refused whole, naming the file and the line, and
the list in force stays; a good one is taken at once: the endpoints a removed key had
connected to are bound again, which cuts its live connection (and its subscriptions; listed
peers connect again by themselves), a new connection with it fails the handshake, an added
key is admitted without a restart; and a first-come binding lapses after its idle time,
counted and logged."""

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
        # b had connected to the report endpoint: the reload cut the endpoint's connections
        # (a's and b's); a connects again by itself, b's handshake is refused from now on.
        assert ("SIGHUP: --curve-clients: a removed key had connected to the report endpoint "
                "%s: cut its 2 connection(s); listed peers connect again by themselves"
                % col.report) in col.log()
        assert m(col, "grl_curve_connections_cut_total", endpoint="report") == 2
        assert m(col, "grl_curve_connections_cut_total", endpoint="publish") == 0  # no subscriber
        before = taken(col)
        for _ in range(5):
            send(b, "h2")
            time.sleep(0.1)
        assert taken(col) == before, "the removed key's connection still reports"
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
        # adm1's connection was cut, and its handshake is refused from now on.
        assert ("SIGHUP: --curve-admin-clients: a removed key had connected to the admin endpoint "
                "%s: cut its 1 connection(s)" % ctl.admin) in log
        assert m(ctl, "grl_curve_connections_cut_total", endpoint="admin") == 1
        adm1.send(msgpack.packb({"v": 1, "type": "admin_request", "ts_ms": int(time.time() * 1000),
                                 "seq": 2, "op": "status"}, use_bin_type=True))
        assert not adm1.poll(1000), "the removed admin key was answered"
        st = f.grlctl(ctl, "status", extra=["--curve-keypair", adm2_key,
                                            "--curve-server-key", ctl_key + ".pub"])
        assert [z["zone"] for z in st["zones"] if z["fresh"]] == ["z1"], st  # old list in force
    finally:
        ctx.destroy(0)


def test_a_removed_subscriber_key_stops_receiving_at_the_reload(fleet, tmp_path):
    """A subscriber of the controller's publish endpoint whose key a reload removes loses its
    feed at once (its connection is cut); a listed one gets it again within a second."""
    ctl_key, ctl_keys = tc.keygen(tmp_path, "controller")
    _, col_keys = tc.keygen(tmp_path, "collector")
    _, a_keys = tc.keygen(tmp_path, "a")  # stays listed
    _, b_keys = tc.keygen(tmp_path, "b")  # removed by the reload
    pub = lambda k: k["public-key"].decode()  # noqa: E731
    clients = tmp_path / "clients"
    clients.write_text("%s z1\n%s\n%s\n" % (pub(col_keys), pub(a_keys), pub(b_keys)))
    ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(clients)])
    ctx = zmq.Context()

    def client(kind, keys, ep):
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.curve_serverkey = ctl_keys["public-key"]
        s.curve_publickey = keys["public-key"]
        s.curve_secretkey = keys["secret-key"]
        if kind == zmq.SUB:
            s.setsockopt(zmq.SUBSCRIBE, b"")
        s.connect(ep)
        return s

    def m(name, **labels):
        return f.metric(ctl.metrics(), name, **labels) or 0

    try:
        usage = client(zmq.PUSH, col_keys, ctl.usage)
        subs = {"a": client(zmq.SUB, a_keys, ctl.publish), "b": client(zmq.SUB, b_keys, ctl.publish)}

        def pump(seconds):
            """Sends zone usage every 100 ms (the controller publishes at each tick) and counts
            what each subscriber receives meanwhile."""
            got = {k: 0 for k in subs}
            end = time.time() + seconds
            while time.time() < end:
                try:
                    usage.send(tc.zone_usage("z1", 50), zmq.NOBLOCK)
                except zmq.Again:
                    pass
                time.sleep(0.1)
                for k, s in subs.items():
                    while s.poll(0):
                        s.recv_multipart()
                        got[k] += 1
            return got

        f.h.wait_until(lambda: all(v > 0 for v in pump(0.5).values()), 10,
                       what="both subscribers to receive")
        clients.write_text("%s z1\n%s\n" % (pub(col_keys), pub(a_keys)))
        ctl.signal(signal.SIGHUP)
        f.h.wait_until(lambda: m("grl_curve_key_list_reloads_total", list="--curve-clients",
                                 result="ok") == 1, 5, what="the new list to be taken")
        assert ("SIGHUP: --curve-clients: a removed key had connected to the publish endpoint "
                "%s: cut its 2 connection(s); listed peers connect again by themselves"
                % ctl.publish) in ctl.log(), ctl.log()[-3000:]
        assert m("grl_curve_connections_cut_total", endpoint="publish") == 2
        assert m("grl_curve_connections_cut_total", endpoint="usage") == 0  # no removed key there
        pump(1)  # what was queued before the cut; a connects again
        got = pump(2)
        assert got["a"] > 0, got
        assert got["b"] == 0, got
        assert m("grl_curve_handshakes_total", domain="subscriber", result="denied") >= 1
    finally:
        ctx.destroy(0)
