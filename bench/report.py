#!/usr/bin/python3
"""Renders bench/results/REPORT.md, HEADLINE.md and the PNG plots from the experiments' JSON
results in bench/results/raw/ (request_path.json, redis_trouble.json, fleet.json, micro.json);
any of them may be missing.

Usage: bench/report.py [--results bench/results] [--command "..."] [--elapsed SECONDS]
"""
import argparse
import json
import os
import statistics

import benchlib as bl

PCTS = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p995", "p99.5"), ("p999", "p99.9")]
ORDER = ["plain", "limit_req", "grl", "redis"]
NAMES = {"plain": "no limiter", "limit_req": "limit_req", "grl": "grl",
         "redis": "Redis limiter"}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return f"{min(xs):.0f}–{max(xs):.0f}" if xs else "–"


def fmt(x, nd=0, unit=""):
    if x is None:
        return "–"
    return f"{x:,.{nd}f}{unit}"


def ms(us):
    return "–" if us is None else (f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs")


def rounds_txt(n):
    return f"{n} round" + ("" if n == 1 else "s")


def label_of(runs, variant):
    for r in runs:
        if r["variant"] == variant:
            return r["label"]
    return variant


# ---------------------------------------------------------------------------------------------
# Experiment 1


def request_path(res, out_dir, figs):
    runs = res["runs"]
    variants = [v for v in ORDER if any(r["variant"] == v for r in runs)]
    by = {v: [r for r in runs if r["variant"] == v] for v in variants}
    rounds = {r["round"] for r in runs}
    p = res["params"]

    def added(v, load, key):
        """Median over rounds of (variant - plain) in the same round."""
        if "plain" not in by:
            return None
        base = {r["round"]: r[load][key] for r in by["plain"]}
        return med([r[load][key] - base[r["round"]] for r in by[v] if r["round"] in base])

    s = {"fixed": {}, "sat": {}}
    lines = [
        "## 1. Request path: no limiter, limit_req, grl, Redis limiter",
        "",
        f"nginx (1 worker) proxies to a local backend nginx (keep-alive upstream); each limiter "
        f"has 10 buckets on distinct paths, the request matches one, no limit is reached. "
        f"{rounds_txt(len(rounds))}, interleaved; medians, with the spread (min–max over rounds) of "
        f"p99.5. *Added* = the variant minus no limiter in the same round, median over rounds.",
        "",
        f"**Fixed load below saturation**: {p['fixed_rate']:,} req/s open loop "
        f"(`grl_loadgen`, latency from the scheduled send time), {p['fixed_seconds']:g} s "
        f"measured after {p['warmup']:g} s warm-up.",
        "",
        "| limiter | p50 | p90 | p99 | p99.5 (spread) | p99.9 | added p50 | added p99 | "
        "**added p99.5** | added p99.9 | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        rs = by[v]
        row = {k: med([r["fixed"][k] for r in rs]) for k, _ in PCTS}
        ad = {k: added(v, "fixed", k) for k, _ in PCTS}
        s["fixed"][v] = {"row": row, "added": ad}
        errs = sum(r["fixed"]["errors"] + r["fixed"]["non2xx"] for r in rs)
        lines.append(
            f"| {label_of(runs, v)} | {ms(row['p50'])} | {ms(row['p90'])} | {ms(row['p99'])} | "
            f"{ms(row['p995'])} ({spread([r['fixed']['p995'] for r in rs])} µs) | "
            f"{ms(row['p999'])} | {fmt(ad['p50'], 0, ' µs')} | {fmt(ad['p99'], 0, ' µs')} | "
            f"**{fmt(ad['p995'], 0, ' µs')}** | {fmt(ad['p999'], 0, ' µs')} | {errs} |")
    lines += [
        "",
        f"**Saturation**: `wrk -t1 -c{p['connections']}` (closed loop), {p['sat_seconds']} s.",
        "",
        "| limiter | req/s (spread) | vs no limiter | p50 | p99 | p99.5 | p99.9 | added p99.5 | "
        "non-2xx + errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base_rps = med([r["saturation"]["rps"] for r in by.get("plain", [])])
    for v in variants:
        rs = by[v]
        rps = med([r["saturation"]["rps"] for r in rs])
        row = {k: med([r["saturation"][k + "_us"] for r in rs]) for k, _ in PCTS}
        ad = added(v, "saturation", "p995_us")
        s["sat"][v] = {"rps": rps, "ratio": rps / base_rps if base_rps else None,
                       "row": row, "added_p995": ad}
        bad = sum(r["saturation"]["non2xx"] + r["saturation"]["errors"] for r in rs)
        lines.append(
            f"| {label_of(runs, v)} | {fmt(rps)} ({spread([r['saturation']['rps'] for r in rs])}) | "
            f"{fmt(rps / base_rps if base_rps else None, 3)} | {ms(row['p50'])} | "
            f"{ms(row['p99'])} | {ms(row['p995'])} | {ms(row['p999'])} | "
            f"{fmt(ad, 0, ' µs')} | {bad} |")
    if "plain" in by and len(by["plain"]) > 1:
        pl = [r["fixed"]["p995"] for r in by["plain"]]
        s["noise_p995"] = (min(pl), max(pl))
        lines += ["", f"Noise floor: no limiter's own p99.5 at the fixed load ranged "
                      f"{min(pl):,}–{max(pl):,} µs between rounds; on this VM even nginx alone "
                      f"stalls for a few ms several times a second, so differences in the tail "
                      f"smaller than that range are not resolved here."]
    checks = sorted({f"{r['label']}: {r['check']}" for r in runs if r.get("check")})
    if checks:
        lines += ["", "Checks (last round of each): the limiter evaluated every request —"]
        seen = {}
        for r in runs:
            if r.get("check"):
                seen[r["label"]] = r["check"]
        lines += [f"- {k}: {v}" for k, v in seen.items()]
    notes = sorted({n for r in runs for n in r.get("notes", [])})
    lines += [f"- **Note**: {n}" for n in notes]
    configs = sorted({f"{r['label']}: {r['config']}" for r in runs if r.get("config")})
    if configs:
        lines += ["", "Control plane:"] + [f"- {c}" for c in configs]
    for v, why in res.get("skipped", {}).items():
        lines.append(f"- **Not run**: {v}: {why}")

    # Plot: latency percentiles per limiter, fixed load and saturation.
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = list(range(len(PCTS)))
    for ax, load, title in ((axes[0], "fixed", f"fixed load, {p['fixed_rate']:,} req/s (open loop)"),
                            (axes[1], "saturation", f"saturation (wrk -c{p['connections']})")):
        for v in variants:
            key = (lambda k: k) if load == "fixed" else (lambda k: k + "_us")
            ys = [med([r[load][key(k)] for r in by[v]]) for k, _ in PCTS]
            ax.plot(xs, [y / 1000 for y in ys], marker="o", label=label_of(runs, v))
        ax.set_xticks(xs, [n for _, n in PCTS])
        ax.set_yscale("log")
        ax.set_ylabel("latency, ms (median of rounds)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    name = "request_path_latency.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    lines += ["", f"![latency percentiles per limiter]({name})", ""]
    figs.append(name)
    return "\n".join(lines), s


# ---------------------------------------------------------------------------------------------
# Experiment 2


def redis_trouble(res, out_dir, figs):
    runs = res["runs"]
    p = res["params"]
    keys = []
    for r in runs:
        k = (r["label"], r["condition"])
        if k not in keys:
            keys.append(k)
    lines = [
        "## 2. Redis trouble",
        "",
        f"The request path of experiment 1 at {p['fixed_rate']:,} req/s (open loop), "
        f"{p['seconds']:g} s measured. **delayed**: Redis across the network, "
        f"{p.get('delay_ms', 0):g} ms added each way by a user-space proxy (this kernel has no "
        f"netem) — on loopback (experiment 1) Redis is as close as it can ever be; "
        f"**stalled**: Redis answers nothing for {p['stall']:g} s "
        f"of every {p['period']:g} s (`DEBUG SLEEP`); **down**: Redis stopped after the limiter "
        f"connected. The Redis limiter waits at most 50 ms (`redis_limit_timeout`), then fails "
        f"open (passes, unlimited) or closed (rejects). grl and no limiter have no Redis in the "
        f"path; they ran in the same rounds. Medians over "
        f"{rounds_txt(len({r['round'] for r in runs}))}.",
        "",
        "| limiter | Redis | 2xx | 429 | other + errors | p50 | p99 | p99.5 (spread) | p99.9 | max "
        "| added p50 | added p99.5 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    s = {}
    base = {r["round"]: r["result"] for r in runs if r["variant"] == "plain"}
    for lab, cond in keys:
        sel = [r for r in runs if r["label"] == lab and r["condition"] == cond]
        rs = [r["result"] for r in sel]
        row = {k: med([x[k] for x in rs]) for k in ("p50", "p99", "p995", "p999", "max", "ok",
                                                     "r429")}
        for k in ("p50", "p995"):
            row["added_" + k] = med([r["result"][k] - base[r["round"]][k] for r in sel
                                     if r["round"] in base])
        other = med([x["other"] + x["errors"] for x in rs])
        s[(lab, cond)] = row
        lines.append(
            f"| {lab} | {cond or 'not used'} | {fmt(row['ok'])} | {fmt(row['r429'])} | "
            f"{fmt(other)} | {ms(row['p50'])} | {ms(row['p99'])} | {ms(row['p995'])} "
            f"({spread([x['p995'] for x in rs])} µs) | {ms(row['p999'])} | {ms(row['max'])} | "
            f"{fmt(row['added_p50'], 0, ' µs')} | {fmt(row['added_p995'], 0, ' µs')} |")
    lines += ["", "2xx/429/other are counts per run (medians). With Redis down, failing open "
              "means **no limit at all** (every request passes), failing closed means **every "
              "request is rejected**; grl keeps its last ratios until they expire and then fails "
              "open, but it has no Redis to lose."]
    for v, why in res.get("skipped", {}).items():
        lines.append(f"- **Not run**: {v}: {why}")
    notes = sorted({n for r in runs for n in r.get("notes", [])})
    lines += [f"- **Note**: {n}" for n in notes]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4.2))
    xs = list(range(len(PCTS)))
    for lab, cond in keys:
        rs = [r["result"] for r in runs if r["label"] == lab and r["condition"] == cond]
        ys = [med([x[k] for x in rs]) for k, _ in PCTS]
        ax.plot(xs, [max(y, 1) / 1000 for y in ys], marker="o",
                label=f"{lab}" + (f", Redis {cond}" if cond else ""))
    ax.set_xticks(xs, [n for _, n in PCTS])
    ax.set_yscale("log")
    ax.set_ylabel("latency, ms (median of rounds)")
    ax.set_title(f"Redis in trouble, {p['fixed_rate']:,} req/s open loop")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    name = "redis_trouble_latency.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    lines += ["", f"![latency with Redis in trouble]({name})", ""]
    figs.append(name)
    return "\n".join(lines), s


# ---------------------------------------------------------------------------------------------
# Experiments 3 and 4


def ideal_run(fleet_res):
    """What a perfect global limiter would admit from the same offered series: min(offered, L)
    per interval, analysed the same way (the 1-s window alone takes 0.8 s to settle)."""
    import exp_fleet
    r0 = fleet_res["runs"][0]
    L = fleet_res["params"]["limit"]
    dt = r0["series"]["dt"]
    ok = [min(o, L * dt) for o in r0["series"]["offered"]]
    iv = [{"offered": o, "ok": a, "r429": o - a, "other": 0, "errors": 0,
           "ok_by_target": [0] * len(r0["targets"]),
           "offered_by_target": [0] * len(r0["targets"])}
          for o, a in zip(r0["series"]["offered"], ok)]
    lg = {"interval_ms": dt * 1000, "intervals": iv, "targets": r0["targets"]}
    return exp_fleet.analyse(lg, None, fleet_res["phases"], L,
                             fleet_res["params"]["accuracy_window"])


def variant_order(keys):
    base = ["plain", "limit_req", "redis", "grl"]
    return sorted(keys, key=lambda k: (base.index(k.split(":")[0]) if k.split(":")[0] in base
                                       else 99, k))


def fleet(res, out_dir, figs):
    runs = res["runs"]
    p = res["params"]
    L = p["limit"]
    variants = variant_order({r["variant"] for r in runs})
    by = {v: [r for r in runs if r["variant"] == v] for v in variants}
    phases = {ph["name"]: ph for ph in res["phases"]}
    nrounds = len({r["round"] for r in runs})
    ideal = ideal_run(res) if runs else None
    weights = p["weights"].split(",")
    s = {"accuracy": {}, "step": {}, "surge": {}, "recover": {}}

    def m(v, phase, key):
        return med([r["metrics"].get(phase, {}).get(key) for r in by[v]])

    def settle(v, phase):
        vals = [r["metrics"].get(phase, {}).get("settle_s") for r in by[v]]
        never = sum(1 for x in vals if x is None)
        got = [x for x in vals if x is not None]
        if not got:
            return "never"
        txt = f"{statistics.median(got):.1f} s"
        return txt + (f" ({never} of {len(vals)} never)" if never else "")

    def ratio(x):
        return fmt(x / L if x else None, 2)

    lines = [
        "## 3. Accuracy across hosts",
        "",
        f"{p['hosts']} nginx hosts, one global limit L = {L:g} req/s, offered "
        f"{phases['step']['mult']:g} L = {phases['step']['rate']:g} req/s open loop, spread "
        f"{'/'.join(weights)} over the hosts. limit_req is configured the usual way: L/{p['hosts']}"
        f" = {L / p['hosts']:g} req/s per host. Admitted rate = 2xx over the last "
        f"{p['accuracy_window']:g} s of the {phases['step']['seconds']:g}-s step; medians over "
        f"{rounds_txt(nrounds)} (spread).",
        "",
        "| limiter | admitted req/s (spread) | admitted / L | per host: offered → admitted req/s |",
        "|---|---|---|---|",
    ]
    for v in variants:
        a = m(v, "step", "steady_admitted_rps")
        hosts = []
        for h in range(p["hosts"]):
            off = med([r["metrics"]["step"]["steady_offered_by_host_rps"][h] for r in by[v]])
            adm = med([r["metrics"]["step"]["steady_by_host_rps"][h] for r in by[v]])
            hosts.append(f"{off:.0f} → {adm:.0f}")
        s["accuracy"][v] = a / L if a is not None else None
        lines.append(f"| {label_of(runs, v)} | {fmt(a)} "
                     f"({spread([r['metrics']['step']['steady_admitted_rps'] for r in by[v]])}) | "
                     f"{ratio(a)} | {', '.join(hosts)} |")
    if ideal:
        lines.append(f"| *ideal global limiter* | {fmt(ideal['step']['steady_admitted_rps'])} | "
                     f"{ideal['step']['steady_admitted_rps'] / L:.2f} | |")
    for v, why in res.get("skipped", {}).items():
        lines.append(f"\n**Not run**: {v}: {why}")
    configs = sorted({f"{r['label']}: {r['config']}" for r in runs if r.get("config")})
    if configs:
        lines += ["", "Control plane:"] + [f"- {c}" for c in configs]

    lines += [
        "",
        "## 4. Convergence and surge",
        "",
        "Same fleet and spread. Schedule: " + ", ".join(
            f"{ph['name']} {ph['mult']:g} L for {ph['seconds']:g} s" for ph in res["phases"])
        + f". The surge is {phases['surge']['mult'] / phases['base']['mult']:g}x the base rate "
        f"(Uber: 22K → 367K req/s). *Admitted* is the 2xx rate over a sliding 1-s window, every "
        f"100 ms; *settle* is the time from the change until it stays within "
        f"{res['tolerance'] * 100:.0f}% of L of the right answer (L above the limit, the offered "
        f"rate below it) for the rest of the phase (an ideal limiter needs 0.8 s: the 1-s window "
        f"filling). *Backend* is the backend's own request counter (stub_status), sampled every "
        f"100 ms. *Wrongly rejected*: 429s while the offered rate was 0.5 L (recover and after "
        f"phases) — legitimate traffic refused because the limiter still acts on the past "
        f"(limit_req rejects there by design: one host gets 0.7 x 0.5 L > L/{p['hosts']}). "
        f"Medians over {rounds_txt(nrounds)}.",
        "",
        "| limiter | step: settle | step: peak / L | load falls: settle | surge: settle | surge: "
        "peak / L | surge: admitted req/s, last "
        f"{p['accuracy_window']:g} s | backend in surge: mean / peak 1 s / peak 100 ms, req/s | "
        "after surge: settle | wrongly rejected |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        st_peak = m(v, "step", "peak_1s_rps")
        su_peak = m(v, "surge", "peak_1s_rps")
        wrong = med([sum(r["metrics"].get(ph, {}).get("r429", 0) for ph in ("recover", "after"))
                     for r in by[v]])
        s["step"][v] = {"settle": settle(v, "step"), "peak": st_peak / L if st_peak else None}
        s["recover"][v] = {"settle": settle(v, "recover"), "wrong": wrong}
        s["surge"][v] = {"settle": settle(v, "surge"), "peak": su_peak / L if su_peak else None,
                         "backend_peak_100ms": m(v, "surge", "backend_peak_100ms_rps"),
                         "after": settle(v, "after")}
        lines.append(
            f"| {label_of(runs, v)} | {settle(v, 'step')} | {ratio(st_peak)} | "
            f"{settle(v, 'recover')} | {settle(v, 'surge')} | {ratio(su_peak)} | "
            f"{fmt(m(v, 'surge', 'steady_admitted_rps'))} | "
            f"{fmt(m(v, 'surge', 'backend_mean_rps'))} / {fmt(m(v, 'surge', 'backend_peak_1s_rps'))}"
            f" / {fmt(m(v, 'surge', 'backend_peak_100ms_rps'))} | {settle(v, 'after')} | "
            f"{fmt(wrong)} |")
    if ideal:
        i = ideal
        lines.append(
            f"| *ideal global limiter* | {i['step']['settle_s']:.1f} s | "
            f"{i['step']['peak_1s_rps'] / L:.2f} | {i['recover']['settle_s']:.1f} s | "
            f"{i['surge']['settle_s']:.1f} s | {i['surge']['peak_1s_rps'] / L:.2f} | "
            f"{fmt(i['surge']['steady_admitted_rps'])} | {fmt(i['surge']['admitted_rps'])} / "
            f"{fmt(i['surge']['peak_1s_rps'])} / {fmt(i['surge']['peak_100ms_rps'])} | "
            f"{i['after']['settle_s']:.1f} s | 0 |")
    notes = sorted({n for r in runs for n in r.get("notes", [])})
    lines += [f"- **Note**: {n}" for n in notes]

    # Plot: offered vs admitted over time, one panel per limiter, every round.
    if runs:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(len(variants), 1, figsize=(11, 2.9 * len(variants)),
                                 sharex=True, squeeze=False)
        for ax, v in zip(axes[:, 0], variants):
            for i, r in enumerate(by[v]):
                sr = r["series"]
                dt = sr["dt"]
                t = [(j + 1) * dt for j in range(len(sr["ok"]))]
                if i == 0:
                    ax.plot(t, [x / dt for x in sr["offered"]], color="0.6", lw=1,
                            label="offered")
                ax.plot(t, [x / dt for x in sr["ok"]], color="C0", lw=0.8, alpha=0.8,
                        label="admitted (2xx per 100 ms)" if i == 0 else None)
                ax.plot(t, [x / dt for x in sr["backend"]], color="C3", lw=0.8, alpha=0.6,
                        ls=":", label="backend load (per 100 ms)" if i == 0 else None)
            ax.axhline(L, color="k", lw=0.8, ls="--", label="L")
            ax.set_yscale("log")
            ax.set_ylim(L * 0.05, phases["surge"]["rate"] * 1.6)
            ax.set_ylabel("req/s")
            ax.set_title(f"{label_of(runs, v)}: admitted vs offered ({rounds_txt(nrounds)} overlaid)",
                         fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7, loc="upper left", ncol=4)
        axes[-1, 0].set_xlabel("time, s")
        fig.tight_layout()
        name = "fleet_admitted_vs_offered.png"
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        lines += ["", f"![admitted vs offered over time]({name})", ""]
        figs.append(name)
    return "\n".join(lines), s


# ---------------------------------------------------------------------------------------------
# Experiment 5


def micro(res):
    lines = ["## 5. Per-request decision cost and memory", ""]
    d = res.get("decision")
    if d:
        lines += [
            f"`build/bench/grl_decision_bench` (Google Benchmark), pinned to core "
            f"{res['machine']['sut_cpu']}, {res['params']['repetitions']} repetitions; CPU time "
            f"per decision (match + count + sample), median (min–max).",
            "",
            "| benchmark | ns per request |",
            "|---|---|",
        ]
        for row in d["rows"]:
            lines.append(f"| {row['name']} | {row['median_ns']:.1f} ({row['min_ns']:.1f}–"
                         f"{row['max_ns']:.1f}) |")
    z = res.get("zone")
    lines += ["", "| limiter | memory per limited thing | source |", "|---|---|---|"]
    if z:
        caps = ", ".join(f"{x['size']}: {x['configured_buckets']:,} buckets" for x in z["zones"])
        lines.append(f"| grl | {z['bytes_per_bucket']:,} bytes of shared zone per bucket "
                     f"({z['worker_slots']} per-worker counter lines of 64 bytes + the slot), "
                     f"fixed, whatever the traffic ({caps}) | zone layout "
                     f"(`build/bench/grl_zone_memory`) |")
    rk = res.get("redis_key")
    if rk:
        lines.append(f"| Redis limiter | {rk['bytes']} bytes per bucket per 1-s window key in "
                     f"Redis (two live around a window boundary) | `MEMORY USAGE` of a counter "
                     f"key |")
    lk = res.get("limit_req_key")
    if lk:
        lines.append(f"| limit_req | {lk['bytes']} bytes per key (per client address, per host) "
                     f"| {lk['source']} |")
    for k, why in res.get("skipped", {}).items():
        lines.append(f"\n**Not run**: {k}: {why}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def headline(rp, tr, fl, rp_res, fl_res, tr_res=None):
    """The one table: where grl stands against each alternative."""
    cols = ["limit_req", "redis", "grl"]
    if fl:
        cols += [v for v in variant_order(fl["accuracy"]) if v.startswith("grl:")]
    names = {c: NAMES.get(c, f"grl, {c.partition(':')[2]} intervals") for c in cols}
    head = "| | " + " | ".join(names[c] for c in cols) + " |"
    lines = [head, "|---|" + "---|" * len(cols)]
    ratio_txt = None
    if rp:
        fx = rp["fixed"]
        rate = rp_res["params"]["fixed_rate"]
        row = [fmt(fx[c]["added"]["p995"], 0, " µs") if c in fx else "–" for c in cols]
        lines.append(f"| added p99.5 latency at {rate:,} req/s (vs no limiter) | "
                     + " | ".join(row) + " |")
        row = [fmt(fx[c]["added"]["p50"], 0, " µs") if c in fx else "–" for c in cols]
        lines.append(f"| added p50 latency at {rate:,} req/s | " + " | ".join(row) + " |")
        sat = rp["sat"]
        row = [f"{fmt(sat[c]['rps'])} ({fmt(sat[c]['ratio'], 2)}x)" if c in sat and sat[c]["ratio"]
               else "–" for c in cols]
        lines.append("| max req/s, 1 worker (vs no limiter) | " + " | ".join(row) + " |")
        g, r = fx.get("grl", {}).get("added", {}).get("p995"), \
            fx.get("redis", {}).get("added", {}).get("p995")
        if g is not None and r is not None and r > 0:
            ratio_txt = (f"grl's added p99.5 is **{max(g, 0) / r * 100:.0f}%** of the Redis "
                         f"limiter's ({g:.0f} µs vs {r:.0f} µs at {rate:,} req/s, Redis on "
                         f"loopback; target: under 10%)"
                         + (" — grl's is within the noise of no limiter" if g <= 0 else ""))
            lo, hi = rp.get("noise_p995", (0, 0))
            if hi - lo > max(abs(g), abs(r)):
                ratio_txt += (f" (both below this machine's noise: no limiter's own p99.5 "
                              f"varied {lo:,}–{hi:,} µs between rounds)")
    if tr:
        def cell(lab, cond):
            row = tr.get((lab, cond))
            return ms(row["p995"]) if row else "–"
        grl_lab = next((k[0] for k in tr if k[0].startswith("grl")), "grl")
        extra = " | not affected" * (len(cols) - 3)
        delayed = tr.get(("redis, fail open", "delayed"))
        if delayed:
            d = tr_res["params"].get("delay_ms", 0)
            g = tr.get((grl_lab, None), {})
            lines.append(f"| added p50 / p99.5 with Redis {2 * d:g} ms RTT away (vs no limiter) "
                         f"| not affected | {fmt(delayed['added_p50'], 0, ' µs')} / "
                         f"{fmt(delayed['added_p995'], 0, ' µs')} | not affected "
                         f"({fmt(g.get('added_p50'), 0, ' µs')} / "
                         f"{fmt(g.get('added_p995'), 0, ' µs')}){extra} |")
            gd, rd = g.get("added_p995"), delayed["added_p995"]
            if gd is not None and rd is not None and rd > 0:
                ratio_txt = ((ratio_txt + "; ") if ratio_txt else "") + (
                    f"with Redis {2 * d:g} ms RTT away, grl's added p99.5 is "
                    f"**{max(gd, 0) / rd * 100:.0f}%** of the Redis limiter's "
                    f"({gd:.0f} µs vs {rd:.0f} µs)"
                    + (" — grl's is within the noise of no limiter" if gd <= 0 else ""))
        lines.append("| p99.5 with Redis stalled (fail open / closed) | not affected | "
                     f"{cell('redis, fail open', 'stalled')} / {cell('redis, fail closed', 'stalled')}"
                     f" | not affected ({cell(grl_lab, None)}){extra} |")
        down_o = tr.get(("redis, fail open", "down"))
        down_c = tr.get(("redis, fail closed", "down"))
        txt = []
        if down_o:
            txt.append(f"fail open: {fmt(down_o['ok'])} of {fmt(down_o['ok'] + down_o['r429'])} "
                       f"pass, no limit")
        if down_c:
            txt.append(f"fail closed: {fmt(down_c['r429'])} of "
                       f"{fmt(down_c['ok'] + down_c['r429'])} rejected")
        lines.append("| Redis down | not affected | " + ("; ".join(txt) or "–")
                     + " | not affected" + extra + " |")
    if fl:
        L = fl_res["params"]["limit"]
        acc = fl["accuracy"]
        lines.append(f"| admitted at 1.5 L, {fl_res['params']['weights'].replace(',', '/')} over "
                     f"{fl_res['params']['hosts']} hosts | "
                     + " | ".join(f"{fmt(acc.get(c), 2)} L" if acc.get(c) is not None else "–"
                                  for c in cols) + " |")
        lines.append("| settle after step 0.5 L → 1.5 L (±10%) | "
                     + " | ".join(fl["step"].get(c, {}).get("settle", "–") for c in cols) + " |")
        lines.append("| legitimate requests rejected after the load fell (0.5 L) | "
                     + " | ".join(fmt(fl["recover"][c]["wrong"]) if c in fl["recover"] else "–"
                                  for c in cols) + " |")
        su = fl["surge"]
        lines.append("| 15x surge: peak admitted (1 s) | "
                     + " | ".join(f"{fmt(su[c]['peak'], 2)} L" if c in su and su[c]["peak"]
                                  else "–" for c in cols) + " |")
        lines.append("| 15x surge: settle (±10%) | "
                     + " | ".join(su.get(c, {}).get("settle", "–") for c in cols) + " |")
        lines.append("| 15x surge: backend peak over 100 ms | "
                     + " | ".join(f"{fmt(su[c]['backend_peak_100ms'])} req/s ("
                                  f"{su[c]['backend_peak_100ms'] / L:.1f} L)"
                                  if c in su and su[c]["backend_peak_100ms"] else "–"
                                  for c in cols) + " |")
    return "\n".join(lines), ratio_txt


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=bl.RESULTS)
    ap.add_argument("--command", default="bench/run_all.sh")
    ap.add_argument("--elapsed", type=float, default=None)
    args = ap.parse_args(argv)
    out_dir = args.results

    def load(name):
        path = os.path.join(out_dir, "raw", f"{name}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

    rp_res, tr_res, fl_res, mi_res = (load(n) for n in ("request_path", "redis_trouble",
                                                         "fleet", "micro"))
    figs = []
    sections, rp, tr, fl = [], None, None, None
    if rp_res and rp_res["runs"]:
        txt, rp = request_path(rp_res, out_dir, figs)
        sections.append(txt)
    if tr_res and tr_res["runs"]:
        txt, tr = redis_trouble(tr_res, out_dir, figs)
        sections.append(txt)
    if fl_res:
        txt, fl = fleet(fl_res, out_dir, figs)
        sections.append(txt)
    if mi_res:
        sections.append(micro(mi_res))
    any_res = rp_res or tr_res or fl_res or mi_res
    if not any_res:
        raise SystemExit(f"no results in {out_dir}")
    mach = any_res["machine"]
    table, ratio_txt = headline(rp, tr, fl, rp_res, fl_res, tr_res)
    out = [
        "# grl benchmark report",
        "",
        f"Generated {mach['date']} by `{args.command}`"
        + (f" in {args.elapsed / 60:.1f} min" if args.elapsed else "") + ".",
        "",
        f"**Machine**: {mach['cpu']}, {mach['cores']} cores, {mach['memory']}; {mach['os']}, "
        f"kernel {mach['kernel']}; nginx {mach['nginx']}, {mach['redis']}, {mach['wrk']}; "
        f"grl commit {mach['commit']}; load average at start {mach['loadavg_at_start']}.",
        f"**Pinning**: everything under test (nginx frontends and backend, Redis, the grl "
        f"control plane) on core {mach['sut_cpu']}; the load generator (wrk or `grl_loadgen`) "
        f"on core {mach['load_cpu']}. Variants interleaved round by round; medians over rounds, "
        f"spreads are min–max over rounds. Absolute numbers are this machine's; compare ratios.",
        "",
        "## Headline: where grl stands",
        "",
    ]
    if ratio_txt:
        out += [ratio_txt + ".", ""]
    out += [table, ""]
    late = []
    for name, res, key in (("request path", rp_res, "fixed"), ("Redis trouble", tr_res, "result"),
                           ("fleet", fl_res, None)):
        for r in (res or {}).get("runs", []):
            lag = (r.get(key, {}) if key else r).get("send_lag_p99", 0)
            if lag > 1000:
                late.append(f"{name} round {r['round']} {r['label']}: p99 {lag / 1000:.1f} ms")
    for r in (fl_res or {}).get("runs", []):
        if r.get("stalled_intervals"):
            late.append(f"fleet round {r['round']} {r['label']}: {r['stalled_intervals']} "
                        f"intervals of 100 ms with no response at all")
    if late:
        out += ["**Warning — the machine was busy during some runs** (the load generator sent "
                "late: p99 of the delay between a request's scheduled and actual send above 1 ms; "
                "or the system under test answered nothing for 100 ms). Latency is still "
                "measured from the scheduled time, but such rounds are noisy: "
                + "; ".join(late) + ".", ""]
    missing = []
    for name, res in (("request path", rp_res), ("Redis trouble", tr_res), ("fleet", fl_res),
                      ("micro", mi_res)):
        if res is None:
            missing.append(f"- {name}: not run")
        else:
            for k, why in res.get("skipped", {}).items():
                missing.append(f"- {name}: **{k} not run**: {why}")
            for why in res.get("failures", []):
                missing.append(f"- {name}: **run failed** (left out of the medians): {why}")
    if missing:
        out += ["**Missing from this report:**", ""] + missing + [""]
    out += ["## Commands", ""]
    for name, res in (("1", rp_res), ("2", tr_res), ("3+4", fl_res), ("5", mi_res)):
        if res:
            out.append(f"- experiment {name}: `{res['command']}` ({res['seconds']:.0f} s)")
    out += [""]
    out += sections
    text = "\n".join(out) + "\n"
    with open(os.path.join(out_dir, "REPORT.md"), "w") as f:
        f.write(text)
    # The headline alone, for the README and the issue.
    with open(os.path.join(out_dir, "HEADLINE.md"), "w") as f:
        f.write(f"Measured {mach['date']} with `{args.command}` on {mach['cpu']}, "
                f"{mach['cores']} cores (grl commit {mach['commit']}); medians over rounds, "
                f"details in bench/results/REPORT.md.\n\n"
                + (ratio_txt + ".\n\n" if ratio_txt else "") + table + "\n")
    print(f"wrote {os.path.join(out_dir, 'REPORT.md')} and {', '.join(figs) or 'no plots'}")


if __name__ == "__main__":
    main()
