#!/usr/bin/env python3
"""docker/: compose.yaml and the Dockerfile, checked without a Docker engine.

- `docker-compose -f docker/compose.yaml config` accepts the file (Debian's docker-compose 1.29);
- every bind-mounted file exists, and the configuration the loopback fleet tests is what compose
  mounts: the nginx with the module mount conf/fleet/grl-buckets.conf and grl-locations.conf
  (which conf/fleet/run-fleet.py includes), the controllers conf/fleet/limits.yaml, Prometheus
  conf/prometheus/grl-alerts.yml; every service has a healthcheck;
- Debian's nginx passes `nginx -t` with docker/nginx/nginx.conf and each zone file (the module
  from the build directory, container paths mapped to the repository's files);
- promtool check config accepts docker/prometheus.yml with the shared alert rules;
- the Dockerfile (no hadolint in Debian): its stages, COPY sources, compose's build targets and
  the CMake targets it builds exist.
Files other branches add (conf/prometheus/grl-alerts.yml, conf/grafana/...) are reported when
missing, not failed: compose mounts them at the paths agreed for them.
Usage: test_compose.py BUILD_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = os.path.join(ROOT, "docker")
COMPOSE = os.path.join(DOCKER, "compose.yaml")
OTHERS = ("conf/prometheus/", "conf/grafana/")  # written on other branches
failures = []


def bad(msg):
    failures.append(msg)
    print("test_compose: FAILED: " + msg)


def rel(path):
    return os.path.relpath(path, ROOT)


def compose_config():
    exe = shutil.which("docker-compose")
    if not exe:
        print("test_compose: SKIPPED: no docker-compose (apt-get install docker-compose)")
        sys.exit(77)
    p = subprocess.run([exe, "-f", COMPOSE, "config"], capture_output=True, text=True)
    if p.returncode != 0:
        bad("docker-compose config: " + p.stderr.strip())
        sys.exit(1)
    return yaml.safe_load(p.stdout)


def mounts(svc):
    """{container path: repository-relative source} of a service's bind mounts."""
    out = {}
    for v in svc.get("volumes", []):
        if isinstance(v, dict):
            if v.get("type") == "bind":
                out[v["target"]] = rel(v["source"])
        else:
            src, dst = v.split(":")[:2]
            if src.startswith("/"):
                out[dst] = rel(src)
    return out


def check_services(cfg):
    services = cfg["services"]
    want = {"backend", "controller-a", "controller-b", "collector-zone-a", "collector-zone-b",
            "nginx-zone-a-1", "nginx-zone-a-2", "nginx-zone-b-1", "nginx-zone-b-2", "rlc",
            "prometheus", "grafana"}
    if set(services) != want:
        bad("services %s, expected %s" % (sorted(services), sorted(want)))
    for name, svc in services.items():
        if "healthcheck" not in svc:
            bad("service %s has no healthcheck" % name)
        for dst, src in mounts(svc).items():
            if not os.path.exists(os.path.join(ROOT, src)):
                if src.startswith(OTHERS):
                    print("test_compose: note: %s mounts %s, not in this tree yet (another branch)"
                          % (name, src))
                else:
                    bad("service %s mounts %s at %s: no such file" % (name, src, dst))
    shared = {"/etc/grl/grl-buckets.conf": "conf/fleet/grl-buckets.conf",
              "/etc/grl/grl-locations.conf": "conf/fleet/grl-locations.conf"}
    for name in (n for n in services if n.startswith("nginx-zone-")):
        m = mounts(services[name])
        for dst, src in shared.items():
            if m.get(dst) != src:
                bad("%s mounts %s at %s, not the loopback fleet's %s" % (name, m.get(dst), dst, src))
        zone = re.match(r"nginx-(zone-[ab])-", name).group(1)
        if m.get("/etc/grl/host.conf") != "docker/nginx/%s.conf" % zone:
            bad("%s: /etc/grl/host.conf is %s" % (name, m.get("/etc/grl/host.conf")))
    for name in ("controller-a", "controller-b"):
        if mounts(services[name]).get("/etc/grl/limits.yaml") != "conf/fleet/limits.yaml":
            bad("%s does not read conf/fleet/limits.yaml" % name)
    if mounts(services["prometheus"]).get("/etc/prometheus/grl-alerts.yml") != "conf/prometheus/grl-alerts.yml":
        bad("prometheus does not mount conf/prometheus/grl-alerts.yml")
    with open(os.path.join(ROOT, "conf", "fleet", "run-fleet.py")) as fh:
        fleet = fh.read()
    for f in ("grl-buckets.conf", "grl-locations.conf"):
        if "include {conf}/%s;" % f not in fleet:
            bad("conf/fleet/run-fleet.py does not include %s: the loopback fleet tests something else" % f)
    for f in ("limits.yaml", "rlc.yaml"):
        if 'os.path.join(HERE, "%s")' % f not in fleet:
            bad("conf/fleet/run-fleet.py does not read conf/fleet/%s" % f)
    return services


def check_nginx(build):
    module = os.path.join(build, "ngx_module", "ngx_http_grl_module.so")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    with open(os.path.join(DOCKER, "nginx", "nginx.conf")) as fh:
        conf = fh.read()
    for zone in ("zone-a", "zone-b"):
        d = tempfile.mkdtemp(prefix="grl-compose-nginx-")
        try:
            c = conf.replace("include /etc/nginx/modules-enabled/*.conf;", "load_module %s;" % module)
            c = c.replace("/etc/grl/host.conf", os.path.join(DOCKER, "nginx", zone + ".conf"))
            c = c.replace("/etc/grl/", os.path.join(ROOT, "conf", "fleet") + "/")
            c = c.replace("pid /run/nginx.pid;", "pid %s/nginx.pid;" % d)
            c = c.replace("user www-data;", "")
            # nginx -t resolves upstream names and binds listeners: not compose's here
            c = c.replace("server backend:80;", "server 127.0.0.1:9;")
            c = c.replace("listen 80 reuseport;", "listen unix:%s/t.sock;" % d)
            c = c.replace("http {", "http {\n    client_body_temp_path %s/b; proxy_temp_path %s/p;"
                          " fastcgi_temp_path %s/f; uwsgi_temp_path %s/u; scgi_temp_path %s/s;"
                          % ((d,) * 5), 1)
            for needle in ("/etc/", "backend:80", "listen 80"):
                if needle in c:
                    bad("docker/nginx/nginx.conf: %r left after mapping the container paths" % needle)
            path = os.path.join(d, "nginx.conf")
            with open(path, "w") as fh:
                fh.write(c)
            p = subprocess.run([nginx, "-t", "-p", d + "/", "-e", os.path.join(d, "error.log"), "-c", path],
                               capture_output=True, text=True)
            if p.returncode != 0:
                bad("nginx -t of docker/nginx/nginx.conf with %s.conf:\n%s" % (zone, p.stderr))
            else:
                print("test_compose: nginx -t of docker/nginx/nginx.conf with %s.conf: ok" % zone)
        finally:
            shutil.rmtree(d, ignore_errors=True)


def check_prometheus():
    promtool = shutil.which("promtool")
    if not promtool:
        print("test_compose: note: no promtool, docker/prometheus.yml not checked")
        return
    rules = os.path.join(ROOT, "conf", "prometheus", "grl-alerts.yml")
    with open(os.path.join(DOCKER, "prometheus.yml")) as fh:
        cfg = yaml.safe_load(fh)
    if cfg.get("rule_files") != ["/etc/prometheus/grl-alerts.yml"]:
        bad("docker/prometheus.yml loads %s, not the shared alert rules" % cfg.get("rule_files"))
    if os.path.exists(rules):
        cfg["rule_files"] = [rules]
    else:
        print("test_compose: note: conf/prometheus/grl-alerts.yml not in this tree yet; "
              "docker/prometheus.yml checked without rules")
        cfg["rule_files"] = []
    jobs = {j["job_name"] for j in cfg["scrape_configs"]}
    if jobs != {"grl-nginx", "grl-collector", "grl-controller"}:
        bad("docker/prometheus.yml jobs %s" % sorted(jobs))
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as fh:
        yaml.safe_dump(cfg, fh)
        fh.flush()
        p = subprocess.run([promtool, "check", "config", fh.name], capture_output=True, text=True)
    if p.returncode != 0:
        bad("promtool check config docker/prometheus.yml:\n" + p.stdout + p.stderr)
    else:
        print("test_compose: promtool check config docker/prometheus.yml: ok")


def check_dockerfile(services):
    path = os.path.join(DOCKER, "Dockerfile")
    with open(path) as fh:
        text = fh.read().replace("\\\n", " ")
    stages = []
    targets = set()
    for dirpath, _, files in os.walk(ROOT):
        if "/build" in dirpath or "/.git" in dirpath:
            continue
        if "CMakeLists.txt" in files:
            with open(os.path.join(dirpath, "CMakeLists.txt")) as fh:
                targets |= set(re.findall(r"add_(?:executable|library)\(\s*([\w-]+)", fh.read()))
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "FROM":
            m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line)
            if not m:
                bad("Dockerfile: %r: every stage needs a name" % line)
                continue
            if m.group(1) in stages:
                bad("Dockerfile: stage %s twice" % m.group(1))
            stages.append(m.group(1))
        elif words[0] == "COPY":
            frm = [w for w in words if w.startswith("--from=")]
            if frm and frm[0][7:] not in stages:
                bad("Dockerfile: %r: no earlier stage %s" % (line, frm[0][7:]))
            if not frm:
                for src in [w for w in words[1:-1] if not w.startswith("--")]:
                    if not os.path.exists(os.path.join(ROOT, src)):
                        bad("Dockerfile: COPY %s: not in the build context (the repository)" % src)
        elif words[0] == "RUN" and "--target" in words:
            for t in words[words.index("--target") + 1:]:
                if t.startswith("&&"):
                    break
                if t not in targets:
                    bad("Dockerfile builds target %s, which no CMakeLists.txt defines" % t)
    for f in re.findall(r"bash (\S+\.sh)", text):
        if not os.path.exists(os.path.join(ROOT, f)):
            bad("Dockerfile runs %s: no such file" % f)
    for name, svc in services.items():
        b = svc.get("build")
        if b:
            if b.get("target") not in stages:
                bad("service %s builds target %s: no such stage in docker/Dockerfile" % (name, b.get("target")))
            if os.path.realpath(b["context"]) != os.path.realpath(ROOT):
                bad("service %s: build context %s is not the repository" % (name, b["context"]))
    print("test_compose: Dockerfile stages %s" % ", ".join(stages))


def main():
    build = os.path.abspath(sys.argv[1])
    cfg = compose_config()
    services = check_services(cfg)
    check_nginx(build)
    check_prometheus()
    check_dockerfile(services)
    if failures:
        return 1
    print("test_compose: docker/compose.yaml (%d services) and docker/Dockerfile checked" % len(services))
    return 0


if __name__ == "__main__":
    sys.exit(main())
