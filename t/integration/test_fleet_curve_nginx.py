"""CURVE on the nginx-to-collector hop (grl_curve_keypair, grl_curve_server_key):
hosts whose keys the collector lists report and receive ratios; a host with an
unlisted key, or without CURVE, is counted nowhere and gets no ratio (it fails
open), and says why in its error log and on its status page."""

import time

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)
from test_fleet_curve import keygen

BUCKETS = ["g procedure_prefix=/g rate=100r/s"]


def curve_lines(keypair, server_pub):
    return "grl_curve_keypair %s;\ngrl_curve_server_key %s;" % (keypair, server_pub)


def test_curve_between_nginx_and_collector(fleet, tmp_path):
    ctl_key, _ = keygen(tmp_path, "controller")
    col_key, col_keys = keygen(tmp_path, "collector")
    h1_key, h1_keys = keygen(tmp_path, "h1")
    h2_key, h2_keys = keygen(tmp_path, "h2")
    rogue_key, rogue_keys = keygen(tmp_path, "rogue")
    collectors = tmp_path / "collectors"
    collectors.write_text(col_keys["public-key"].decode() + "\n")
    hosts = tmp_path / "hosts"
    hosts.write_text("# nginx hosts of zone z1\n%s\n%s\n" % (
        h1_keys["public-key"].decode(), h2_keys["public-key"].decode()))

    ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(collectors)])
    col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key,
                                               "--curve-server-key", ctl_key + ".pub",
                                               "--curve-clients", str(hosts)])
    listed = [fleet.nginx(h, "z1", col, BUCKETS, extra=curve_lines(k, col_key + ".pub"))
              for h, k in (("h1", h1_key), ("h2", h2_key))]
    rogue = fleet.nginx("h3", "z1", col, BUCKETS, extra=curve_lines(rogue_key, col_key + ".pub"))
    plain = fleet.nginx("h4", "z1", col, BUCKETS)
    # The listed hosts offer 150 r/s for a limit of 100; the other two add 100 r/s that the
    # control plane must not see (else the ratio would be 0.6, not 1/3).
    load = f.Load([(listed[0], 2), (listed[1], 1), (rogue, 1), (plain, 1)], "250:25", "/g/x")
    try:
        f.wait_nginx_bucket(listed, "g", lambda b: b["ratio_state"] == "active" and
                            abs(b["ratio"] - 1 / 3) < 0.05, 15)
        samples = []
        for _ in range(8):
            samples.append(f.metric(ctl.metrics(), "grl_bucket_offered_rps", bucket="g", scope="global"))
            for n in (rogue, plain):
                b = n.bucket("g")
                assert b["ratio"] == 0 and b["ratio_state"] == "waiting", (n.host, b)
                assert b["offered"] > 0
            time.sleep(0.25)
        samples.sort()
        assert abs(samples[len(samples) // 2] - 150) < 150 * 0.15, samples
        assert f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 2

        for n in listed:
            cp = n.status()["control_plane"]
            assert cp["curve"] is True and cp["curve_handshakes_ok"] >= 2, cp
            assert cp["curve_handshakes_failed"] == 0, cp
            assert cp["state"] == "active", cp
        cp = rogue.status()["control_plane"]
        assert cp["curve"] is True and cp["curve_handshakes_failed"] >= 2, cp
        assert cp["state"] == "waiting", cp
        assert plain.status()["control_plane"]["curve"] is False
        # The refusal is explained once per socket, not once per attempt.
        log = rogue.error_log()
        for role in ("report", "instruction"):
            lines = [l for l in log.splitlines() if "CURVE handshake of the %s socket" % role in l]
            assert len(lines) == 1, log
            assert "refused by the collector (ZAP status 400): is this host's public key in its " \
                   "--curve-clients?" in lines[0], lines[0]
        assert "CURVE handshake" not in listed[0].error_log()
        m = col.metrics()
        # ZAP domains: "nginx" for the report endpoint, "subscriber" for instructions.
        for domain in ("nginx", "subscriber"):
            assert f.metric(m, "grl_curve_handshakes_total", domain=domain, result="denied") >= 1
            assert f.metric(m, "grl_curve_handshakes_total", domain=domain, result="accepted") >= 2

        # Listing the key and restarting the collector admits the host: no nginx reload.
        hosts.write_text(hosts.read_text() + rogue_keys["public-key"].decode() + "\n")
        col.stop()
        col.start()
        f.wait_nginx_bucket([rogue], "g", lambda b: b["ratio_state"] == "active", 15)
        f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 3, 10,
                       what="three hosts to report")
        f.wait_nginx_bucket(listed + [rogue], "g", lambda b: abs(b["ratio"] - 0.5) < 0.07, 10,
                            what="the ratio to take the third host's load into account")
        lines = [l for l in rogue.error_log().splitlines() if "CURVE handshake of the report" in l]
        assert "succeeded" in lines[-1], lines
    finally:
        load.stop()


def test_nginx_with_wrong_collector_key_fails_open(fleet, tmp_path):
    col_key, col_keys = keygen(tmp_path, "collector")
    other_key, _ = keygen(tmp_path, "other")
    h1_key, h1_keys = keygen(tmp_path, "h1")
    hosts = tmp_path / "hosts"
    hosts.write_text(h1_keys["public-key"].decode() + "\n")
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key, "--curve-clients", str(hosts)])
    # grl_curve_server_key names a key the collector does not hold: the host cannot
    # complete a handshake, so it neither reports nor takes instructions.
    n = fleet.nginx("h1", "z1", col, BUCKETS, extra=curve_lines(h1_key, other_key + ".pub"))
    load = f.Load([(n, 1)], "150:4", "/g/x")
    try:
        w = f.window(load.result(30), 0, 4)
        assert w["r429"] == 0 and w["errors"] == 0 and w["ok"] > 140, w  # fails open
        f.h.wait_until(lambda: n.status()["control_plane"]["curve_handshakes_failed"] >= 1, 5,
                       what="a failed handshake to be counted")
        st = n.status()
        assert st["control_plane"]["curve_handshakes_ok"] == 0, st["control_plane"]
        assert st["control_plane"]["reports_sent"] == 0, st["control_plane"]
        b = [b for b in st["buckets"] if b["name"] == "g"][0]
        assert b["admitted"] == b["offered"] and b["offered"] > 0, b
        assert f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 0
        assert "CURVE handshake of the report socket" in n.error_log()
    finally:
        load.stop()


def test_refused_collector_rejoins_once_listed(fleet, tmp_path):
    """libzmq abandons a connection whose key was refused; the collector connects again with
    a backoff, so listing its key at the controller is enough (no collector restart)."""
    ctl_key, _ = keygen(tmp_path, "controller")
    col_key, col_keys = keygen(tmp_path, "collector")
    _, other_keys = keygen(tmp_path, "other")
    clients = tmp_path / "clients"
    clients.write_text(other_keys["public-key"].decode() + "\n")
    ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(clients)])
    col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key,
                                               "--curve-server-key", ctl_key + ".pub"])
    n = fleet.nginx("h1", "z1", col, BUCKETS)
    load = f.Load([(n, 1)], "150:30", "/g/x")
    try:
        f.h.wait_until(lambda: (f.metric(col.metrics(), "grl_curve_client_handshakes_total",
                                         peer="controller", result="failed") or 0) >= 2, 10,
                       what="the collector's refused handshakes to be counted")
        assert f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 0
        assert n.bucket("g")["ratio_state"] == "waiting"
        lines = [l for l in col.log().splitlines() if "CURVE handshake with the controller" in l]
        assert lines and all("refused by the controller (ZAP status 400)" in l for l in lines), lines
        assert len(lines) <= 2, lines  # one per socket (usage, instructions), not one per attempt

        clients.write_text(col_keys["public-key"].decode() + "\n")
        ctl.stop()
        ctl.start()
        f.wait_nginx_bucket([n], "g", lambda b: b["ratio_state"] == "active" and
                            abs(b["ratio"] - 1 / 3) < 0.07, 20,
                            what="the ratio to arrive through the re-admitted collector")
        assert f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 1
        lines = [l for l in col.log().splitlines() if "CURVE handshake with the controller" in l]
        assert any(l.endswith("succeeded") for l in lines), lines
    finally:
        load.stop()


def test_a_listed_key_speaks_for_one_host_only(fleet, tmp_path):
    """A key on the collector's list is bound to the first host it reports for: a report for
    another host from that key (here h2's key claiming to be h1, with a new epoch and a huge
    load) is refused and counted, and the fleet's ratio does not move."""
    import msgpack
    import zmq
    ctl_key, _ = keygen(tmp_path, "controller")
    col_key, col_keys = keygen(tmp_path, "collector")
    h1_key, h1_keys = keygen(tmp_path, "h1")
    h2_key, h2_keys = keygen(tmp_path, "h2")
    collectors = tmp_path / "collectors"
    collectors.write_text(col_keys["public-key"].decode() + "\n")
    hosts = tmp_path / "hosts"
    hosts.write_text("%s\n%s\n" % (h1_keys["public-key"].decode(), h2_keys["public-key"].decode()))
    ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(collectors)])
    col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key,
                                               "--curve-server-key", ctl_key + ".pub",
                                               "--curve-clients", str(hosts)])
    ns = [fleet.nginx(h, "z1", col, BUCKETS, extra=curve_lines(k, col_key + ".pub"))
          for h, k in (("h1", h1_key), ("h2", h2_key))]
    load = f.Load([(ns[0], 2), (ns[1], 1)], "150:20", "/g/x")
    ctx = zmq.Context()
    try:
        f.wait_nginx_bucket(ns, "g", lambda b: b["ratio_state"] == "active" and
                            abs(b["ratio"] - 1 / 3) < 0.05, 15)
        forger = ctx.socket(zmq.PUSH)
        forger.setsockopt(zmq.LINGER, 0)
        forger.curve_secretkey = h2_keys["secret-key"]
        forger.curve_publickey = h2_keys["public-key"]
        forger.curve_serverkey = col_keys["public-key"]
        forger.connect(col.report)
        for seq in range(1, 9):
            forger.send(msgpack.packb({
                "v": 1, "type": "report", "ts_ms": int(time.time() * 1000), "seq": seq,
                "host": "h1", "zone": "z1", "region": "r1", "epoch": 999, "interval_ms": 60000,
                "reports_dropped": 0,
                "buckets": [{"name": "g", "scope": "global", "mode": "deny", "limit_mrps": 100000,
                             "offered": 10**6 * seq, "admitted": 0, "dropped": 0, "shadow_dropped": 0}]}))
            time.sleep(0.25)
        m = col.metrics()
        assert f.metric(m, "grl_collector_reports_refused_total",
                        reason="key_bound_to_another_name") >= 8, m
        assert "refused a report for host h1 from key %s" % h2_keys["public-key"].decode() in col.log()
        for n in ns:
            b = n.bucket("g")
            assert b["ratio_state"] == "active" and abs(b["ratio"] - 1 / 3) < 0.05, (n.host, b)
    finally:
        load.stop()
        ctx.destroy(linger=0)
