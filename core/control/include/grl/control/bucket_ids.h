// Dense integer ids for the bucket names the controller holds (docs/control-plane.md "Bucket
// ids"). A zone's or a peer's usage is given the id of each of its entries' names when it is
// taken in; the tick then adds numbers in arrays indexed by id instead of merging 54 lists of
// names by comparing strings.
//
// Each holder (a usage held for a zone or a peer) retains the ids of its entries and releases
// them when its usage is replaced or forgotten: an id whose last holder let go is free, and the
// next new name takes it, so ids stay dense and the arrays indexed by them stay the size of the
// fleet's names. At most `max_names` names are held at once; a name beyond is refused.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace grl::control {

class BucketIds {
  public:
    static constexpr std::uint32_t kNone = UINT32_MAX;

    explicit BucketIds(std::size_t max_names) : max_names_(max_names) {}
    BucketIds(const BucketIds&) = delete;
    BucketIds& operator=(const BucketIds&) = delete;
    BucketIds(BucketIds&&) = default;  // the views in index_ move with the names
    BucketIds& operator=(BucketIds&&) = default;

    // The id of `name`, retained once more; a new name takes the id freed last, else a new
    // one. kNone when `name` is new and max_names names are held.
    std::uint32_t acquire(std::string_view name);
    // One more holder of an id already held (acquire() without the lookup).
    void retain(std::uint32_t id) { ++holders_[id]; }
    // A holder lets go; the id is free when none is left.
    void release(std::uint32_t id);

    // The name of a held id: valid until the id is freed.
    std::string_view name(std::uint32_t id) const { return views_[id]; }
    // How many times `id` was given a name: a reader that noted it beside something it knows
    // of the id's name (the controller's flags per id) sees whether the id changed hands since.
    std::uint32_t binds(std::uint32_t id) const { return binds_[id]; }
    std::uint32_t find(std::string_view name) const;  // kNone when not held

    std::size_t size() const { return index_.size(); }  // names held
    // Ids handed out so far (held or free): arrays indexed by id need this many slots.
    std::size_t span() const { return names_.size(); }
    std::size_t max_names() const { return max_names_; }
    // Names refused because max_names were held.
    std::uint64_t refused() const { return refused_; }

    // The held ids in name order; sorted again only after names came or went.
    const std::vector<std::uint32_t>& by_name();

  private:
    std::size_t max_names_;
    std::deque<std::string> names_;  // by id: a deque, so that index_'s views stay put
    // names_ by id, as views: name() is one load, not a deque's block arithmetic (it is asked
    // for each entry of each usage taken in, 2 million a second at fleet scale).
    std::vector<std::string_view> views_;
    std::vector<std::uint32_t> holders_;
    std::vector<std::uint32_t> binds_;  // by id: binds()
    std::vector<std::uint32_t> free_;
    std::unordered_map<std::string_view, std::uint32_t> index_;  // views into names_
    std::vector<std::uint32_t> by_name_;
    bool sorted_ = true;
    std::uint64_t refused_ = 0;
};

}  // namespace grl::control
