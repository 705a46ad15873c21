"""Lifecycle: the module never delays a graceful shutdown (`nginx -s quit`),
whether or not a collector is there, and leaves no socket or alert behind."""

import signal
import time

import pytest

import grl_harness as h


@pytest.mark.parametrize("with_collector", [True, False])
def test_graceful_quit_is_not_delayed(nginx_factory, collector, publisher, with_collector):
    conf = h.grl_conf(["a procedure_prefix=/a rate=100r/s"], publisher=publisher,
                      collector=collector if with_collector else None,
                      collector_endpoint=None if with_collector else h.unused_endpoint())
    n = nginx_factory(conf)
    publisher.set([h.bucket_entry("a", 500000)])
    h.wait_ratio(n, "a", 0.5)
    n.blast("/a/x", 50)
    if with_collector:
        collector.wait_for(lambda r: True, 5)
    t0 = time.monotonic()
    n.proc.send_signal(signal.SIGQUIT)  # what `nginx -s quit` sends
    n.proc.wait(10)
    elapsed = time.monotonic() - t0
    # With no client connection open, nginx quits as soon as its workers see
    # the signal; the reporter's timer is cancelable and ZeroMQ closes with
    # linger 0. A module that kept a timer or a socket would hold it here.
    assert elapsed < 2.0, "graceful quit took %.2f s" % elapsed
    log = n.error_log()
    assert "[alert]" not in log, log[-2000:]
    assert "open socket" not in log, log[-2000:]
    assert "exited on signal" not in log, log[-2000:]
