"""Limits from a secured etcd (Debian's real etcd-server): TLS with a certificate signed by a
CA made for the test (openssl), and etcd's own authentication (a root user with a password).
The controller reads and watches the key with --etcd-ca, --etcd-user and
--etcd-password-file; a wrong password, or no CA to verify the server with, is refused at
start as etcd being unreachable is (nginx.conf's limits apply, the controller retries), with a
warning naming what failed."""

import os
import shutil
import subprocess
import tempfile

import pytest

import fleet as f
import grl_harness as h
from fleet import fleet  # noqa: F401  (pytest fixture)

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
KEY = "grl/limits"
BUCKETS = ["g procedure_prefix=/g rate=200r/s"]


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


class SecureEtcd:
    """One etcd member serving https on 127.0.0.1 with authentication enabled."""

    def __init__(self):
        assert os.path.exists(ETCD), "etcd not installed (bash .ci/install-deps: etcd-server)"
        self.dir = tempfile.mkdtemp(prefix="grl-etcds-")
        d = self.dir
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-subj", "/CN=grl test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                "-keyout", "server.key", "-out", "server.csr", cwd=d)
        with open(os.path.join(d, "san.ext"), "w") as fh:
            fh.write("subjectAltName=IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem",
                cwd=d)
        self.ca = os.path.join(d, "ca.pem")
        self.port = h.free_port()
        peer = h.free_port()
        client = "https://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(d, "etcd.log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "grl-tls", "--data-dir", os.path.join(d, "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--cert-file", os.path.join(d, "server.pem"),
             "--key-file", os.path.join(d, "server.key"),
             "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
             "--initial-cluster", "grl-tls=http://127.0.0.1:%d" % peer],
            stdout=log, stderr=log)
        log.close()
        self.password = "pw-%d" % self.port
        self.password_file = os.path.join(d, "password")
        with open(self.password_file, "w") as fh:
            fh.write(self.password + "\n")

        def ready():
            assert self.proc.poll() is None, "etcd exited:\n" + open(self.log_path).read()[-3000:]
            return self.ctl("endpoint", "health", check=False).returncode == 0
        h.wait_until(ready, 20, interval=0.2, what="etcd (TLS) to answer")
        self.ctl("user", "add", "root:" + self.password)
        self.ctl("auth", "enable")

    def ctl(self, *args, check=True):
        env = dict(os.environ, ETCDCTL_API="3")
        cmd = [ETCDCTL, "--endpoints", "https://127.0.0.1:%d" % self.port, "--cacert", self.ca]
        if args[:2] != ("user", "add") and args[:1] != ("endpoint",) and args[:2] != ("auth", "enable"):
            cmd += ["--user", "root:" + self.password]
        p = subprocess.run(cmd + list(args), env=env, capture_output=True, text=True, timeout=20)
        if check:
            assert p.returncode == 0, (cmd + list(args), p.stdout, p.stderr)
        return p

    def put(self, value):
        self.ctl("put", KEY, value)

    @property
    def url(self):
        return "etcds://127.0.0.1:%d/%s" % (self.port, KEY)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def etcds():
    e = SecureEtcd()
    yield e
    e.close()


def test_limits_from_an_etcd_with_tls_and_a_password(fleet, etcds, tmp_path):  # noqa: F811
    etcds.put("version: 1\nbuckets:\n  g:\n    limit: 100r/s\n")
    access = ["--etcd-ca", etcds.ca, "--etcd-user", "root",
              "--etcd-password-file", etcds.password_file]
    ctl = fleet.controller(limits=etcds.url, extra=access)
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS)]
    fleet.wait_hosts(ctl, 1)
    f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100, 10)
    # The watch (with its own token) sees a new value.
    etcds.put("version: 2\nbuckets:\n  g:\n    limit: 60r/s\n")
    f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 60, 10)
    st = f.grlctl(ctl, "status")["limits"]
    assert st["file"] == etcds.url and st["version"] == "2" and st["store_error"] == "", st

    # A wrong password: the controller runs on nginx.conf's limits, says why, and retries.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    bad_pw = tmp_path / "bad"
    bad_pw.write_text("wrong\n")
    bad = f.Controller(name="ctl-badpw", limits=etcds.url, workdir=str(tmp_path / "a"),
                       extra=["--etcd-ca", etcds.ca, "--etcd-user", "root",
                              "--etcd-password-file", str(bad_pw)])
    fleet.add(bad)
    assert "user root cannot authenticate" in bad.log(), bad.log()
    assert "authentication failed, invalid user ID or password" in bad.log()
    assert f.metric(bad.metrics(), "grl_controller_limits_store_up") == 0

    # No CA to verify the server's certificate with: refused (the system's CAs do not know it).
    unverified = f.Controller(name="ctl-noca", limits=etcds.url, workdir=str(tmp_path / "b"),
                              extra=["--etcd-user", "root",
                                     "--etcd-password-file", etcds.password_file])
    fleet.add(unverified)
    line = [x for x in unverified.log().splitlines() if "etcd unreachable at start" in x]
    assert line and etcds.url in line[0], unverified.log()
    assert f.metric(unverified.metrics(), "grl_controller_limits_store_up") == 0


def test_etcd_options_are_checked(tmp_path):
    rc = subprocess.run([f.CONTROLLER_BIN, "--region", "r1", "--name", "c",
                         "--limits", "etcd://127.0.0.1:1/k", "--etcd-ca", "/x"],
                        capture_output=True, text=True)
    assert rc.returncode != 0 and "--etcd-ca and --etcd-cert need an etcds:// URL" in rc.stderr, rc.stderr
    rc = subprocess.run([f.CONTROLLER_BIN, "--region", "r1", "--name", "c",
                         "--limits", "etcds://127.0.0.1:1/k", "--etcd-user", "root"],
                        capture_output=True, text=True)
    assert rc.returncode != 0 and "--etcd-user and --etcd-password-file go together" in rc.stderr
    rc = subprocess.run([f.CONTROLLER_BIN, "--region", "r1", "--name", "c",
                         "--limits", "etcds://127.0.0.1:1/k", "--etcd-user", "root",
                         "--etcd-password-file", str(tmp_path / "none")],
                        capture_output=True, text=True)
    assert rc.returncode != 0 and "--etcd-password-file: cannot read password file" in rc.stderr
