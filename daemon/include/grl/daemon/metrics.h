// Prometheus text exposition (format 0.0.4), built at scrape time from the daemon's state.
//
// Metrics are declared once, as data (as Envoy declares its stats):
//  - a counter the daemon owns is one line of an X-macro list, which makes both its field and
//    its family (GRL_COUNTER_FIELD / GRL_COUNTER_FAMILY, below): adding one is that line plus
//    its increment;
//  - any other family is one row of a table of Family<S>: name, type, help and how its
//    samples are read from S at scrape time; write() writes a table in its order.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace grl::daemon {

using Label = std::pair<std::string_view, std::string_view>;

class MetricsText {
  public:
    // Starts a metric family (HELP and TYPE lines); type is "counter" or "gauge".
    void family(std::string_view name, std::string_view type, std::string_view help);
    void sample(std::string_view name, std::initializer_list<Label> labels, double value);
    void sample(std::string_view name, double value) { sample(name, {}, value); }
    const std::string& text() const { return out_; }

  private:
    std::string out_;
};

// The samples of one family: the family names them, so that a row says its name once.
class Samples {
  public:
    Samples(MetricsText& m, std::string_view name) : m_(m), name_(name) {}
    void operator()(double v) { m_.sample(name_, v); }
    void operator()(std::initializer_list<Label> labels, double v) { m_.sample(name_, labels, v); }
    MetricsText& text() { return m_; }  // histograms: their _bucket, _sum and _count samples

  private:
    MetricsText& m_;
    std::string_view name_;
};

// One metric family: a row of a table.
template <class S>
struct Family {
    std::string_view name;
    std::string_view type;  // "counter", "gauge" or "histogram"
    std::string_view help;
    void (*samples)(Samples&, const S&);
};

template <class S, std::size_t N>
void write(MetricsText& m, const Family<S> (&table)[N], const S& s) {
    for (const Family<S>& f : table) {
        m.family(f.name, f.type, f.help);
        Samples out(m, f.name);
        f.samples(out, s);
    }
}

// The X-macro's two expansions. A list is `#define LIST(COUNTER, COUNTER_BY)` with rows
//   COUNTER(field, "metric_name", "help")
//   COUNTER_BY(field, "metric_name", "label", kValues, "help")
// where kValues is an array of the label's values, each written (0 too): strings, or enum
// values written as their to_string(); the field is indexed as kValues is (index_of()).
// `struct Counters { LIST(GRL_COUNTER_FIELD, GRL_COUNTER_BY_FIELD) };` makes the fields and
// `const Family<Counters> kTable[] = {LIST(GRL_COUNTER_FAMILY, GRL_COUNTER_BY_FAMILY)};` the
// families that write them.
#define GRL_COUNTER_FIELD(field, name, help) std::uint64_t field = 0;
#define GRL_COUNTER_BY_FIELD(field, name, label, values, help) \
    std::uint64_t field[std::size(values)] = {};
#define GRL_COUNTER_FAMILY(field, name, help) \
    {name, "counter", help,                   \
     [](::grl::daemon::Samples& o, const auto& s) { o(static_cast<double>(s.field)); }},
#define GRL_COUNTER_BY_FAMILY(field, name, label, values, help)            \
    {name, "counter", help, [](::grl::daemon::Samples& o, const auto& s) { \
         for (std::size_t i = 0; i < std::size(values); ++i)               \
             o({{label, ::grl::daemon::label_value((values)[i])}},         \
               static_cast<double>(s.field[i]));                           \
     }},

inline std::string_view label_value(std::string_view v) {
    return v;
}
template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
std::string_view label_value(E v) {
    return to_string(v);  // the enum's own, found where it is declared
}

// The position of `v` in a COUNTER_BY's values: its field's index.
template <class T, std::size_t N>
constexpr std::size_t index_of(const T (&values)[N], T v) {
    for (std::size_t i = 0; i < N; ++i) {
        if (values[i] == v) return i;
    }
    assert(!"a counted value missing from its COUNTER_BY's values");
    return 0;
}

// grl_build_info{version,component} 1: which build each scraped process runs (the nginx
// status page writes the same family with component="nginx").
void write_build_info(MetricsText& m, std::string_view component);

}  // namespace grl::daemon
