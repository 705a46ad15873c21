"""CURVE on the control plane (keys from files, `grlctl keygen`): a peer
without an authorised key can neither report counts nor publish instructions
nor use the admin endpoint. Each attack is repeated with a key that *is*
accepted, to show that the same message would have changed the ratio."""

import os
import subprocess
import time

import msgpack
import zmq

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

BUCKETS = ["g procedure_prefix=/g rate=100r/s"]


def keygen(dirpath, name):
    path = os.path.join(str(dirpath), name)
    subprocess.run([f.GRLCTL_BIN, "keygen", path], check=True, stdout=subprocess.DEVNULL)
    keys = {}
    with open(path) as fh:
        for line in fh:
            k, _, v = line.strip().partition("=")
            if k.strip() in ("public-key", "secret-key"):
                keys[k.strip()] = v.strip().strip('"').encode()
    return path, keys


def ratio(ctl):
    return f.metric(ctl.metrics(), "grl_bucket_ratio", bucket="g", scope="global")


def zone_usage(zone, offered_rps):
    return msgpack.packb({
        "v": f.USAGE_VERSION, "type": "zone_usage", "ts_ms": int(time.time() * 1000), "seq": 1,
        "source": "intruder", "region": "r1", "zone": zone, "interval_ms": 250, "hosts": 1, "stale_hosts": 0,
        "host_names": ["x"],
        "buckets": [f.usage_entry("g", offered_mrps=offered_rps * 1000, host_names=[],
                                  definitions=[f.definition(100000)])]},
        use_bin_type=True)


def drop_all():
    return msgpack.packb({
        "v": 1, "type": "instructions", "ts_ms": int(time.time() * 1000) + 60000, "seq": 1, "source": "intruder",
        "ttl_ms": 60000, "scope": "global", "region": "", "zone": "",
        "buckets": [{"name": "g", "ratio_ppm": 1000000, "limit_mrps": 1, "mode": "deny"}]}, use_bin_type=True)


def curve_server(ctx, keys):
    s = ctx.socket(zmq.PUB)
    s.curve_server = True
    s.curve_secretkey = keys["secret-key"]
    s.bind("tcp://127.0.0.1:*")
    return s, s.getsockopt_string(zmq.LAST_ENDPOINT)


def test_curve_unauthorised_peers_change_nothing(fleet, tmp_path):
    ctl_key, ctl_keys = keygen(tmp_path, "controller")
    col_key, col_keys = keygen(tmp_path, "collector")
    adm_key, _ = keygen(tmp_path, "admin")
    _, rogue_keys = keygen(tmp_path, "intruder")
    _, spare_keys = keygen(tmp_path, "spare-collector")  # listed, not yet used by any zone
    clients = tmp_path / "clients"
    clients.write_text("# collectors and peer controllers\n%s\n%s\n%s\n" % (
        col_keys["public-key"].decode(), ctl_keys["public-key"].decode(),
        spare_keys["public-key"].decode()))

    ctx = zmq.Context()
    # Two publishers the collector is told to subscribe to: one with its own key pair (not
    # the controller's), one that stole the controller's key pair (the positive control).
    rogue_pub, rogue_ep = curve_server(ctx, rogue_keys)
    stolen_pub, stolen_ep = curve_server(ctx, ctl_keys)
    try:
        ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(clients),
                                      "--curve-admin-clients", adm_key + ".pub"])
        col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key,
                                                   "--curve-server-key", ctl_key + ".pub",
                                                   "--controller-publish", rogue_ep,
                                                   "--controller-publish", stolen_ep])
        ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
        fleet.wait_hosts(ctl, 2)
        load = f.Load([(ns[0], 2), (ns[1], 1)], "150:30", "/g/x")
        f.wait_nginx_bucket(ns, "g", lambda b: abs(b["ratio"] - 1 / 3) < 0.05, 10)
        assert abs(ratio(ctl) - 1 / 3) < 0.05

        # 1. Reporting counts: zone usage claiming 10000 r/s from a zone "z7".
        def flood(sock, seconds):
            end = time.monotonic() + seconds
            seen = []
            while time.monotonic() < end:
                try:  # a PUSH without a completed handshake would block: never wait
                    sock.send(zone_usage("z7", 10000), zmq.NOBLOCK)
                except zmq.Again:
                    pass
                seen.append(ratio(ctl))
                time.sleep(0.1)
            return seen

        plain = ctx.socket(zmq.PUSH)  # no CURVE at all
        plain.connect(ctl.usage)
        intruder = ctx.socket(zmq.PUSH)  # CURVE with a key nobody listed
        intruder.curve_serverkey = ctl_keys["public-key"]
        intruder.curve_publickey = rogue_keys["public-key"]
        intruder.curve_secretkey = rogue_keys["secret-key"]
        intruder.connect(ctl.usage)
        for sock in (plain, intruder):
            seen = flood(sock, 1.5)
            assert all(abs(r - 1 / 3) < 0.05 for r in seen), seen
        m = ctl.metrics()
        assert f.metric(m, "grl_curve_handshakes_total", domain="collector", result="denied") >= 1
        assert f.metric(m, "grl_controller_messages_total", kind="zone_usage") > 0
        # A listed key speaks for one zone: the real collector's key (bound to z1) cannot
        # send usage for z7.
        def curve_push(keys):
            s = ctx.socket(zmq.PUSH)
            s.curve_serverkey = ctl_keys["public-key"]
            s.curve_publickey = keys["public-key"]
            s.curve_secretkey = keys["secret-key"]
            s.connect(ctl.usage)
            return s
        impostor = curve_push(col_keys)
        seen = flood(impostor, 1.5)
        assert all(abs(r - 1 / 3) < 0.05 for r in seen), seen
        assert f.metric(ctl.metrics(), "grl_controller_messages_ignored_total", kind="zone_usage",
                        reason="key_bound_to_another_name") >= 1
        impostor.close(0)
        # Positive control: a listed key not yet bound to a zone is accepted for z7, and the
        # same lie moves the ratio.
        liar = curve_push(spare_keys)
        seen = flood(liar, 1.5)
        assert max(seen) > 0.9, seen
        liar.close(0)
        f.h.wait_until(lambda: abs(ratio(ctl) - 1 / 3) < 0.05, 5, what="the ratio to recover")

        # 2. Publishing instructions: "drop everything" from the wrong server key, for 2 s.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            rogue_pub.send_multipart([b"grl/g/", drop_all()])
            for n in ns:
                b = n.bucket("g")
                assert abs(b["ratio"] - 1 / 3) < 0.1, ("the intruder's instruction got through", b)
            time.sleep(0.1)
        assert f.metric(col.metrics(), "grl_collector_instructions_malformed_total") == 0
        # Positive control: with the controller's stolen key pair the same message is relayed.
        def took_over():
            stolen_pub.send_multipart([b"grl/g/", drop_all()])
            return all(n.bucket("g")["ratio"] == 1.0 for n in ns)
        f.h.wait_until(took_over, 5, interval=0.1, what="the stolen-key publisher to be relayed")
        load.stop()

        # 3. The admin endpoint: only the admin key gets an answer.
        rc, out, err = f.grlctl(ctl, "status", check=False, json_out=False, extra=["--timeout", "1s"])
        assert rc == 3 and "no answer" in err, (rc, out, err)
        rc, out, err = f.grlctl(ctl, "status", check=False, json_out=False,
                                extra=["--timeout", "1s", "--curve-keypair", col_key,
                                       "--curve-server-key", ctl_key + ".pub"])
        assert rc == 3, "a collector key is not an admin key"
        st = f.grlctl(ctl, "status", extra=["--curve-keypair", adm_key, "--curve-server-key", ctl_key + ".pub"])
        assert st["zones"][0]["zone"] == "z1"
        m = ctl.metrics()
        assert f.metric(m, "grl_curve_handshakes_total", domain="admin", result="denied") >= 1
        assert f.metric(m, "grl_curve_handshakes_total", domain="admin", result="accepted") >= 1
        assert "CURVE: refused" in ctl.log()
    finally:
        ctx.destroy(0)


def report(host, seq, bucket="named"):
    return msgpack.packb({
        "v": 1, "type": "report", "ts_ms": int(time.time() * 1000), "seq": seq,
        "host": host, "zone": "z1", "region": "r1", "epoch": 7, "interval_ms": 250,
        "reports_dropped": 0,
        "buckets": [{"name": bucket, "scope": "global", "mode": "deny", "limit_mrps": 100000,
                     "offered": 10 * seq, "admitted": 10 * seq, "dropped": 0, "shadow_dropped": 0}]})


def test_a_key_list_names_what_each_key_speaks_for(fleet, tmp_path):
    """The operator's key lists name what each key may speak for: hosts on the collector's
    --curve-clients, zones on the controller's. A named key's message for another name is
    refused whole, counted and logged, even as the key's first message (first come would have
    bound the key to it); a key listed without names keeps first come but cannot take a name
    the list gives another key."""
    ctl_key, ctl_keys = keygen(tmp_path, "controller")
    col_key, col_keys = keygen(tmp_path, "collector")
    _, spare_keys = keygen(tmp_path, "spare")  # may send usage for z2 and z3 only
    _, web_keys = keygen(tmp_path, "web")  # may report for h1 and web-*
    _, bare_keys = keygen(tmp_path, "bare")  # no names: first come
    pub = lambda k: k["public-key"].decode()  # noqa: E731
    collectors = tmp_path / "collectors"
    collectors.write_text("%s z1\n%s z2,z3\n" % (pub(col_keys), pub(spare_keys)))
    hosts = tmp_path / "hosts"
    hosts.write_text("# nginx keys and their hosts\n%s h1,web-*\n%s\n" % (pub(web_keys), pub(bare_keys)))
    ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(collectors)])
    col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key,
                                               "--curve-server-key", ctl_key + ".pub",
                                               "--curve-clients", str(hosts)])
    ctx = zmq.Context()

    def client(keys, server_keys, ep):
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 0)
        s.curve_serverkey = server_keys["public-key"]
        s.curve_publickey = keys["public-key"]
        s.curve_secretkey = keys["secret-key"]
        s.connect(ep)
        return s

    def refused(d, metric_name, reason, **labels):
        return f.metric(d.metrics(), metric_name, reason=reason, **labels) or 0

    try:
        # The collector: the named key's first report is for h9, not one of its hosts.
        web = client(web_keys, col_keys, col.report)
        bare = client(bare_keys, col_keys, col.report)
        # web's refusal first: the collector logs one refusal line per 10 s, whichever comes
        # first (both in one loop, bare's came first in about one run in five).
        web.send(report("h9", 1))
        f.h.wait_until(lambda: refused(col, "grl_collector_reports_refused_total",
                                       "key_bound_to_another_name") >= 1, 5,
                       what="web's report for h9 to be refused")
        for seq in range(1, 4):
            if seq > 1:
                web.send(report("h9", seq))
            bare.send(report("web-3", seq))  # a name the list gives the other key
            time.sleep(0.1)
        f.h.wait_until(lambda: refused(col, "grl_collector_reports_refused_total",
                                       "key_bound_to_another_name") >= 3 and
                       refused(col, "grl_collector_reports_refused_total",
                               "name_bound_to_another_key") >= 3, 5,
                       what="the reports for other hosts to be refused")
        assert f.metric(col.metrics(), "grl_collector_reports_total", result="first") == 0
        log = col.log()  # one warning per 10 s: the first refusal
        assert ('refused a report for host h9 from key %s: key_bound_to_another_name '
                '(the key reports for "h1,web-*")' % pub(web_keys)) in log, log[-2000:]
        # Positive control: each key for a host it may speak for is taken.
        for seq in range(4, 7):
            web.send(report("web-7", seq))
            bare.send(report("h5", seq))
            time.sleep(0.1)
        f.h.wait_until(lambda: f.metric(col.metrics(), "grl_collector_reports_total", result="first") == 2,
                       5, what="web-7 and h5 to be taken")

        # The controller: the spare collector key may send usage for z2 and z3, not z7.
        spare = client(spare_keys, ctl_keys, ctl.usage)
        for _ in range(4):
            spare.send(zone_usage("z7", 10000))
            time.sleep(0.1)
        f.h.wait_until(lambda: refused(ctl, "grl_controller_messages_ignored_total",
                                       "key_bound_to_another_name", kind="zone_usage") >= 4, 5,
                       what="the usage for z7 to be refused")
        assert f.metric(ctl.metrics(), "grl_controller_zone_usage_age_seconds", zone="z7") is None
        assert ('zone usage for zone z7 from key %s ignored: key_bound_to_another_name '
                '(the key sends for zone "z2,z3")' % pub(spare_keys)) in ctl.log()
        # The real collector's key is listed for z1, and the same message for z2 is taken.
        f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_zone_usage_age_seconds",
                                        zone="z1") is not None, 5, what="z1's usage")
        spare.send(zone_usage("z2", 10000))
        f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_zone_usage_age_seconds",
                                        zone="z2") is not None, 5, what="z2's usage to be taken")
    finally:
        ctx.destroy(0)


def test_each_peer_controller_has_its_own_key(fleet, tmp_path):
    """Controllers with key pairs of their own check each --peer's own public key
    (--peer EP=FILE): two controllers with different keys peer, and a publisher holding one
    controller's stolen key pair cannot pass for another controller (the handshake fails,
    nothing it publishes is taken; counted and logged); the same message from a publisher
    holding the key that peer is configured with is taken (the positive control)."""
    a_key, a_keys = keygen(tmp_path, "ctl-a")
    b_key, b_keys = keygen(tmp_path, "ctl-b")
    c_key, c_keys = keygen(tmp_path, "ctl-c")  # a third controller, not started
    pub = lambda k: k["public-key"].decode()  # noqa: E731
    a_clients = tmp_path / "a-clients"
    a_clients.write_text("%s\n" % pub(b_keys))
    b_clients = tmp_path / "b-clients"
    b_clients.write_text("%s\n" % pub(a_keys))
    ctx = zmq.Context()
    stolen_b, stolen_b_ep = curve_server(ctx, b_keys)  # B's key pair, where A expects C
    real_c, real_c_ep = curve_server(ctx, c_keys)  # C's own key pair
    try:
        a = f.Controller(region="r1", name="ctl-r1",
                         extra=["--curve-keypair", a_key, "--curve-clients", str(a_clients)])
        b = f.Controller(region="r2", name="ctl-r2",
                         extra=["--curve-keypair", b_key, "--curve-clients", str(b_clients),
                                "--peer", "%s=%s.pub" % (a.publish, a_key)])
        a.args += ["--peer", "%s=%s.pub" % (b.publish, b_key),
                   "--peer", "%s=%s.pub" % (stolen_b_ep, c_key),
                   "--peer", "%s=%s.pub" % (real_c_ep, c_key)]
        fleet.add(a)
        fleet.add(b)
        for x, peer in ((a, "ctl-r2"), (b, "ctl-r1")):
            f.h.wait_until(lambda: f.metric(x.metrics(), "grl_controller_peer_age_seconds",
                                            peer=peer) is not None, 10,
                           what="%s to hear %s over its own key" % (x.name, peer))

        def usage(source, region):
            return msgpack.packb({
                "v": f.USAGE_VERSION, "type": "region_usage", "ts_ms": int(time.time() * 1000), "seq": 1,
                "source": source, "region": region, "interval_ms": 250, "zones": 1, "hosts": 1,
                "limits_digest": "", "buckets": [], "overrides": []}, use_bin_type=True)
        end = time.monotonic() + 2
        while time.monotonic() < end:
            stolen_b.send_multipart([b"grl/p/", usage("ctl-r3", "r3")])
            real_c.send_multipart([b"grl/p/", usage("ctl-r4", "r4")])
            time.sleep(0.1)
        f.h.wait_until(lambda: f.metric(a.metrics(), "grl_controller_peer_age_seconds",
                                        peer="ctl-r4") is not None, 5,
                       what="the holder of C's key to be taken")
        m = a.metrics()
        assert f.metric(m, "grl_controller_peer_age_seconds", peer="ctl-r3") is None
        assert f.metric(m, "grl_curve_client_handshakes_total", peer="peer", result="failed") >= 1
        assert "CURVE handshake with the peer controller at %s" % stolen_b_ep in a.log()
    finally:
        ctx.destroy(0)


def test_active_active_controllers_with_keys_of_their_own(fleet, tmp_path):
    """A collector names each controller's own public key (--controller-usage EP=FILE,
    --controller-publish EP=FILE), so active-active partners need not share a key pair: both
    get the zone's usage and their instructions reach nginx, while a publisher holding one
    partner's stolen key pair where the collector expects the other's never completes a
    handshake (counted, logged), also when the collector connects to it again."""
    a_key, a_keys = keygen(tmp_path, "ctl-a")
    b_key, b_keys = keygen(tmp_path, "ctl-b")
    col_key, col_keys = keygen(tmp_path, "collector")
    collectors = tmp_path / "collectors"
    collectors.write_text("%s z1\n" % col_keys["public-key"].decode())
    ctx = zmq.Context()
    stolen_b, stolen_b_ep = curve_server(ctx, b_keys)
    try:
        ctls = [fleet.controller(name=n, extra=["--curve-keypair", k, "--curve-clients", str(collectors)])
                for n, k in (("ctl-a", a_key), ("ctl-b", b_key))]
        extra = ["--curve-keypair", col_key,
                 "--controller-publish", "%s=%s.pub" % (stolen_b_ep, a_key)]
        for c, k in zip(ctls, (a_key, b_key)):
            extra += ["--controller-usage", "%s=%s.pub" % (c.usage, k),
                      "--controller-publish", "%s=%s.pub" % (c.publish, k)]
        col = fleet.add(f.Collector("z1", [], extra=extra))
        ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
        for c in ctls:
            fleet.wait_hosts(c, 2)
        load = f.Load([(ns[0], 2), (ns[1], 1)], "150:20", "/g/x")
        try:
            f.wait_nginx_bucket(ns, "g", lambda b: abs(b["ratio"] - 1 / 3) < 0.05, 10)
            for c in ctls:
                f.h.wait_until(lambda: abs(ratio(c) - 1 / 3) < 0.05, 5, what="%s's ratio" % c.name)
            # "Drop everything" from B's stolen key pair, where A's key is expected, past the
            # collector's first two redials (1 s, then 2 s later).
            end = time.monotonic() + 3.5
            while time.monotonic() < end:
                stolen_b.send_multipart([b"grl/g/", drop_all()])
                for n in ns:
                    b = n.bucket("g")
                    assert abs(b["ratio"] - 1 / 3) < 0.1, ("the impostor's instruction got through", b)
                time.sleep(0.1)
            m = col.metrics()
            assert f.metric(m, "grl_curve_client_handshakes_total", peer="controller", result="failed") >= 2
            assert f.metric(m, "grl_curve_client_handshakes_total", peer="controller", result="ok") >= 4
            assert "CURVE handshake with the controller at %s" % stolen_b_ep in col.log()
        finally:
            load.stop()
    finally:
        ctx.destroy(0)
