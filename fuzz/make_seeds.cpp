// Writes the seed corpus of the fuzz harnesses (fuzz/corpus/): one valid message of every
// kind, encoded by the real encoders, and sample operator text. Run by .ci/fuzz and
// bench/fuzz.sh before fuzzing, so that the seeds always follow the current protocol.
//   grl_fuzz_seeds DIR   -> DIR/wire/*, DIR/report_reader/*, DIR/usage/*, DIR/text/*
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"

namespace fs = std::filesystem;
using namespace grl;

namespace {

void put(const fs::path& dir, const std::string& name, char selector, const std::string& body) {
    fs::create_directories(dir);
    std::ofstream(dir / name, std::ios::binary) << selector << body;
}

wire::Report report() {
    wire::Report r;
    r.host = "h1";
    r.zone = "z1";
    r.region = "r1";
    r.epoch = 7;
    r.seq = 42;
    r.ts_ms = 1700000000000;
    r.interval_ms = 250;
    r.recent_ms = 250;
    for (const char* name : {"api", "bots"}) {
        wire::ReportBucket b;
        b.name = name;
        b.scope = Scope::Zone;
        b.mode = Mode::Shadow;
        b.limit_mrps = 100000;
        b.offered = 1000;
        b.admitted = 900;
        b.dropped = 100;
        b.has_recent = true;
        b.recent = {10, 9, 1, 0};
        r.buckets.push_back(b);
    }
    wire::ReportBucket k = r.buckets[0];  // a keyed bucket with two heavy hitters
    k.name = "per-client";
    k.keyed = true;
    k.keys.push_back({0xfeedfacecafebeefULL, "api-key-1", 150000, 50000, 1});
    k.keys.push_back({2, "", 20000, 0, 1});
    k.keys[1].used = 3;  // a quota per key's use (docs/design/009-per-key-quotas.md)
    r.buckets.push_back(k);
    return r;
}

wire::RuntimeMatch match() {
    wire::RuntimeMatch m;
    m.caller = "bot-";
    m.caller_kind = MatchKind::Prefix;
    m.procedure = "^/search/";
    m.procedure_kind = MatchKind::Regex;
    m.scope = Scope::Region;
    return m;
}

// `m` encoded at usage protocol version 1 (map entries, docs/protocol.md "Versions").
template <class Usage>
std::string at_version_1(Usage m) {
    m.v = 1;
    std::string out;
    wire::encode(m, out);
    return out;
}

wire::UsageBucket usage_bucket() {
    wire::UsageBucket b;
    b.name = "api";
    b.offered_mrps = 300000;
    b.admitted_mrps = 200000;
    b.dropped_mrps = 100000;
    b.hosts = 2;
    b.rated_hosts = 2;
    b.definitions.push_back({{Scope::Global, Mode::Deny, 100000}, 2});
    b.host_names = {"h1", "h2"};
    return b;
}

wire::UsageBucket keyed_usage_bucket() {
    wire::UsageBucket b = usage_bucket();
    b.name = "per-client";
    b.definitions[0].def.keyed = true;
    b.keys.push_back({0xfeedfacecafebeefULL, "api-key-1", 150000, 50000, 2});
    b.keys.push_back({2, "", 20000, 0, 1});
    b.keys[1].used = 5;
    return b;
}

// Eight entries of the shape senders write most (one definition, no host names).
std::vector<wire::UsageBucket> common_buckets() {
    std::vector<wire::UsageBucket> v;
    for (int i = 0; i < 8; ++i) {
        wire::UsageBucket c = usage_bucket();
        c.name = "api-" + std::to_string(i);
        c.host_names.clear();
        v.push_back(c);
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: grl_fuzz_seeds DIR\n");
        return 2;
    }
    const fs::path root = argv[1];
    std::string out;

    wire::Report r = report();
    out.clear();
    wire::encode(r, out);
    put(root / "wire", "report", 0, out);
    fs::create_directories(root / "report_reader");
    std::ofstream(root / "report_reader" / "report", std::ios::binary) << out;

    wire::Instructions in;
    in.source = "ctl-r1";
    in.seq = 3;
    in.ts_ms = 1700000000000;
    in.ttl_ms = 3000;
    in.scope = Scope::Region;
    in.region = "r1";
    wire::Instruction e;
    e.name = "bots";
    e.ratio_ppm = 250000;
    e.limit_mrps = 5000;
    e.has_match = true;
    e.match = match();
    in.buckets.push_back(e);
    wire::Instruction ke;
    ke.name = "per-client";
    ke.limit_mrps = 100000;
    ke.keyed = true;
    ke.keys.push_back({0xfeedfacecafebeefULL, 333333});
    ke.keys.push_back({2, 0});
    ke.key_quota = 1000;  // its key 0xfeed... is over its rate, none used its quota up
    ke.key_quota_reset_ms = 1700003600000;
    in.buckets.push_back(ke);
    out.clear();
    wire::encode(in, out);
    put(root / "wire", "instructions", 1, out);

    wire::ZoneUsage zu;
    zu.source = "col-z1";
    zu.region = "r1";
    zu.zone = "z1";
    zu.seq = 9;
    zu.ts_ms = 1700000000000;
    zu.interval_ms = 250;
    zu.hosts = 2;
    zu.host_names = {"h1", "h2"};
    zu.buckets.push_back(usage_bucket());
    zu.buckets.push_back(keyed_usage_bucket());
    out.clear();
    wire::encode(zu, out);
    put(root / "wire", "zone_usage", 2, out);
    // The usage reader's seeds (selector: even zone_usage, odd region_usage): the message
    // with a keyed bucket (read by wire::decode), one without (the fast path), and a part.
    put(root / "usage", "zone_usage_keyed", 0, out);
    {
        wire::ZoneUsage plain = zu;
        plain.buckets.pop_back();
        std::string b;
        wire::encode(plain, b);
        put(root / "usage", "zone_usage", 0, b);
        plain.host_names.clear();
        plain.part = 1;
        plain.parts = 2;
        b.clear();
        wire::encode(plain, b);
        put(root / "usage", "zone_usage_part", 0, b);
        // The same usages at protocol version 1 (map entries: --usage-version 1, or the
        // release before), read too.
        put(root / "usage", "zone_usage_part_v1", 0, at_version_1(plain));
        put(root / "usage", "zone_usage_keyed_v1", 0, at_version_1(zu));
        put(root / "wire", "zone_usage_v1", 2, at_version_1(zu));
        // Eight entries of the shape senders write most (one definition, no host names): the
        // reader takes those with kCompactEntryMax bytes after them in one bounds check each.
        plain = zu;
        plain.buckets = common_buckets();
        b.clear();
        wire::encode(plain, b);
        put(root / "usage", "zone_usage_common", 0, b);
    }

    wire::RegionUsage ru;
    ru.source = "ctl-r2";
    ru.region = "r2";
    ru.seq = 5;
    ru.ts_ms = 1700000000000;
    ru.interval_ms = 250;
    ru.zones = 1;
    ru.hosts = 2;
    ru.limits_digest = "abc123";
    wire::UsageBucket b = usage_bucket();
    b.host_names.clear();
    ru.buckets.push_back(b);
    wire::UsageBucket kb = keyed_usage_bucket();
    kb.host_names.clear();
    ru.buckets.push_back(kb);
    wire::Override o;
    o.name = "bots";
    o.limit_mrps = 10000;
    o.mode = Mode::Deny;
    o.has_match = true;
    o.match = match();
    o.expires_ms = 1700000600000;
    o.set_ms = 1700000000000;
    o.origin = "ctl-r2";
    ru.overrides.push_back(o);
    wire::QuotaUse qu;  // a quota per key with two keys' use
    qu.name = "per-client";
    qu.spec.n = 1000;
    qu.spec.period = Period::Day;
    qu.window_ms = 1699920000000;
    qu.use_mu = 5000;
    qu.at_ms = 1700000000000;
    qu.keys = {{2, 4}, {0xfeedfacecafebeefULL, 9}};
    ru.quotas.push_back(qu);
    out.clear();
    wire::encode(ru, out);
    put(root / "wire", "region_usage", 3, out);
    put(root / "usage", "region_usage_overrides", 1, out);
    {
        wire::RegionUsage plain = ru;
        plain.buckets.pop_back();
        plain.overrides.clear();
        std::string b;
        wire::encode(plain, b);
        put(root / "usage", "region_usage", 1, b);
        put(root / "usage", "region_usage_v1", 1, at_version_1(plain));
        put(root / "usage", "region_usage_overrides_v1", 1, at_version_1(ru));
        put(root / "wire", "region_usage_v1", 3, at_version_1(ru));
        plain.buckets = common_buckets();
        b.clear();
        wire::encode(plain, b);
        put(root / "usage", "region_usage_common", 1, b);
    }

    wire::AdminRequest q;
    q.seq = 1;
    q.ts_ms = 1700000000000;
    q.op = wire::AdminOp::Add;
    q.bucket = "bots";
    q.limit_mrps = 10000;
    q.mode = Mode::Shadow;
    q.for_ms = 60000;
    q.has_match = true;
    q.match = match();
    out.clear();
    wire::encode(q, out);
    put(root / "wire", "admin_request", 4, out);

    wire::AdminReply a;
    a.seq = 1;
    a.ts_ms = 1700000000000;
    wire::KeyStatus ks;
    ks.name = "per-client";
    ks.limit_mrps = 100000;
    ks.ratio_ppm = 333333;
    ks.key = {0xfeedfacecafebeefULL, "api-key-1", 150000, 50000, 2};
    a.keys.push_back(ks);
    out.clear();
    wire::encode(a, out);
    put(root / "wire", "admin_reply", 5, out);

    // The stateful harness: records [op][clock step][length LE16][body], as in fuzz_state.cpp.
    std::string session;
    auto record = [&session](char op, unsigned char step, const std::string& body) {
        session += op;
        session += static_cast<char>(step);
        session += static_cast<char>(body.size() & 0xff);
        session += static_cast<char>((body.size() >> 8) & 0xff);
        session += body;
    };
    std::string rep, zone, region;
    wire::encode(r, rep);
    wire::encode(zu, zone);
    wire::encode(ru, region);
    for (int i = 0; i < 4; ++i) {
        r.seq += 1;
        r.ts_ms += 250;
        for (auto& b : r.buckets) b.offered += 100;
        rep.clear();
        wire::encode(r, rep);
        record(0, 25, rep);
        record(3, 0, "");
    }
    record(1, 10, zone);
    record(2, 10, region);
    record(3, 25, "");
    fs::create_directories(root / "state");
    std::ofstream(root / "state" / "session", std::ios::binary) << session;

    // Text parsers: selector byte as in fuzz_text.cpp.
    put(root / "text", "limits", 0,
        "buckets:\n  api:\n    limit: 500r/s\n    mode: shadow\n  bots:\n"
        "    caller_prefix: bot-\n    procedure_regex: ^/search/\n    scope: zone\n"
        "    limit: 10r/s\n");
    put(root / "text", "keypair", 1,
        "curve\n    public-key = \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n"
        "    secret-key = \"JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\"\n");
    put(root / "text", "rate", 2, "600r/m");
    put(root / "text", "duration", 2, "250ms");
    put(root / "text", "regex", 3, "^(POST|PUT) /v[0-9]+/");
    put(root / "text", "http", 4, "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
    return 0;
}
