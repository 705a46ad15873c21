// Identity bound to CURVE keys: which name (the host of a report, the zone of a usage) each
// authorised client key speaks for. ZAP only says a key is on the list; without this, any
// listed key could speak for any host or zone. First come: the first name a key sends binds
// the two, one to one, for as long as either keeps being used; a binding unused for
// `expiry_ms` lapses, so a host that got a new key pair (or a zone whose collector moved)
// is taken after that time without a restart. Time is passed in (monotonic ms).
//
// The operator's key list may name what a key speaks for instead (grl/common/curve_keys.h,
// pin()): such a key speaks for those names only, whatever came first, and those names are
// kept from the keys listed without names. The list can be replaced while the daemon runs (a
// reload): a key no longer on it is refused from then on (its connection may outlive the
// reload: ZAP only runs at the handshake), and bindings the new list contradicts go.
// Names say "curve key" (CurveKeyBindings): a bare "key" in grl is a bucket's `key=`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grl/common/curve_keys.h"

namespace grl {

class CurveKeyBindings {
  public:
    enum class Result : std::uint8_t {
        Ok,         // the key is bound to this name (now or before, or by the list)
        KeyTaken,   // the key is bound (or listed) to another name: it speaks for someone else
        NameTaken,  // another key is bound to this name, or the list names it for other keys
        Full,       // no binding for either, and `max` bindings exist
        NotListed,  // the key is not on the list (removed by a reload after its handshake)
    };

    CurveKeyBindings(std::size_t max, std::uint64_t expiry_ms) : max_(max), expiry_ms_(expiry_ms) {}

    // The operator's list: the keys on it, and the names it gives them (keys listed without
    // names are left to first come). Replaces what an earlier call pinned; bindings of keys
    // no longer listed, of keys the list now names, and to names the list now gives some key
    // are dropped (returns how many). Without a call, every key is taken as listed.
    std::size_t pin(const curve::KeyList& list);

    Result check(std::string_view key, std::string_view name, std::uint64_t now_ms);
    std::size_t size() const { return by_key_.size(); }
    // Drops the bindings unused for `expiry_ms` (a periodic sweep, so that what is held and
    // what lapsed are known without waiting for the next message) and returns how many.
    std::size_t sweep(std::uint64_t now_ms);
    // Bindings that lapsed so far (by sweep(), or when a key or name moved on).
    std::uint64_t lapsed() const { return lapsed_; }
    std::uint64_t expiry_ms() const { return expiry_ms_; }
    // The name `key` is bound to (the names the list gives it, comma-separated), or "" (for
    // log lines).
    std::string name_of(std::string_view key) const;

  private:
    struct Entry {
        std::string name;
        std::uint64_t seen_ms = 0;
    };
    bool lapsed(const Entry& e, std::uint64_t now_ms) const {
        return now_ms >= e.seen_ms + expiry_ms_;
    }
    bool listed_for_some_key(std::string_view name);

    // From the list: key -> names or globs; the plain names and the globs of all keys.
    std::unordered_map<std::string, std::vector<std::string>> pinned_;
    std::unordered_set<std::string> listed_;  // every key on the list (with pin())
    bool has_list_ = false;
    std::unordered_set<std::string> pinned_names_;
    std::vector<std::string> pinned_globs_;

    std::size_t max_;
    std::uint64_t expiry_ms_;
    std::unordered_map<std::string, Entry> by_key_;         // key -> name
    std::unordered_map<std::string, std::string> by_name_;  // name -> key
    std::string scratch_;
    std::uint64_t lapsed_ = 0;
};

std::string_view to_string(CurveKeyBindings::Result r);

}  // namespace grl
