// One instance of a bucket, as the controller names it; the controller and grl-rlc share it.
#pragma once

#include <string>
#include <string_view>
#include <tuple>

#include "grl/common/bucket_types.h"

namespace grl::control {

// A bucket at its scope and, for region and zone scope, the region and zone its usage is summed
// over ("" otherwise). Inside one controller every instance is of its own region, so the
// controller leaves `region` empty; grl-rlc, which records several regions, fills it.
struct InstanceKey {
    std::string bucket;
    Scope scope = Scope::Global;
    std::string region;
    std::string zone;
    friend bool operator==(const InstanceKey& a, const InstanceKey& b) {
        return std::tie(a.bucket, a.scope, a.region, a.zone) ==
               std::tie(b.bucket, b.scope, b.region, b.zone);
    }
    friend bool operator<(const InstanceKey& a, const InstanceKey& b) {
        return std::tie(a.bucket, a.scope, a.region, a.zone) <
               std::tie(b.bucket, b.scope, b.region, b.zone);
    }
};

// The same, borrowed: the tick looks instances up every interval without building a key.
struct InstanceKeyRef {
    std::string_view bucket;
    Scope scope = Scope::Global;
    std::string_view region;
    std::string_view zone;
};

// Orders keys and borrowed keys alike, as InstanceKey's operator<.
struct InstanceKeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
        return std::make_tuple(std::string_view(a.bucket), a.scope, std::string_view(a.region),
                               std::string_view(a.zone)) <
               std::make_tuple(std::string_view(b.bucket), b.scope, std::string_view(b.region),
                               std::string_view(b.zone));
    }
};

}  // namespace grl::control
