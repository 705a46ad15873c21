// The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-11) and the
// problem+json body of a rejection, written into a caller's buffer: no allocation, so the
// nginx header filter can call them per response. docs/directives.md, "Conventions".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace grl::fields {

// A limit in milli-requests per second as a quota `q` over a window `w` in whole seconds:
// w = 1 for a whole number of requests per second (rate=300r/s: q=300;w=1, limit 0: q=0),
// else w = 60 and q the requests per minute (rate=90r/m: q=90;w=60; 1r/m: q=1;w=60).
struct Quota {
    std::uint64_t q = 0;
    std::uint64_t w = 1;
};
Quota quota_of(std::uint64_t limit_mrps);

// Appends one RateLimit-Policy list member, `"NAME";q=Q;w=W`, preceded by ", " when `p` is
// not `begin`. Returns the new end, or nullptr when it does not fit before `end`.
char* append_policy(char* begin, char* p, char* end, std::string_view name,
                    std::uint64_t limit_mrps);

// Appends one RateLimit list member, `"NAME";r=0;t=T`: the bucket's quota is used up (it is
// dropping), and the client should send nothing under it for T seconds. grl can say no
// more than that: its drops are a fleet-wide probability, not a per-client count.
char* append_exhausted(char* begin, char* p, char* end, std::string_view name,
                       std::uint64_t t_seconds);

// A quota= member: `"NAME";q=Q;w=W` (Q units per window of W seconds).
char* append_quota_policy(char* begin, char* p, char* end, std::string_view name, std::uint64_t q,
                          std::uint64_t w);
// `"NAME";r=R;t=T`: R units left, T seconds until the window ends (a quota= member).
char* append_remaining(char* begin, char* p, char* end, std::string_view name, std::uint64_t r,
                       std::uint64_t t);

// The problem type of a rejection with `status`: 503 is temporary-reduced-capacity, any
// other status quota-exceeded (the draft's registrations).
std::string_view problem_type(unsigned status);
std::string_view problem_title(unsigned status);

// Bytes append_problem() writes at most for a bucket name of kMaxNameLen.
inline constexpr std::size_t kProblemMax = 512;

// Appends the application/problem+json body (RFC 9457) of a request rejected by `bucket`;
// `per_key`: a keyed bucket, whose limit is each key's and which rejected the request's key
// (the key itself is not written: it may be a credential). Returns the new end, or nullptr
// when it does not fit.
char* append_problem(char* p, char* end, unsigned status, std::string_view bucket,
                     bool per_key = false);

}  // namespace grl::fields
