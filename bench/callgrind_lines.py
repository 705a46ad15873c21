#!/usr/bin/python3
"""Instructions per request by source line of the module's functions, from a callgrind file of
bench/instructions_per_request.py --keep --instr (per-instruction counts): callgrind's own
line attribution is lost for the module, and callgrind_annotate shows functions only. Counts
are self (a call's callee is not included); each instruction address of the .so is mapped to
its line by `objdump -dl` of the same build.

Usage: bench/callgrind_lines.py CALLGRIND_FILE MODULE_SO REQUESTS FUNCTION_SUBSTRING...
  e.g. bench/callgrind_lines.py /tmp/grl-ipr-x/callgrind.out-01 \\
       build/ngx_module/ngx_http_grl_module.so 10000 preaccess_handler Matcher
"""
import collections
import re
import subprocess
import sys


def self_cost_by_address(path, wanted):
    names = {}
    fn = None
    addr = 0
    after_call = False
    cost = collections.Counter()
    for line in open(path):
        line = line.rstrip("\n")
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3):
                names[m.group(2)] = m.group(3)
            if m.group(1) == "fn":
                fn = names.get(m.group(2), "")
            continue
        if re.match(r"^c?(fi|fe|fl|ob|cob|cfi|cfl)=", line):
            continue
        if line.startswith("calls="):
            after_call = True  # the next cost line is the call's inclusive cost
            continue
        tok = line.split()
        if not tok or not re.match(r"^(0x[0-9a-f]+|[+-]\d+|\*)$", tok[0]):
            continue
        t = tok[0]  # positions: instr line; addresses may be relative to the previous one
        if t.startswith("+"):
            addr += int(t[1:])
        elif t.startswith("-"):
            addr -= int(t[1:])
        elif t != "*":
            addr = int(t, 16)
        if after_call:
            after_call = False
            continue
        if fn and any(w in fn for w in wanted) and len(tok) >= 3:
            cost[addr] += int(tok[2])
    return cost


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    path, so, requests, wanted = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    cost = self_cost_by_address(path, wanted)
    dis = subprocess.run(["objdump", "-dl", "--no-show-raw-insn", so], capture_output=True,
                         text=True, check=True).stdout
    where = None
    by_line = collections.Counter()
    for line in dis.splitlines():
        m = re.match(r"^(/\S+):(\d+)", line)
        if m:
            where = "%s:%s" % (m.group(1).split("/")[-1], m.group(2))
            continue
        m = re.match(r"^\s+([0-9a-f]+):", line)
        if m and int(m.group(1), 16) in cost:
            by_line[where] += cost[int(m.group(1), 16)]
    print("self, per request: %.1f" % (sum(cost.values()) / requests))
    for where, c in by_line.most_common(40):
        print("%7.1f  %s" % (c / requests, where))


if __name__ == "__main__":
    main()
