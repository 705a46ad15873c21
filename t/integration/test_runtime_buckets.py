"""Run-time (emergency) buckets: defined by an instruction entry's `match`,
counted and reported like configured ones, removed when their ratio expires
(docs/protocol.md, "Optional key of an instruction entry")."""

import time

import grl_harness as h
from grl_harness import bucket_entry


def runtime_entry(name, ratio_ppm, procedure="", procedure_kind="prefix", caller="",
                  caller_kind="exact", scope="global", mode="deny"):
    e = bucket_entry(name, ratio_ppm, mode=mode)
    e["match"] = {"caller": caller, "caller_kind": caller_kind, "procedure": procedure,
                  "procedure_kind": procedure_kind, "scope": scope}
    return e


def test_runtime_bucket_lifecycle(nginx_factory, publisher, collector):
    n = nginx_factory(h.grl_conf(["conf procedure=/conf rate=1r/s"], publisher=publisher,
                                 collector=collector, ttl="1s",
                                 extra="grl_caller $http_x_caller;"))
    publisher.set([runtime_entry("emerg", 1000000, procedure="/hot/"),
                   runtime_entry("who", 0, caller="bot-", caller_kind="prefix", procedure="^/rx/[0-9]+$",
                                 procedure_kind="regex", scope="region"),
                   # A configured bucket of that name wins: its `match` is ignored.
                   runtime_entry("conf", 1000000, procedure="/", procedure_kind="prefix")])
    h.wait_ratio(n, "emerg", 1.0)
    h.wait_ratio(n, "who", 0.0)
    st = {b["name"]: b for b in n.status()["buckets"]}
    assert [b for b in st] == ["conf", "emerg", "who"], st
    assert (st["conf"]["runtime"], st["emerg"]["runtime"], st["who"]["runtime"]) == (False, True, True)
    assert st["who"]["scope"] == "region"

    assert all(r.status == 429 for r in n.blast("/hot/x", 30))
    assert all(r.status == 200 for r in n.blast("/cold", 30)), "the configured bucket's own match applies"
    assert all(r.status == 429 for r in n.blast("/conf", 5))
    assert n.get("/rx/12", {"X-Caller": "bot-7"}).status == 200
    assert n.get("/rx/12", {"X-Caller": "human"}).status == 200
    st = {b["name"]: b for b in n.status()["buckets"]}
    assert (st["emerg"]["offered"], st["emerg"]["dropped"]) == (30, 30)
    assert (st["conf"]["offered"], st["conf"]["dropped"]) == (5, 5)
    assert st["who"]["offered"] == 1
    log = [e for e in n.access_log() if e["uri"].startswith(("/hot", "/cold", "/rx"))]
    assert {(e["uri"], e["decision"], e["bucket"], e["buckets"]) for e in log} == {
        ("/hot/x", "drop", "emerg", "emerg"), ("/cold", "none", "-", "-"),
        ("/rx/12", "pass", "-", "who"), ("/rx/12", "none", "-", "-")}

    rep = collector.wait_for(lambda r: h.report_buckets(r).get("emerg", {}).get("offered") == 30, 5,
                             "a report with the run-time bucket's counts")
    assert [b["name"] for b in rep["buckets"]] == ["conf", "emerg", "who"]

    # The control plane stops defining it: removed at expiry, its traffic passes.
    publisher.clear()
    h.wait_until(lambda: [b["name"] for b in n.status()["buckets"]] == ["conf"], 5,
                 what="the run-time buckets to be removed after the TTL")
    assert all(r.status == 200 for r in n.blast("/hot/x", 30))
    assert {e["decision"] for e in n.access_log()[-30:]} == {"none"}
    h.wait_until(lambda: 'grl: run-time bucket "emerg" expired and was removed' in n.error_log(), 3,
                 what="the removal log line")
    collector.wait_for(lambda r: [b["name"] for b in r["buckets"]] == ["conf"], 5,
                       "a report without the removed run-time buckets")
    time.sleep(0.3)
    assert n.error_log().count('run-time bucket "emerg" expired') == 1
