#include "grlctl_top.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "grlctl_format.h"

namespace grl::grlctl {

namespace {

std::string where(const wire::BucketStatus& b) {
    switch (b.scope) {
        case Scope::Global: return "-";
        case Scope::Region: return b.region;
        case Scope::Zone: return b.zone;
    }
    return "-";
}

// Offered as a share of the limit: how close to dropping (deny) or would-dropping (shadow).
std::string use(const wire::BucketStatus& b) {
    if (b.limit_mrps == 0) return b.offered_mrps ? "inf" : "-";
    char s[32];
    std::snprintf(s, sizeof(s), "%.0f%%",
                  100.0 * static_cast<double>(b.offered_mrps) / static_cast<double>(b.limit_mrps));
    return s;
}

}  // namespace

std::vector<const wire::BucketStatus*> busiest(const wire::AdminReply& buckets) {
    std::vector<const wire::BucketStatus*> out;
    out.reserve(buckets.buckets.size());
    for (const wire::BucketStatus& b : buckets.buckets) out.push_back(&b);
    std::sort(out.begin(), out.end(), [](const wire::BucketStatus* a, const wire::BucketStatus* b) {
        if (a->offered_mrps != b->offered_mrps) return a->offered_mrps > b->offered_mrps;
        return std::tie(a->name, a->scope, a->zone) < std::tie(b->name, b->scope, b->zone);
    });
    return out;
}

std::string render_top(const wire::AdminReply* buckets, const wire::AdminReply* status,
                       const TopView& view) {
    std::vector<std::string> lines;
    const wire::AdminReply* any = buckets ? buckets : status;
    char head[256];
    std::snprintf(head, sizeof(head),
                  "grlctl top: controller %s (region %s) at %s, %s, every %.1f s",
                  any ? any->source.c_str() : "?", any ? any->region.c_str() : "?",
                  view.controller_endpoint.c_str(), utc(view.now_ms).c_str(),
                  static_cast<double>(view.interval_ms) / 1000.0);
    lines.emplace_back(head);
    if (status) {
        std::size_t fresh = 0, hosts = 0, stale_hosts = 0;
        for (const wire::ZoneStatus& z : status->zones) {
            fresh += z.fresh;
            hosts += z.hosts;
            stale_hosts += z.stale_hosts;
        }
        std::string l = "zones " + std::to_string(fresh) + "/" +
                        std::to_string(status->zones.size()) + " fresh, hosts " +
                        std::to_string(hosts) +
                        (stale_hosts ? " (" + std::to_string(stale_hosts) + " stale)" : "");
        std::size_t peers_fresh = 0;
        for (const wire::PeerStatus& p : status->peers) peers_fresh += p.fresh;
        if (!status->peers.empty())
            l += ", peers " + std::to_string(peers_fresh) + "/" +
                 std::to_string(status->peers.size()) + " fresh";
        const wire::LimitsStatus& lim = status->limits;
        if (!lim.file.empty()) {
            l += ", limits version " + (lim.version.empty() ? std::string("-") : lim.version) +
                 (lim.ok ? "" : " (LAST LOAD REJECTED)") +
                 (lim.store_error.empty() ? "" : " (STORE UNREACHABLE)");
        }
        lines.push_back(l);
    }
    if (!view.error.empty()) lines.push_back("NO ANSWER: " + view.error + " (retrying)");
    lines.emplace_back();

    std::vector<std::vector<std::string>> rows = {{"BUCKET", "SCOPE", "WHERE", "OFFERED",
                                                   "ADMITTED", "LIMIT", "USE", "RATIO", "MODE",
                                                   "WOULD-DROP", "HOSTS"}};
    std::vector<const wire::BucketStatus*> top;
    if (buckets) top = busiest(*buckets);
    // Rows that fit under the header, the table's head and the "more" line.
    std::size_t fit = top.size();
    if (view.height) {
        const std::size_t used = lines.size() + 2;
        fit = view.height > used ? std::min(fit, view.height - used) : 0;
    }
    for (std::size_t i = 0; i < fit; ++i) {
        const wire::BucketStatus& b = *top[i];
        char ratio[32];
        std::snprintf(ratio, sizeof(ratio), "%.4f", b.ratio_ppm / 1e6);
        rows.push_back(
            {b.name, std::string(to_string(b.scope)), where(b), rps(b.offered_mrps),
             rps(b.admitted_mrps), rps(b.limit_mrps), use(b), ratio, std::string(to_string(b.mode)),
             b.mode == Mode::Shadow ? rps(b.shadow_dropped_mrps) : "-", std::to_string(b.hosts)});
    }
    std::vector<std::size_t> w(rows[0].size(), 0);
    for (const auto& r : rows)
        for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    for (const auto& r : rows) {
        std::string line;
        for (std::size_t i = 0; i < r.size(); ++i) {
            // Names left-aligned, numbers right-aligned.
            const bool number = i >= 3 && i != 8;
            const std::string pad(w[i] - r[i].size(), ' ');
            line += number ? pad + r[i] : r[i] + pad;
            if (i + 1 < r.size()) line += "  ";
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        lines.push_back(line);
    }
    if (buckets && top.empty()) lines.emplace_back("no buckets (no zone usage yet)");
    if (fit < top.size()) lines.push_back("... " + std::to_string(top.size() - fit) + " more");

    std::string out;
    for (std::string& l : lines) {
        if (view.width && l.size() > view.width) l.resize(view.width);
        out += l;
        out += '\n';
    }
    return out;
}

}  // namespace grl::grlctl
