// Identity bound to CURVE keys: which name (the host of a report, the zone of a usage) each
// authorised client key speaks for. ZAP only says a key is on the list; without this, any
// listed key could speak for any host or zone. First come: the first name a key sends binds
// the two, one to one, for as long as either keeps being used; a binding unused for
// `expiry_ms` lapses, so a host that got a new key pair (or a zone whose collector moved)
// is taken after that time without a restart. Time is passed in (monotonic ms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace grl {

class KeyBindings {
  public:
    enum class Result : std::uint8_t {
        Ok,         // the key is bound to this name (now or before)
        KeyTaken,   // the key is bound to another name: the message speaks for someone else
        NameTaken,  // another key is bound to this name
        Full,       // no binding for either, and `max` bindings exist
    };

    KeyBindings(std::size_t max, std::uint64_t expiry_ms) : max_(max), expiry_ms_(expiry_ms) {}

    Result check(std::string_view key, std::string_view name, std::uint64_t now_ms);
    std::size_t size() const { return by_key_.size(); }
    // The name `key` is bound to, or "" (for log lines).
    std::string name_of(std::string_view key) const;

  private:
    struct Entry {
        std::string name;
        std::uint64_t seen_ms = 0;
    };
    bool lapsed(const Entry& e, std::uint64_t now_ms) const {
        return now_ms >= e.seen_ms + expiry_ms_;
    }
    void drop_lapsed(std::uint64_t now_ms);

    std::size_t max_;
    std::uint64_t expiry_ms_;
    std::unordered_map<std::string, Entry> by_key_;         // key -> name
    std::unordered_map<std::string, std::string> by_name_;  // name -> key
    std::string scratch_;
};

std::string_view to_string(KeyBindings::Result r);

}  // namespace grl
