#include "grl/bucket.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace grl {

struct Matcher::Compiled {
    pcre2_code* code = nullptr;
    pcre2_match_data* data = nullptr;
    ~Compiled() {
        if (data) pcre2_match_data_free(data);
        if (code) pcre2_code_free(code);
    }
};

namespace {

std::string pcre_error(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof(buf));
    return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string check_regex(std::string_view pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     0, &err, &off, nullptr);
    if (!code) {
        return "invalid regex \"" + std::string(pattern) + "\": " + pcre_error(err) +
               " at offset " + std::to_string(off);
    }
    pcre2_code_free(code);
    return {};
}

void Matcher::CompiledDeleter::operator()(Compiled* c) const { delete c; }

Matcher::CompiledPtr Matcher::compile(std::string_view pattern, std::string& error) {
    error = check_regex(pattern);
    if (!error.empty()) return nullptr;
    int err = 0;
    PCRE2_SIZE off = 0;
    CompiledPtr c(new Compiled());
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &err,
                            &off, nullptr);
    // JIT is an optimisation only: a failure leaves the interpreter in use.
    (void)pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
    c->data = pcre2_match_data_create_from_pattern(c->code, nullptr);
    if (!c->data) {
        error = "out of memory compiling regex";
        return nullptr;
    }
    return c;
}

Matcher::~Matcher() = default;

std::string Matcher::add(const BucketDef& def) {
    for (const Entry& e : entries_) {
        if (e.def.name == def.name) return "duplicate bucket \"" + def.name + "\"";
    }
    Entry e;
    e.def = def;
    std::string error;
    if (def.caller.kind == MatchKind::Regex) {
        e.caller_re = compile(def.caller.value, error);
        if (!e.caller_re) return error;
    }
    if (def.procedure.kind == MatchKind::Regex) {
        e.procedure_re = compile(def.procedure.value, error);
        if (!e.procedure_re) return error;
    }
    entries_.push_back(std::move(e));
    return {};
}

bool Matcher::matches(const MatchSpec& spec, const Compiled* re, std::string_view v) {
    switch (spec.kind) {
        case MatchKind::Any: return true;
        case MatchKind::Exact: return v == spec.value;
        case MatchKind::Prefix: return v.substr(0, spec.value.size()) == spec.value;
        case MatchKind::Regex:
            return pcre2_match(re->code, reinterpret_cast<PCRE2_SPTR>(v.data()), v.size(), 0, 0,
                               re->data, nullptr) >= 0;
    }
    return false;
}

std::size_t Matcher::match(const RequestKey& key, std::uint16_t* out, std::size_t max) const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < entries_.size() && n < max; ++i) {
        const Entry& e = entries_[i];
        if (e.def.caller.kind != MatchKind::Any) {
            if (!key.has_caller || !matches(e.def.caller, e.caller_re.get(), key.caller)) continue;
        }
        if (!matches(e.def.procedure, e.procedure_re.get(), key.procedure)) continue;
        out[n++] = static_cast<std::uint16_t>(i);
    }
    return n;
}

}  // namespace grl
