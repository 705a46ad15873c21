"""Hosts with their own addresses on this machine: network namespaces joined by
veth pairs (`ip netns`, `ip link`), for tests that need a real network between
processes (a partition, a bind beyond loopback) rather than a mock.

Every namespace of a run is named grlt-<pid>-<n>, so two runs never collide and
a namespace left by a run that was killed (its pid gone) is deleted by the next
run's sweep. Deleting a namespace deletes the veth ends in it, and with them
their peers. Addresses are 10.77.<octet>.0/24, an octet no interface of the
root namespace uses yet (another run's links are in the root namespace too).
"""

import itertools
import os
import re
import subprocess
import time

PREFIX = "grlt-"
# Across every Netns of the process: the kernel destroys a deleted namespace's links
# a moment later, so a name is never reused within a run.
_serial = itertools.count(1)


def ip(*args, ns=None, check=True):
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    if check and p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(cmd), p.returncode,
                                                     p.stderr.decode(errors="replace").strip()))
    return p


def unavailable():
    """Why namespaces cannot be used here (None if they can): not root, no `ip`,
    or `ip netns add` refused (a container without CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return "network namespaces need root (euid %d)" % os.geteuid()
    try:
        p = ip("netns", "add", "%sprobe-%d" % (PREFIX, os.getpid()), check=False)
    except FileNotFoundError:
        return "`ip` (iproute2) is not installed"
    if p.returncode != 0:
        return "`ip netns add` failed: %s" % p.stderr.decode(errors="replace").strip()
    ip("netns", "del", "%sprobe-%d" % (PREFIX, os.getpid()), check=False)
    return None


def sweep_leftovers():
    """Deletes the namespaces of runs whose process is gone, and those of this pid
    (a run's pid reused, or a Netns not closed)."""
    out = ip("netns", "list", check=False).stdout.decode()
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(r"^%s(?:probe-)?(\d+)(?:-|$)" % PREFIX, name)
        if m and (int(m.group(1)) == os.getpid() or not os.path.exists("/proc/%s" % m.group(1))):
            ip("netns", "del", name, check=False)


def _used_octets():
    out = ip("-4", "-o", "addr", "show", check=False).stdout.decode()
    return {int(x) for x in re.findall(r"inet 10\.77\.(\d+)\.", out)}


class Netns:
    """The namespaces and links of one test; close() deletes them all (call it
    in a finally or a fixture's teardown)."""

    def __init__(self):
        sweep_leftovers()
        self.names = []
        self.octets_taken = set()

    def _octet(self):
        used = _used_octets() | self.octets_taken
        for o in range(1, 255):
            if o not in used:
                self.octets_taken.add(o)
                return o
        raise AssertionError("no free 10.77.x.0/24 subnet left in the root namespace")

    def _ifname(self):
        # At most 15 characters: g<pid>-<n> plus the side.
        return "g%d-%d" % (os.getpid() % 10000000, next(_serial))

    def add(self):
        """A new namespace with its loopback up; returns its name."""
        name = "%s%d-%d" % (PREFIX, os.getpid(), next(_serial))
        ip("netns", "add", name)
        self.names.append(name)
        ip("link", "set", "lo", "up", ns=name)
        return name

    def link(self, a, b):
        """A veth pair between namespaces a and b (None: the root namespace), with
        10.77.<o>.1 on a's end and 10.77.<o>.2 on b's. Returns (a's address, b's
        address, a's interface, b's interface)."""
        o = self._octet()
        base = self._ifname()
        ends = (base + "a", base + "b")
        for attempt in range(20):
            # A swept namespace's links (same names if our pid was reused) go a moment later.
            p = ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1], check=attempt == 19)
            if p.returncode == 0:
                break
            time.sleep(0.1)
        addrs = ("10.77.%d.1" % o, "10.77.%d.2" % o)
        for ns, end, addr in ((a, ends[0], addrs[0]), (b, ends[1], addrs[1])):
            if ns is not None:
                ip("link", "set", end, "netns", ns)
            ip("addr", "add", addr + "/24", "dev", end, ns=ns)
            ip("link", "set", end, "up", ns=ns)
        return addrs[0], addrs[1], ends[0], ends[1]

    def route(self, ns, dest, via):
        ip("route", "add", dest, "via", via, ns=ns)

    def set_link(self, ns, ifname, up):
        """Takes a link down (both ends lose carrier: nothing crosses it, the
        processes on either side run on) or up again."""
        ip("link", "set", ifname, "up" if up else "down", ns=ns)

    def exec_cmd(self, ns, argv):
        """argv run inside namespace ns (`ip netns exec` execs it: same pid)."""
        return ["ip", "netns", "exec", ns] + list(argv)

    def close(self):
        for name in reversed(self.names):
            ip("netns", "del", name, check=False)
        self.names = []
