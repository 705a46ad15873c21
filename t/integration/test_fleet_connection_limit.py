"""--max-connections (docs/security.md "Bounds"): each bound endpoint of a daemon holds at
most N connections; ZeroMQ accepts every TCP connection, so the daemon counts them from a
socket monitor and its ZAP handler refuses a new connection's handshake while the endpoint
is full, with CURVE (the key is listed) or without (NULL, ZAP domain set). Refusals are
counted, logged once per burst, and the connections the endpoint holds keep working. A
connection takes its slot at its handshake: bare TCP connections that never handshake are
pending, hold no slot, and are closed after the 2 s handshake interval."""

import select
import socket
import threading
import time

import zmq

import fleet as f
import test_fleet_curve as tc
from fleet import fleet  # noqa: F401  (pytest fixture)


def push(ctx, ep, keys=None, server_keys=None):
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 0)
    if keys:
        s.curve_serverkey = server_keys["public-key"]
        s.curve_publickey = keys["public-key"]
        s.curve_secretkey = keys["secret-key"]
    s.connect(ep)
    return s


def send(sock, message):
    try:
        sock.send(message, zmq.NOBLOCK)
    except zmq.Again:
        pass  # no connection (refused): nothing to queue on


def m(d, name, **labels):
    return f.metric(d.metrics(), name, **labels) or 0


def test_an_endpoint_holds_at_most_max_connections_and_its_peers_go_on(fleet):
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl], extra=["--max-connections", "3"])
    ctx = zmq.Context()
    try:
        held = [push(ctx, col.report) for _ in range(3)]
        seq = 0
        for _ in range(3):
            seq += 1
            for i, s in enumerate(held):
                send(s, tc.report("h%d" % (i + 1), seq))
            time.sleep(0.1)
        f.h.wait_until(lambda: m(col, "grl_collector_reports_total", result="first") == 3, 5,
                       what="the three hosts within the limit to be taken")
        assert m(col, "grl_connections", endpoint="report") == 3
        assert m(col, "grl_connections_max", endpoint="report") == 3

        # Three more: over the limit, their handshakes are refused.
        extra = [push(ctx, col.report) for _ in range(3)]
        f.h.wait_until(lambda: m(col, "grl_connections_refused_total", endpoint="report") >= 3, 5,
                       what="the connections over the limit to be refused")
        taken = sum(v for _, v in col.metrics()["grl_collector_reports_total"])
        for _ in range(4):
            seq += 1
            for i, s in enumerate(held):
                send(s, tc.report("h%d" % (i + 1), seq))
            for i, s in enumerate(extra):
                send(s, tc.report("x%d" % (i + 1), seq))
            time.sleep(0.1)
        # The held connections go on; the refused ones are counted nowhere.
        f.h.wait_until(lambda: sum(v for _, v in col.metrics()["grl_collector_reports_total"])
                       >= taken + 12, 5, what="the held connections' reports")
        assert m(col, "grl_collector_reports_total", result="first") == 3
        # A refused connection is closed after the 2 s handshake interval, and its client
        # connects again by itself, to be refused again while the endpoint is full.
        f.h.wait_until(lambda: m(col, "grl_connections_refused_total", endpoint="report") >= 6, 6,
                       what="the refused clients to try again and be refused again")
        log = col.log()
        line = "connection limit: report endpoint %s is full (--max-connections 3; " % col.report
        assert log.count(line) == 1, log[-3000:]  # once per burst
        assert "refusing new ones until some close; those it holds go on" in log
        # The other endpoint has its own count.
        assert m(col, "grl_connections_refused_total", endpoint="publish") == 0

        # One held connection closes: the endpoint takes one again, and says so.
        held[0].close()
        for s in extra:
            s.close()
        fresh = push(ctx, col.report)
        f.h.wait_until(lambda: "report endpoint %s takes connections again" % col.report
                       in col.log(), 5, what="the endpoint to take connections again")
        seq += 1
        send(fresh, tc.report("h9", seq))
        f.h.wait_until(lambda: m(col, "grl_collector_reports_total", result="first") == 4, 5,
                       what="the new connection's host to be taken")
    finally:
        ctx.destroy(0)


def test_a_listed_curve_key_is_refused_while_the_endpoint_is_full(fleet, tmp_path):
    ctl_key, ctl_keys = tc.keygen(tmp_path, "controller")
    col_key, col_keys = tc.keygen(tmp_path, "collector")
    _, spare_keys = tc.keygen(tmp_path, "spare")
    clients = tmp_path / "clients"
    clients.write_text("%s\n%s\n" % (col_keys["public-key"].decode(),
                                     spare_keys["public-key"].decode()))
    ctl = fleet.controller(extra=["--curve-keypair", ctl_key, "--curve-clients", str(clients),
                                  "--max-connections", "1"])
    col = fleet.collector("z1", [ctl], extra=["--curve-keypair", col_key,
                                               "--curve-server-key", ctl_key + ".pub"])
    ctx = zmq.Context()
    try:
        f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_zone_usage_age_seconds",
                                        zone="z1") is not None, 5, what="the collector's usage")
        spare = push(ctx, ctl.usage, spare_keys, ctl_keys)
        for _ in range(3):
            send(spare, tc.zone_usage("z2", 10))
            time.sleep(0.1)
        f.h.wait_until(lambda: m(ctl, "grl_connections_refused_total", endpoint="usage") >= 1, 5,
                       what="the listed key's connection over the limit to be refused")
        mm = ctl.metrics()
        # Not a key problem: no CURVE denial is counted for it.
        assert f.metric(mm, "grl_curve_handshakes_total", domain="collector", result="denied") is None
        assert f.metric(mm, "grl_controller_zone_usage_age_seconds", zone="z2") is None
        assert "connection limit: usage endpoint %s is full (--max-connections 1; " % ctl.usage \
            in ctl.log()
        # The collector's connection goes on.
        age = lambda: f.metric(ctl.metrics(), "grl_controller_zone_usage_age_seconds", zone="z1")  # noqa: E731
        time.sleep(1)
        assert age() < 1, age()
    finally:
        ctx.destroy(0)


def test_bare_tcp_connections_hold_no_slot(fleet):
    """A steady flood of TCP connections that send nothing (kept open, opened again when the
    collector closes them), more of them than --max-connections: a real nginx-like peer still
    connects and its reports are taken; the flood is counted as pending and logged."""
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl], extra=["--max-connections", "3"])
    host, port = col.report[len("tcp://"):].rsplit(":", 1)
    stop = threading.Event()
    opened = [0]

    def flood():
        bare = []
        while not stop.is_set():
            while len(bare) < 12:
                try:
                    bare.append(socket.create_connection((host, int(port)), timeout=1))
                    opened[0] += 1
                except OSError:
                    break
            readable, _, _ = select.select(bare, [], [], 0.05)
            for s in readable:  # the collector's greeting, or its close after 2 s
                try:
                    closed = s.recv(4096) == b""
                except OSError:
                    closed = True
                if closed:
                    s.close()
                    bare.remove(s)
        for s in bare:
            s.close()

    t = threading.Thread(target=flood, daemon=True)
    ctx = zmq.Context()
    try:
        t.start()
        f.h.wait_until(lambda: m(col, "grl_connections_pending", endpoint="report") > 3, 5,
                       what="the bare connections to outnumber --max-connections")
        peer = push(ctx, col.report)
        for seq in range(1, 30):
            send(peer, tc.report("h1", seq))
            time.sleep(0.1)
            if m(col, "grl_collector_reports_total", result="first") == 1:
                break
        assert m(col, "grl_collector_reports_total", result="first") == 1, col.log()[-3000:]
        assert m(col, "grl_connections", endpoint="report") == 1
        assert m(col, "grl_connections_refused_total", endpoint="report") == 0
        # The flood goes on past the handshake interval: its connections are closed and opened
        # again, and the peer's slot stays its own.
        f.h.wait_until(lambda: m(col, "grl_connections_unhandshaken_total", endpoint="report") >= 12,
                       6, what="the bare connections to be closed after 2 s")
        assert opened[0] > 12
        assert m(col, "grl_connections", endpoint="report") == 1
        assert ("connection limit: report endpoint %s has " % col.report) in col.log()
        assert ("connections that have not completed their handshake (more than --max-connections "
                "3): they hold no slot, and each is closed after 2 s") in col.log()
        stop.set()
        t.join(5)
        f.h.wait_until(lambda: m(col, "grl_connections_pending", endpoint="report") == 0, 6,
                       what="the pending connections to be gone")
    finally:
        stop.set()
        ctx.destroy(0)
