// libFuzzer harness, differential: the collector's zero-copy report reader must accept
// exactly what wire::decode accepts, and read the same values.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grl/wire/report_reader.h"
#include "grl/wire/wire.h"

namespace {

bool same(const grl::wire::ReportCounts& a, const grl::wire::ReportCounts& b) {
    return a.scope == b.scope && a.mode == b.mode && a.limit_mrps == b.limit_mrps &&
           a.offered == b.offered && a.admitted == b.admitted && a.dropped == b.dropped &&
           a.shadow_dropped == b.shadow_dropped && a.has_recent == b.has_recent &&
           a.recent == b.recent;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view bytes(reinterpret_cast<const char*>(data), size);
    grl::wire::Report full;
    grl::wire::ReportView view;
    std::string e1, e2;
    const bool a = grl::wire::decode(bytes, full, e1);
    const bool b = grl::wire::read_report(bytes, view, e2);
    if (a != b) std::abort();
    if (!a) return 0;
    if (full.host != view.host || full.zone != view.zone || full.region != view.region ||
        full.epoch != view.epoch || full.seq != view.seq || full.ts_ms != view.ts_ms ||
        full.interval_ms != view.interval_ms || full.reports_dropped != view.reports_dropped ||
        full.recent_ms != view.recent_ms || full.buckets.size() != view.buckets.size()) {
        std::abort();
    }
    for (std::size_t i = 0; i < full.buckets.size(); ++i) {
        if (full.buckets[i].name != view.buckets[i].name ||
            !same(full.buckets[i], view.buckets[i]) ||
            full.buckets[i].keyed != view.buckets[i].keyed) {
            std::abort();
        }
        grl::wire::KeyRange keys = grl::wire::keys_of(view, view.buckets[i]);
        if (keys.size() != full.buckets[i].keys.size()) std::abort();
        for (std::size_t j = 0; j < keys.size(); ++j) {
            const grl::wire::KeyRate& k = full.buckets[i].keys[j];
            if (k.hash != keys.first[j].hash || k.text != keys.first[j].text ||
                k.offered_mrps != keys.first[j].offered_mrps ||
                k.dropped_mrps != keys.first[j].dropped_mrps) {
                std::abort();
            }
        }
    }
    return 0;
}
