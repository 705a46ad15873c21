"""The harness's own checks bite: a process a test started that dies, or logs a fault, fails the
test at its end (grl_harness.Health, conftest.processes_stay_healthy), unless the test said it
causes that on purpose. Each case here calls the check the teardown calls and takes its faults,
so that this test passes when they are found."""

import os
import shutil
import signal

import grl_harness as h
import fleet as f


def test_a_daemon_that_crashes_is_a_fault():
    ctl = f.Controller().start()
    try:
        os.kill(ctl.proc.pid, signal.SIGSEGV)
        h.wait_until(lambda: ctl.proc.poll() is not None, 5, what="the controller to die")
        faults = h.check_processes()  # still registered: found as it ended by itself
        assert any("ended by itself" in x and "signal %d" % signal.SIGSEGV in x for x in faults), faults
    finally:
        ctl.stop()
        shutil.rmtree(ctl.dir, ignore_errors=True)
    assert h.check_processes() == []  # reported once


def test_a_daemon_that_exits_other_than_0_on_sigterm_is_a_fault_unless_expected():
    ctl = f.Controller().start()
    with open(ctl.log_path, "a") as log:  # what sanitizer builds write; a Lua error is no fault
        log.write("==4242==ERROR: LeakSanitizer: detected memory leaks\n"
                  "core/control/src/rates.cpp:120:17: runtime error: signed integer overflow\n"
                  "lua entry thread aborted: runtime error: content_by_lua(nginx.conf:84):4: x\n")
    ctl.stop()
    faults = h.check_processes()
    assert len(faults) == 2 and "LeakSanitizer" in faults[0] and "rates.cpp:120:17" in faults[1], faults

    ctl = f.Controller().start()
    ctl.expect_exit(-signal.SIGKILL)
    ctl.signal(signal.SIGKILL)
    h.wait_until(lambda: ctl.proc.poll() is not None, 5, what="the controller to die")
    assert ctl.stop() == -signal.SIGKILL
    assert h.check_processes() == []
    shutil.rmtree(ctl.dir, ignore_errors=True)


def test_an_nginx_worker_killed_is_a_fault_unless_the_test_says_so(nginx_factory):
    n = nginx_factory(h.grl_conf(["a procedure=/a rate=100r/s"]))
    [w1, w2] = n.worker_pids()
    os.kill(w1, signal.SIGKILL)  # not said: a crash
    n.kill_worker(w2)  # said
    h.wait_until(lambda: len(n.worker_pids()) == 2 and not {w1, w2} & set(n.worker_pids()), 10,
                 what="the master to replace both workers")
    n.stop()
    faults = h.check_processes()
    assert len(faults) == 1 and "worker process %d exited on signal 9" % w1 in faults[0], faults
