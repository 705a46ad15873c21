"""Fixtures of the grl integration tests (real nginx + the built module + real
ZeroMQ peers on loopback). See grl_harness.py for the helpers.

Environment (set by ctest; defaults for a local run):
  GRL_MODULE     path of ngx_http_grl_module.so
  GRL_NGINX      nginx binary (/usr/sbin/nginx)
  GRL_BUILD_DIR  build directory (informational)
"""

import os

import pytest
import zmq

import grl_harness as h


def pytest_configure(config):
    for path, what in ((h.NGINX, "GRL_NGINX"), (h.MODULE, "GRL_MODULE")):
        if not os.path.exists(path):
            raise pytest.UsageError("%s: %s does not exist" % (what, path))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture
def publisher(zctx):
    p = h.Publisher(zctx)
    yield p
    p.close()


@pytest.fixture
def collector(zctx):
    c = h.Collector(zctx)
    yield c
    c.close()


@pytest.fixture
def nginx_factory(request):
    """make(http_extra, location_extra=..., start=True) -> started Nginx.
    Every instance is stopped and its directory removed at teardown; when the
    test failed, the tail of its error log is printed first."""
    made = []

    def make(http_extra="", start=True, **kw):
        n = h.Nginx(http_extra=http_extra, **kw)
        made.append(n)
        if start:
            n.start()
        return n

    yield make
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for n in made:
        if failed:
            print("---- %s/error.log (tail) ----" % n.prefix)
            print(n.error_log()[-4000:])
        n.cleanup()
