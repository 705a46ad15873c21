#include "sample_block.h"

namespace grl::rlc {

namespace {

constexpr unsigned char kFormat = 1;

void put_varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out += static_cast<char>((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out += static_cast<char>(v);
}

std::uint64_t zigzag(std::int64_t v) {
    return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}

std::int64_t unzigzag(std::uint64_t v) {
    return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}

// Differences wrap around in unsigned arithmetic, so any two int64 values round-trip.
std::int64_t diff(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
std::int64_t add(std::int64_t a, std::int64_t d) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(d));
}

class Reader {
  public:
    explicit Reader(std::string_view b) : p_(b.data()), end_(b.data() + b.size()) {}
    std::uint64_t varint() {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p_ == end_) throw BlockError("sample block truncated");
            const auto byte = static_cast<unsigned char>(*p_++);
            v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
            if (byte < 0x80) return v;
        }
        throw BlockError("sample block: varint longer than 64 bits");
    }
    bool done() const { return p_ == end_; }

  private:
    const char* p_;
    const char* end_;
};

}  // namespace

std::string encode_block(const std::vector<SampleRow>& rows) {
    std::string out;
    out.reserve(8 + rows.size() * 32);
    out += static_cast<char>(kFormat);
    put_varint(out, rows.size());
    SampleRow prev;
    for (const SampleRow& r : rows) {
        put_varint(out, (r.limit_null ? 1u : 0u) | (r.candidate_null ? 2u : 0u));
        for (int c = 0; c < SampleRow::kColumns; ++c)
            put_varint(out, zigzag(diff(r.v[c], prev.v[c])));
        prev = r;
    }
    return out;
}

void decode_block(std::string_view blob, std::int64_t since_s, std::int64_t until_s,
                  std::vector<Sample>& out) {
    if (blob.empty() || static_cast<unsigned char>(blob[0]) != kFormat)
        throw BlockError("sample block of an unknown format");
    Reader in(blob.substr(1));
    const std::uint64_t n = in.varint();
    if (n > blob.size()) throw BlockError("sample block: row count larger than the block");
    SampleRow r;
    for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t nulls = in.varint();
        r.limit_null = (nulls & 1) != 0;
        r.candidate_null = (nulls & 2) != 0;
        for (std::int64_t& v : r.v) v = add(v, unzigzag(in.varint()));
        if (r.v[0] < since_s || r.v[0] >= until_s) continue;
        // Room for the rest of the range at the first sample, as the row path reserves it.
        if (out.empty()) out.reserve(samples_until(r.v[0], r.v[1], until_s));
        out.push_back(to_sample(r));
    }
    if (!in.done()) throw BlockError("sample block: bytes after its last row");
}

}  // namespace grl::rlc
