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
    # Tests that assert how fast the loop answers run alone, in the integration_fleet_timing
    # suite (t/CMakeLists.txt), never beside another fleet under load.
    config.addinivalue_line("markers", "timing: asserts a duration; runs in the timing suite")
    for path, what in ((h.NGINX, "GRL_NGINX"), (h.MODULE, "GRL_MODULE")):
        if not os.path.exists(path):
            raise pytest.UsageError("%s: %s does not exist" % (what, path))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(autouse=True)
def processes_stay_healthy():
    """Every test fails when a process it started died, exited other than 0 on SIGTERM, or
    logged an [alert], an [emerg] or a sanitizer report after start-up, unless the test said
    it causes that on purpose (grl_harness.Health). Runs after every other fixture's teardown."""
    earlier = h.check_processes()  # from a wider fixture's teardown since the last test
    yield
    faults = earlier + h.check_processes()
    if faults:
        pytest.fail("a process this test started died or logged a fault:\n  " + "\n  ".join(faults),
                    pytrace=False)


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


def pytest_sessionfinish(session, exitstatus):
    """Faults found after the last test's own check (a wider fixture's teardown) fail the run."""
    faults = h.check_processes()
    if faults:
        print("\na process died or logged a fault after the last test:\n  " + "\n  ".join(faults))
        session.exitstatus = 1
