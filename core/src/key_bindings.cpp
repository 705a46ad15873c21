#include "grl/key_bindings.h"

namespace grl {

std::string_view to_string(KeyBindings::Result r) {
    switch (r) {
        case KeyBindings::Result::Ok: return "ok";
        case KeyBindings::Result::KeyTaken: return "key_bound_to_another_name";
        case KeyBindings::Result::NameTaken: return "name_bound_to_another_key";
        case KeyBindings::Result::Full: return "bindings_full";
    }
    return "?";
}

KeyBindings::Result KeyBindings::check(std::string_view key, std::string_view name,
                                       std::uint64_t now_ms) {
    scratch_.assign(key.data(), key.size());
    auto k = by_key_.find(scratch_);
    if (k != by_key_.end()) {
        if (k->second.name == name) {
            k->second.seen_ms = now_ms;
            return Result::Ok;
        }
        if (!lapsed(k->second, now_ms)) return Result::KeyTaken;
        by_name_.erase(k->second.name);  // the key moves on to a new name
        by_key_.erase(k);
    }
    scratch_.assign(name.data(), name.size());
    auto n = by_name_.find(scratch_);
    if (n != by_name_.end()) {
        auto other = by_key_.find(n->second);
        if (other != by_key_.end() && !lapsed(other->second, now_ms)) return Result::NameTaken;
        if (other != by_key_.end()) by_key_.erase(other);
        by_name_.erase(n);
    }
    if (by_key_.size() >= max_) {
        drop_lapsed(now_ms);
        if (by_key_.size() >= max_) return Result::Full;
    }
    by_key_[std::string(key)] = Entry{std::string(name), now_ms};
    by_name_[std::string(name)] = std::string(key);
    return Result::Ok;
}

void KeyBindings::drop_lapsed(std::uint64_t now_ms) {
    for (auto it = by_key_.begin(); it != by_key_.end();) {
        if (lapsed(it->second, now_ms)) {
            by_name_.erase(it->second.name);
            it = by_key_.erase(it);
        } else {
            ++it;
        }
    }
}

std::string KeyBindings::name_of(std::string_view key) const {
    auto it = by_key_.find(std::string(key));
    return it == by_key_.end() ? std::string() : it->second.name;
}

}  // namespace grl
