#include "grl/control/bucket_ids.h"

#include <algorithm>

namespace grl::control {

std::uint32_t BucketIds::acquire(std::string_view name) {
    auto it = index_.find(name);
    if (it != index_.end()) {
        ++holders_[it->second];
        return it->second;
    }
    if (index_.size() >= max_names_) {
        ++refused_;
        return kNone;
    }
    std::uint32_t id;
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
        names_[id].assign(name);
    } else {
        id = static_cast<std::uint32_t>(names_.size());
        names_.emplace_back(name);
        views_.emplace_back();
        holders_.push_back(0);
        binds_.push_back(0);
    }
    holders_[id] = 1;
    ++binds_[id];
    views_[id] = names_[id];
    index_.emplace(names_[id], id);
    sorted_ = false;
    return id;
}

void BucketIds::release(std::uint32_t id) {
    if (--holders_[id] != 0) return;
    index_.erase(names_[id]);
    names_[id].clear();
    names_[id].shrink_to_fit();  // a long name's storage is not kept by a free id
    views_[id] = {};
    free_.push_back(id);
    sorted_ = false;
}

std::uint32_t BucketIds::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? kNone : it->second;
}

const std::vector<std::uint32_t>& BucketIds::by_name() {
    if (sorted_) return by_name_;
    by_name_.clear();
    by_name_.reserve(index_.size());
    for (const auto& [name, id] : index_) by_name_.push_back(id);
    std::sort(by_name_.begin(), by_name_.end(),
              [&](std::uint32_t a, std::uint32_t b) { return names_[a] < names_[b]; });
    sorted_ = true;
    return by_name_;
}

}  // namespace grl::control
