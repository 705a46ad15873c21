"""grl beside the rest of nginx (issue 11, section 5): it sees the request as
limit_req does — after realip (PROXY protocol, X-Forwarded-For at location
level) and after limit_req in the preaccess phase — never freezes $remote_addr
for the modules after it, and counts a request once across internal redirects,
error_page, auth_request and mirror subrequests."""

import socket

import grl_harness as h

BUCKETS = ["client caller=192.0.2.1 rate=1000r/s",
           "client6 caller=2001:db8::1 rate=1000r/s",
           "balancer caller=127.0.0.1 rate=1000r/s",
           "ir procedure_prefix=/ir/ rate=1000r/s",
           "ep procedure_prefix=/ep/ rate=1000r/s",
           "ar procedure_prefix=/ar rate=1000r/s",
           "mi procedure_prefix=/mi rate=1000r/s",
           "lr procedure_prefix=/lr rate=1000r/s"]


def conf(pp_port, port):
    return h.grl_conf(BUCKETS) + """
grl_caller $remote_addr;
limit_req_zone $binary_remote_addr zone=lr:1m rate=1r/m;
log_format rp 'uri=$uri remote=$remote_addr decision=$grl_decision buckets=$grl_buckets status=$status';
server {{
    listen 127.0.0.1:{pp} proxy_protocol;
    access_log {{prefix}}/rp.log rp;
    location /pp {{
        real_ip_header proxy_protocol;
        set_real_ip_from 127.0.0.1;
        set_real_ip_from ::1;
        grl on;
        add_header X-Remote $remote_addr always;
        empty_gif;
    }}
}}
server {{
    listen 127.0.0.1:{port};
    access_log {{prefix}}/rp.log rp;
    grl on;
    location /xff {{
        real_ip_header X-Forwarded-For;
        set_real_ip_from 127.0.0.1;
        add_header X-Remote $remote_addr always;
        empty_gif;
    }}
    # try_files redirects internally after grl decided (content phase).
    location /ir/a {{ try_files /nonexistent /ir/b; }}
    location /ir/b {{ empty_gif; }}
    # A missing static file: 404, error_page redirects to a location where grl is on too.
    location /ep/a {{ root {{prefix}}; error_page 404 = /ep/b; }}
    location /ep/b {{ empty_gif; }}
    location /ar {{ auth_request /auth; empty_gif; }}
    location = /auth {{ empty_gif; }}
    location /mi {{ mirror /mirrored; empty_gif; }}
    location = /mirrored {{ empty_gif; }}
    location /lr {{ limit_req zone=lr nodelay; empty_gif; }}
}}
""".format(pp=pp_port, port=port)


def proxied_get(port, path, src, proto="TCP4", dst="127.0.0.1"):
    """One request behind a PROXY protocol v1 header claiming client `src`."""
    req = ("PROXY %s %s %s 40000 80\r\nGET %s HTTP/1.0\r\nHost: localhost\r\n\r\n"
           % (proto, src, dst, path)).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(req)
        raw = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            raw += b
    head = raw.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in head[1:])}
    return int(head[0].split()[1]), hdrs


def log_entries(n):
    with open(n.prefix + "/rp.log") as f:
        return [dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
                for line in f.read().splitlines()]


def offered(n):
    return {b["name"]: b["offered"] for b in n.status()["buckets"]}


def test_grl_counts_the_real_client_and_runs_once_per_request(nginx_factory):
    pp_port, port = h.free_port(), h.free_port()
    n = nginx_factory(start=False)
    n.write_conf(http_extra=conf(pp_port, port).replace("{prefix}", n.prefix))
    n.start()

    # PROXY protocol, realip at location level: the client, not the balancer.
    for _ in range(5):
        status, hdrs = proxied_get(pp_port, "/pp", "192.0.2.1")
        assert status == 200 and hdrs["x-remote"] == "192.0.2.1", (status, hdrs)
    status, hdrs = proxied_get(pp_port, "/pp", "2001:db8::1", "TCP6", "::1")
    assert status == 200 and hdrs["x-remote"] == "2001:db8::1", (status, hdrs)
    # X-Forwarded-For at location level.
    for _ in range(3):
        r = h.http_get(port, "/xff", {"X-Forwarded-For": "192.0.2.1"})
        assert r.status == 200 and r.headers["x-remote"] == "192.0.2.1", r

    # Internal redirects and subrequests: one count per client request.
    for path in ("/ir/a", "/ep/a", "/ar", "/mi"):
        for _ in range(4):
            assert h.http_get(port, path).status == 200, path
    # limit_req runs first: what it rejects, grl never sees.
    lr = [h.http_get(port, "/lr").status for _ in range(3)]
    assert lr == [200, 503, 503], lr

    got = offered(n)
    assert got["client"] == 8 and got["client6"] == 1, got
    # The balancer: only the direct requests (/ir, /ep, /ar, /mi, the admitted /lr).
    assert got["balancer"] == 17, got
    assert (got["ir"], got["ep"], got["ar"], got["mi"], got["lr"]) == (4, 4, 4, 4, 1), got

    log = log_entries(n)
    by_uri = {}
    for e in log:
        by_uri.setdefault(e["uri"], []).append(e)
    # The access log (after every module) shows the client, and grl's record of it.
    assert sorted((e["remote"], e["buckets"]) for e in by_uri["/pp"]) == \
        sorted([("192.0.2.1", "client")] * 5 + [("2001:db8::1", "client6")]), by_uri["/pp"]
    assert {(e["remote"], e["buckets"]) for e in by_uri["/xff"]} == {("192.0.2.1", "client")}
    # The decision survives the internal redirect (logged under the final $uri).
    assert {(e["decision"], e["buckets"]) for e in by_uri["/ir/b"]} == {("pass", "balancer,ir")}
    assert {(e["decision"], e["buckets"]) for e in by_uri["/ep/b"]} == {("pass", "balancer,ep")}
    assert len(by_uri["/ar"]) == 4 and len(by_uri["/mi"]) == 4


def test_without_grl_variables_a_redirected_request_is_still_counted_once(nginx_factory):
    """No $grl_* variable named anywhere: no per-request record is allocated, and the
    marker left in its place still stops a second count after an internal redirect."""
    n = nginx_factory(start=False)
    n.write_raw_conf("""
load_module {module};
worker_processes 2;
daemon off;
error_log {prefix}/error.log info;
pid {prefix}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log {prefix}/plain.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    {grl}
    server {{
        listen 127.0.0.1:{port};
        location = /grl {{ grl_status; }}
        location /ir/a {{ grl on; try_files /nonexistent /ir/b; }}
        location /ir/b {{ grl on; empty_gif; }}
    }}
}}
""".format(module=h.MODULE, prefix=n.prefix, port=n.port,
           grl=h.grl_conf(["ir procedure_prefix=/ir/ rate=1000r/s"]).replace("\n", "\n    ")))
    n._start(10)
    for _ in range(5):
        assert h.http_get(n.port, "/ir/a").status == 200
    assert offered(n)["ir"] == 5
