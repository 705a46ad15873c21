// grl-collector: command line -> Config -> Collector on the event loop. See
// docs/control-plane.md for the options and collector/collector.h for the component.
#include <csignal>
#include <cstdio>
#include <exception>

#include "collector.h"
#include "config.h"
#include "grl/daemon/files.h"

using namespace grl;

int main(int argc, char** argv) {
    daemon::block_signals();
    daemon::cli::Outcome<collector::Config> parsed = collector::parse_config(argc, argv);
    if (!parsed.config) {
        std::fputs(parsed.text.c_str(), parsed.exit_code == 0 ? stdout : stderr);
        return parsed.exit_code;
    }
    const collector::Config& c = *parsed.config;
    try {
        daemon::log_init("grl-collector[" + c.name + "]", c.log_level);
        ::zmq::context_t ctx = daemon::make_context();
        daemon::Loop loop;
        collector::Collector col(c, ctx, loop);
        if (!c.endpoints_file.empty())
            daemon::write_endpoints_file(c.endpoints_file, col.endpoints());
        loop.on_signal(SIGINT, [&] { loop.stop(); });
        loop.on_signal(SIGTERM, [&] { loop.stop(); });
        loop.on_signal(SIGHUP, [&] { col.reload_keys("SIGHUP"); });
        loop.run();
        daemon::log_info("stopped");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "grl-collector: %s\n", e.what());
        return 1;
    }
    return 0;
}
