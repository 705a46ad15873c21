#include "grl/control/curve_key_bindings.h"

namespace grl {

std::string_view to_string(CurveKeyBindings::Result r) {
    switch (r) {
        case CurveKeyBindings::Result::Ok: return "ok";
        case CurveKeyBindings::Result::KeyTaken: return "key_bound_to_another_name";
        case CurveKeyBindings::Result::NameTaken: return "name_bound_to_another_key";
        case CurveKeyBindings::Result::Full: return "bindings_full";
        case CurveKeyBindings::Result::NotListed: return "key_not_listed";
    }
    return "?";
}

std::size_t CurveKeyBindings::pin(const curve::KeyList& list) {
    pinned_.clear();
    pinned_names_.clear();
    pinned_globs_.clear();
    listed_.clear();
    has_list_ = true;
    for (const auto& [key, names] : list) {
        listed_.insert(key);
        if (names.empty()) continue;
        pinned_[key] = names;
        for (const std::string& n : names) {
            if (n.find('*') == std::string::npos) {
                pinned_names_.insert(n);
            } else {
                pinned_globs_.push_back(n);
            }
        }
    }
    // First-come bindings the new list contradicts.
    std::size_t dropped = 0;
    for (auto it = by_key_.begin(); it != by_key_.end();) {
        if (listed_.count(it->first) == 0 || pinned_.count(it->first) > 0 ||
            listed_for_some_key(it->second.name)) {
            by_name_.erase(it->second.name);
            it = by_key_.erase(it);
            ++dropped;
        } else {
            ++it;
        }
    }
    return dropped;
}

bool CurveKeyBindings::listed_for_some_key(std::string_view name) {
    scratch_.assign(name.data(), name.size());
    if (pinned_names_.count(scratch_) > 0) return true;
    for (const std::string& g : pinned_globs_) {
        if (curve::name_matches(g, name)) return true;
    }
    return false;
}

CurveKeyBindings::Result CurveKeyBindings::check(std::string_view key, std::string_view name,
                                                 std::uint64_t now_ms) {
    scratch_.assign(key.data(), key.size());
    if (has_list_ && listed_.count(scratch_) == 0) return Result::NotListed;
    if (!pinned_.empty()) {
        auto p = pinned_.find(scratch_);
        if (p != pinned_.end()) {
            for (const std::string& n : p->second) {
                if (curve::name_matches(n, name)) return Result::Ok;
            }
            return Result::KeyTaken;
        }
    }
    auto k = by_key_.find(scratch_);
    if (k != by_key_.end()) {
        if (k->second.name == name) {
            k->second.seen_ms = now_ms;
            return Result::Ok;
        }
        if (!lapsed(k->second, now_ms)) return Result::KeyTaken;
        by_name_.erase(k->second.name);  // the key moves on to a new name
        by_key_.erase(k);
        ++lapsed_;
    }
    scratch_.assign(name.data(), name.size());
    auto n = by_name_.find(scratch_);
    if (n != by_name_.end()) {
        auto other = by_key_.find(n->second);
        if (other != by_key_.end() && !lapsed(other->second, now_ms)) return Result::NameTaken;
        if (other != by_key_.end()) {
            by_key_.erase(other);
            ++lapsed_;
        }
        by_name_.erase(n);
    }
    // A name the list gives some key is never taken first come (checked once per binding).
    if (!pinned_.empty() && listed_for_some_key(name)) return Result::NameTaken;
    if (by_key_.size() >= max_) {
        sweep(now_ms);
        if (by_key_.size() >= max_) return Result::Full;
    }
    by_key_[std::string(key)] = Entry{std::string(name), now_ms};
    by_name_[std::string(name)] = std::string(key);
    return Result::Ok;
}

std::size_t CurveKeyBindings::sweep(std::uint64_t now_ms) {
    std::size_t n = 0;
    for (auto it = by_key_.begin(); it != by_key_.end();) {
        if (lapsed(it->second, now_ms)) {
            by_name_.erase(it->second.name);
            it = by_key_.erase(it);
            ++n;
        } else {
            ++it;
        }
    }
    lapsed_ += n;
    return n;
}

std::string CurveKeyBindings::name_of(std::string_view key) const {
    auto p = pinned_.find(std::string(key));
    if (p != pinned_.end()) {
        std::string names;
        for (const std::string& n : p->second) names += (names.empty() ? "" : ",") + n;
        return names;
    }
    auto it = by_key_.find(std::string(key));
    return it == by_key_.end() ? std::string() : it->second.name;
}

}  // namespace grl
