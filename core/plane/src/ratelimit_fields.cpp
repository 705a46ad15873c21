#include "grl/plane/ratelimit_fields.h"

#include <cstring>

namespace grl::fields {
namespace {

char* put(char* p, char* end, std::string_view s) {
    if (p == nullptr || static_cast<std::size_t>(end - p) < s.size()) return nullptr;
    std::memcpy(p, s.data(), s.size());
    return p + s.size();
}

// By hand rather than snprintf: this runs per response (bench/instructions_per_request.py).
char* put_uint(char* p, char* end, std::uint64_t v) {
    char buf[20];
    char* d = buf + sizeof(buf);
    do {
        *--d = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v);
    return put(p, end, std::string_view(d, static_cast<std::size_t>(buf + sizeof(buf) - d)));
}

char* member(char* begin, char* p, char* end, std::string_view name) {
    if (p != begin) p = put(p, end, ", ");
    p = put(p, end, "\"");
    p = put(p, end, name);  // [A-Za-z0-9_.:-] only (valid_name): no escaping in an SF string
    return put(p, end, "\"");
}

}  // namespace

Quota quota_of(std::uint64_t limit_mrps) {
    if (limit_mrps % 1000 == 0) return {limit_mrps / 1000, 1};
    // rate=...r/m is stored rounded down to a milli-request per second: rounding back to
    // requests per minute restores what the operator wrote (100r/m: 1666 -> 100).
    std::uint64_t per_minute = (limit_mrps * 60 + 500) / 1000;
    return {per_minute ? per_minute : 1, 60};
}

char* append_policy(char* begin, char* p, char* end, std::string_view name,
                    std::uint64_t limit_mrps) {
    Quota q = quota_of(limit_mrps);
    p = member(begin, p, end, name);
    p = put(p, end, ";q=");
    p = put_uint(p, end, q.q);
    p = put(p, end, ";w=");
    return put_uint(p, end, q.w);
}

char* append_exhausted(char* begin, char* p, char* end, std::string_view name,
                       std::uint64_t t_seconds) {
    p = member(begin, p, end, name);
    p = put(p, end, ";r=0;t=");
    return put_uint(p, end, t_seconds);
}

char* append_quota_policy(char* begin, char* p, char* end, std::string_view name, std::uint64_t q,
                          std::uint64_t w) {
    p = member(begin, p, end, name);
    p = put(p, end, ";q=");
    p = put_uint(p, end, q);
    p = put(p, end, ";w=");
    return put_uint(p, end, w);
}

char* append_remaining(char* begin, char* p, char* end, std::string_view name, std::uint64_t r,
                       std::uint64_t t) {
    p = member(begin, p, end, name);
    p = put(p, end, ";r=");
    p = put_uint(p, end, r);
    p = put(p, end, ";t=");
    return put_uint(p, end, t);
}

std::string_view problem_type(unsigned status) {
    return status == 503
               ? "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
               : "https://iana.org/assignments/http-problem-types#quota-exceeded";
}

std::string_view problem_title(unsigned status) {
    return status == 503 ? "Temporary Reduced Capacity" : "Quota Exceeded";
}

char* append_problem(char* p, char* end, unsigned status, std::string_view bucket, bool per_key) {
    p = put(p, end, "{\"type\":\"");
    p = put(p, end, problem_type(status));
    p = put(p, end, "\",\"title\":\"");
    p = put(p, end, problem_title(status));
    p = put(p, end, "\",\"status\":");
    p = put_uint(p, end, status);
    p = put(p, end, ",\"detail\":\"rejected by bucket ");
    p = put(p, end, bucket);
    p = put(p, end,
            per_key ? ": the request's key is over the bucket's limit for each key"
                      "\",\"violated-policies\":[\""
                    : ", which is over its fleet-wide limit\",\"violated-policies\":[\"");
    p = put(p, end, bucket);
    return put(p, end, "\"]}\n");
}

}  // namespace grl::fields
