#include "grl/control/pending_use.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace grl::rates {
namespace {

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
    return a > std::numeric_limits<std::uint64_t>::max() - b
               ? std::numeric_limits<std::uint64_t>::max()
               : a + b;
}

}  // namespace

// An entry holds wire::kMaxUsageKeys keys. When its keys with rates leave no room for the
// keys with use only, the least busy of them without use go, down to half the entry, so that
// use is never held back behind a thousand busy keys.
void PendingUse::make_room(std::vector<wire::KeyRate>& listed, const Keys& pending) {
    std::size_t unlisted = pending.size();
    for (const wire::KeyRate& k : listed) unlisted -= pending.count(k.hash);
    const std::size_t max = wire::kMaxUsageKeys;
    if (listed.size() + unlisted <= max) return;
    const std::size_t target = std::max(max / 2, max > unlisted ? max - unlisted : 0);
    std::size_t drop = listed.size() > target ? listed.size() - target : 0;
    // Busiest first (keep_busiest_keys): drop from the end.
    std::vector<char> gone(listed.size(), 0);
    for (std::size_t i = listed.size(); i-- > 0 && drop > 0;) {
        if (pending.count(listed[i].hash) == 0) gone[i] = 1, --drop;
    }
    std::size_t out = 0;
    for (std::size_t i = 0; i < listed.size(); ++i) {
        if (!gone[i]) listed[out++] = std::move(listed[i]);
    }
    listed.resize(out);
}

void PendingUse::add_key(std::string_view bucket, std::uint64_t hash, std::string_view text,
                         std::uint64_t units) {
    auto named = buckets_.find(std::string(bucket));
    Key* key = nullptr;
    if (named != buckets_.end()) {
        auto it = named->second.find(hash);
        if (it != named->second.end()) key = &it->second;
    }
    if (key == nullptr) {
        if (keys_ >= max_keys_) {
            ++refused_.keys;
            refused_.units = sat_add(refused_.units, units);
            return;
        }
        if (named == buckets_.end()) named = buckets_.emplace(std::string(bucket), Keys{}).first;
        key = &named->second.emplace(hash, Key{0, std::string(text)}).first->second;
        ++keys_;
    }
    key->units = sat_add(key->units, units);
    if (key->text.empty()) key->text = std::string(text);
}

void PendingUse::add(const wire::ReportView& r) {
    for (const wire::ReportBucketView& b : r.buckets) {
        if (!b.keyed) continue;
        for (const wire::KeyRateView& k : wire::keys_of(r, b)) {
            if (k.used != 0) add_key(b.name, k.hash, k.text, k.used);
        }
    }
}

void PendingUse::give_back(const wire::ZoneUsage& u) {
    for (const wire::UsageBucket& b : u.buckets) {
        for (const wire::KeyRate& k : b.keys) {
            if (k.used != 0) add_key(b.name, k.hash, k.text, k.used);
        }
    }
}

void PendingUse::take(wire::ZoneUsage& u) {
    for (auto named = buckets_.begin(); named != buckets_.end();) {
        Keys& keys = named->second;
        // A usage's buckets are sorted by name.
        auto entry = std::lower_bound(
            u.buckets.begin(), u.buckets.end(), named->first,
            [](const wire::UsageBucket& b, const std::string& n) { return b.name < n; });
        bool keyed = false;
        if (entry != u.buckets.end() && entry->name == named->first) {
            for (const wire::DefinitionCount& dc : entry->definitions) keyed |= dc.def.keyed;
        }
        if (!keyed) {
            for (const auto& [hash, k] : keys) refused_.units = sat_add(refused_.units, k.units);
            keys_ -= keys.size();
            named = buckets_.erase(named);
            continue;
        }
        make_room(entry->keys, keys);
        // The keys listed with their rates take their use first.
        for (wire::KeyRate& listed : entry->keys) {
            auto it = keys.find(listed.hash);
            if (it == keys.end()) continue;
            listed.used = it->second.units;
            keys.erase(it);
            --keys_;
        }
        // Then the others, the most used first, as many as the entry has room for.
        const std::size_t room =
            wire::kMaxUsageKeys > entry->keys.size() ? wire::kMaxUsageKeys - entry->keys.size() : 0;
        std::vector<std::pair<std::uint64_t, std::uint64_t>> order;  // (units, hash)
        order.reserve(keys.size());
        for (const auto& [hash, k] : keys) order.emplace_back(k.units, hash);
        const auto more = [](const auto& a, const auto& b) {
            return a.first != b.first ? a.first > b.first : a.second < b.second;
        };
        if (order.size() > room) {
            std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(room),
                             order.end(), more);
            order.resize(room);
        }
        std::sort(order.begin(), order.end(), more);
        for (const auto& [units, hash] : order) {
            auto it = keys.find(hash);
            wire::KeyRate k;
            k.hash = hash;
            k.text = std::move(it->second.text);
            k.used = units;
            entry->keys.push_back(std::move(k));
            keys.erase(it);
            --keys_;
        }
        named = keys.empty() ? buckets_.erase(named) : std::next(named);
    }
}

}  // namespace grl::rates
