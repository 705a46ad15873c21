#include "grl/daemon/metrics.h"

#include <cmath>
#include <cstdio>

namespace grl::daemon {

void MetricsText::family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
}

void MetricsText::sample(std::string_view name, std::initializer_list<Label> labels, double value) {
    out_ += name;
    if (labels.size()) {
        out_ += '{';
        bool first = true;
        for (const Label& l : labels) {
            if (!first) out_ += ',';
            first = false;
            out_ += l.first;
            out_ += "=\"";
            for (char c : l.second) {
                if (c == '\\' || c == '"') {
                    out_ += '\\';
                    out_ += c;
                } else if (c == '\n') {
                    out_ += "\\n";
                } else {
                    out_ += c;
                }
            }
            out_ += '"';
        }
        out_ += '}';
    }
    char buf[64];
    if (std::isnan(value)) {
        std::snprintf(buf, sizeof(buf), " NaN\n");
    } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
        std::snprintf(buf, sizeof(buf), " %.0f\n", value);
    } else {
        // 15 digits: a Unix timestamp keeps its milliseconds (%.9g rounded it to 10 s).
        std::snprintf(buf, sizeof(buf), " %.15g\n", value);
    }
    out_ += buf;
}

void write_build_info(MetricsText& m, std::string_view component) {
    m.family("grl_build_info", "gauge", "The grl version this process runs (always 1).");
    m.sample("grl_build_info", {{"version", GRL_VERSION}, {"component", component}}, 1);
}

}  // namespace grl::daemon
