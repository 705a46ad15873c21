#include "grl/daemon/limits_file.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "grl/common/bucket.h"
#include "grl/common/parse.h"
#include "grl/wire/wire_control.h"

namespace grl::daemon {

namespace {

struct Reject {
    std::string message;
};

std::string at(const std::string& file, const YAML::Node& n) {
    const YAML::Mark m = n.Mark();
    if (m.line < 0) return file;
    return file + ":" + std::to_string(m.line + 1);
}

std::string scalar(const std::string& file, const std::string& what, const YAML::Node& n) {
    if (!n.IsScalar()) throw Reject{at(file, n) + ": " + what + ": expected a single value"};
    return n.Scalar();
}

void take_match(const std::string& file, const std::string& where, const std::string& key,
                const YAML::Node& v, control::FileLimit& f, bool& has_caller, bool& has_procedure) {
    std::string value = scalar(file, where + "field \"" + key + "\"", v);
    bool caller = key.compare(0, 6, "caller") == 0;
    if ((caller && has_caller) || (!caller && has_procedure)) {
        throw Reject{at(file, v) + ": " + where + "field \"" + key + "\": more than one " +
                     (caller ? "caller" : "procedure") + " match"};
    }
    if (value.empty())
        throw Reject{at(file, v) + ": " + where + "field \"" + key + "\": empty value"};
    if (value.size() > wire::kMaxMatchValueLen) {
        throw Reject{at(file, v) + ": " + where + "field \"" + key + "\": longer than " +
                     std::to_string(wire::kMaxMatchValueLen) + " bytes"};
    }
    MatchKind kind = MatchKind::Exact;
    if (key.size() > 7 && key.compare(key.size() - 7, 7, "_prefix") == 0) kind = MatchKind::Prefix;
    if (key.size() > 6 && key.compare(key.size() - 6, 6, "_regex") == 0) {
        kind = MatchKind::Regex;
        std::string err = check_regex(value);
        if (!err.empty())
            throw Reject{at(file, v) + ": " + where + "field \"" + key + "\": " + err};
    }
    if (caller) {
        f.match.caller = value;
        f.match.caller_kind = kind;
        has_caller = true;
    } else {
        f.match.procedure = value;
        f.match.procedure_kind = kind;
        has_procedure = true;
    }
    f.has_match = true;
}

// A version label ends up in a Prometheus label and in grlctl's status line: short, printable.
std::string check_version(const std::string& v) {
    if (v.empty() || v.size() > wire::kMaxLimitsVersionLen)
        return "invalid version \"" + v + "\", expected 1-" +
               std::to_string(wire::kMaxLimitsVersionLen) + " characters";
    for (char c : v) {
        if (c < 0x21 || c > 0x7e)
            return "invalid version \"" + v + "\", expected printable ASCII without spaces";
    }
    return {};
}

control::Limits parse_tree(const YAML::Node& root, const std::string& file) {
    control::Limits out;
    if (!root || root.IsNull()) return out;  // an empty file: no overrides
    if (!root.IsMap()) throw Reject{at(file, root) + ": expected a map with a \"buckets\" key"};
    YAML::Node buckets;
    for (const auto& kv : root) {
        std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        if (key == "version") {
            out.version = scalar(file, "field \"version\"", kv.second);
            std::string err = check_version(out.version);
            if (!err.empty()) throw Reject{at(file, kv.second) + ": field \"version\": " + err};
            continue;
        }
        if (key != "buckets")
            throw Reject{at(file, kv.first) + ": unknown field \"" + key +
                         "\" (expected buckets, version)"};
        buckets = kv.second;
    }
    if (!buckets || buckets.IsNull()) return out;
    if (!buckets.IsMap())
        throw Reject{at(file, buckets) + ": \"buckets\": expected a map of bucket names"};
    std::size_t runtime = 0;
    for (const auto& b : buckets) {
        std::string name = b.first.IsScalar() ? b.first.Scalar() : "";
        if (!valid_name(name)) {
            throw Reject{at(file, b.first) + ": invalid bucket name \"" + name +
                         "\", expected 1-63 of [A-Za-z0-9_.:-]"};
        }
        std::string where = "bucket \"" + name + "\": ";
        if (out.buckets.count(name))
            throw Reject{at(file, b.first) + ": " + where + "is duplicate"};
        if (!b.second.IsMap()) {
            throw Reject{at(file, b.second) + ": " + where +
                         "expected a map of fields (limit, mode, ...)"};
        }
        control::FileLimit f;
        bool has_caller = false, has_procedure = false;
        std::optional<Scope> scope;
        YAML::Node scope_node;
        for (const auto& kv : b.second) {
            std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
            const YAML::Node& v = kv.second;
            std::string field = where + "field \"" + key + "\"";
            if (key == "limit") {
                Parsed<std::uint64_t> limit = parse_limit(scalar(file, field, v));
                if (!limit) throw Reject{at(file, v) + ": " + field + ": " + limit.error};
                f.limit_mrps = limit.value;
            } else if (key == "candidate") {
                Parsed<std::uint64_t> candidate = parse_limit(scalar(file, field, v));
                if (!candidate) throw Reject{at(file, v) + ": " + field + ": " + candidate.error};
                f.candidate_mrps = candidate.value;
            } else if (key == "mode") {
                std::string s = scalar(file, field, v);
                auto m = parse_mode(s);
                if (!m)
                    throw Reject{at(file, v) + ": " + field + ": invalid mode \"" + s +
                                 "\", expected deny or shadow"};
                f.mode = m;
            } else if (key == "scope") {
                std::string s = scalar(file, field, v);
                scope = parse_scope(s);
                if (!scope) {
                    throw Reject{at(file, v) + ": " + field + ": invalid scope \"" + s +
                                 "\", expected global, region or zone"};
                }
                scope_node = v;
            } else if (key == "caller" || key == "caller_prefix" || key == "procedure" ||
                       key == "procedure_prefix" || key == "procedure_regex") {
                take_match(file, where, key, v, f, has_caller, has_procedure);
            } else {
                throw Reject{at(file, kv.first) + ": " + where + "unknown field \"" + key +
                             "\" (expected limit, mode, candidate, scope, caller, caller_prefix, "
                             "procedure, procedure_prefix, procedure_regex)"};
            }
        }
        if (f.has_match) {
            if (!f.limit_mrps) {
                throw Reject{at(file, b.first) + ": " + where +
                             "a run-time bucket (caller/procedure) must have field \"limit\""};
            }
            f.match.scope = scope.value_or(Scope::Global);
            if (++runtime > wire::kMaxRuntimeBuckets) {
                throw Reject{at(file, b.first) + ": " + where + "more than " +
                             std::to_string(wire::kMaxRuntimeBuckets) + " run-time buckets"};
            }
        } else if (scope) {
            throw Reject{at(file, scope_node) + ": " + where +
                         "field \"scope\": only a run-time bucket (with caller/procedure) has a "
                         "scope here; a configured bucket's scope comes from nginx.conf"};
        } else if (!f.limit_mrps && !f.mode && !f.candidate_mrps) {
            throw Reject{at(file, b.first) + ": " + where +
                         "needs field \"limit\", \"mode\" and/or \"candidate\""};
        }
        out.buckets.emplace(name, f);
    }
    return out;
}

}  // namespace

LimitsLoad parse_limits(const std::string& text, const std::string& file_name) {
    LimitsLoad r;
    try {
        YAML::Node root = YAML::Load(text);
        r.limits = parse_tree(root, file_name);
        r.ok = true;
    } catch (const Reject& e) {
        r.error = e.message;
    } catch (const YAML::Exception& e) {
        r.error = file_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                  std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg;
    } catch (const std::exception& e) {
        r.error = file_name + ": " + e.what();
    }
    return r;
}

LimitsLoad load_limits_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) {
        LimitsLoad r;
        r.error = path + ": cannot read";
        return r;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_limits(ss.str(), path);
}

}  // namespace grl::daemon
