"""grl-rlc's history commands as an operator runs them (no fleet needed):
synth is reproducible for a seed and writes the shape asked for; a bad CSV
is refused with file, line and field and changes nothing in the store; a good
one is imported (twice is the same as once); prune keeps the retention; and
readers see the store while it is written."""

import os
import sqlite3
import subprocess

import fleet as f

RLC_BIN = os.path.join(f.BUILD_DIR, "rlc", "grl-rlc")
END = "2026-11-30T00:00:00Z"
END_S = 1795996800  # the same in unix seconds


def rlc(*args):
    p = subprocess.run([RLC_BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def query(store, sql, *params):
    db = sqlite3.connect(store)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def dump(store):
    return query(store, "SELECT * FROM history ORDER BY bucket, scope, region, zone, start")


def test_synth_is_reproducible_and_has_the_shape_asked_for(tmp_path):
    d = str(tmp_path)
    a, b = os.path.join(d, "a.db"), os.path.join(d, "b.db")
    args = ["--bucket", "api", "--scope", "zone", "--region", "eu", "--zone", "az1", "--weeks", "2",
            "--base", "200", "--end", END, "--limit", "250", "--spike", "3:14:4", "--gap", "5:6:2"]
    for store in (a, b):
        rc, out, err = rlc("synth", "--store", store, *args)
        assert rc == 0, err
    assert "1 bucket(s), %d samples" % (2 * 7 * 1440 - 120) in out, out
    assert dump(a) == dump(b)  # same seed, same history
    rc, _, err = rlc("synth", "--store", b, "--seed", "2", *args)
    assert rc == 0, err
    assert dump(a) != dump(b)

    day0 = END_S - 14 * 86400
    rows = query(a, "SELECT s.start_s, s.offered_mean_mrps, s.offered_peak_mrps, s.admitted_peak_mrps,"
                    " s.dropped_mean_mrps, s.limit_mrps FROM samples s JOIN instances i ON i.id = s.instance"
                    " WHERE i.bucket = 'api' AND i.scope = 'zone' AND i.region = 'eu' AND i.zone = 'az1'")
    by = {r[0]: r for r in rows}
    spike = day0 + 3 * 86400 + 14 * 3600
    # 4x the same hour of the day before (whose weekly factor differs by at most 1.2/0.8)
    assert by[spike][1] > 2.5 * by[spike - 86400][1], (by[spike], by[spike - 86400])
    gap = day0 + 5 * 86400 + 6 * 3600
    assert not any(gap <= t < gap + 7200 for t in by)
    assert gap - 60 in by and gap + 7200 in by
    for t, mean, peak, admitted_peak, dropped, limit in rows:
        assert peak >= mean and admitted_peak <= 250000 and limit == 250000
    assert any(r[4] > 0 for r in rows)  # the spike is over the limit: drops


def test_a_bad_csv_changes_nothing_and_names_file_line_field(tmp_path):
    d = str(tmp_path)
    store = os.path.join(d, "h.db")
    rc, _, err = rlc("synth", "--store", store, "--bucket", "api", "--weeks", "1", "--end", END)
    assert rc == 0, err
    before = dump(store)
    good = os.path.join(d, "good.csv")
    with open(good, "w") as fh:
        fh.write("bucket,scope,region,zone,start,offered_mean,offered_peak,limit,mode\n"
                 "new,region,eu,,2026-11-29T10:00:00Z,10,12,20r/s,shadow\n"
                 "new,region,eu,,2026-11-29T10:01:00Z,11,15,20r/s,shadow\n")
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as fh:
        fh.write("bucket,start,offered_mean,offered_peak\n"
                 "api,2026-11-29T10:00:00Z,1,2\n"
                 "api,2026-11-29T10:01:00Z,1,abc\n")
    rc, out, err = rlc("import", "--store", store, good, bad)
    assert rc == 1, (out, err)
    assert '%s:3: field "offered_peak": "abc" is not a number (nothing imported)' % bad in err, err
    assert dump(store) == before  # not even the good file

    rc, out, err = rlc("import", "--store", store, good)
    assert rc == 0, err
    assert "2 samples of 1 instance(s)" in out, out
    once = dump(store)
    rc, out, err = rlc("import", "--store", store, good)
    assert rc == 0 and dump(store) == once  # importing twice changes nothing
    new = [r for r in once if r[0] == "new"]
    assert [r[:5] for r in new] == [("new", "region", "eu", "", "2026-11-29T10:00:00Z"),
                                    ("new", "region", "eu", "", "2026-11-29T10:01:00Z")]
    assert new[1][8] == 15.0 and new[1][15] == 20.0 and new[1][16] == "shadow", new


def test_prune_keeps_the_retention_and_readers_see_a_store_being_written(tmp_path):
    d = str(tmp_path)
    store = os.path.join(d, "h.db")
    rc, _, err = rlc("synth", "--store", store, "--bucket", "api", "--weeks", "2")  # ends now
    assert rc == 0, err
    rc, out, err = rlc("prune", "--store", store, "--retention", "7d")
    assert rc == 0, err
    n = query(store, "SELECT count(*), min(start_s) FROM samples")[0]
    assert abs(n[0] - 7 * 1440) <= 2, n
    rc, _, err = rlc("prune", "--store", store, "--retention", "7x")
    assert rc == 2 and 'invalid span "7x"' in err, err
    rc, _, err = rlc("prune", "--store", os.path.join(d, "missing.db"))
    assert rc == 1 and "missing.db does not exist" in err, err

    # A reader holding a read transaction open does not stop a writer, and sees its
    # snapshot until it ends (WAL).
    reader = sqlite3.connect(store, isolation_level=None)
    reader.execute("BEGIN")
    seen = reader.execute("SELECT count(*) FROM samples").fetchone()[0]
    rc, _, err = rlc("synth", "--store", store, "--bucket", "other", "--weeks", "1")
    assert rc == 0, err
    assert reader.execute("SELECT count(*) FROM samples").fetchone()[0] == seen
    reader.execute("COMMIT")
    assert reader.execute("SELECT count(*) FROM samples").fetchone()[0] == seen + 7 * 1440
    reader.close()
