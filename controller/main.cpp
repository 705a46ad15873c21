// grl-controller: command line -> Config -> Daemon on the event loop. See
// docs/control-plane.md for the options and controller/controller_daemon.h for the parts.
#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <exception>

#include "config.h"
#include "controller_daemon.h"
#include "grl/daemon/files.h"

using namespace grl;

int main(int argc, char** argv) {
    daemon::block_signals();
    // Usage messages of 10,000 buckets are ~0.5 MB each, many per second: above glibc's mmap
    // threshold every one was a fresh mmap, zeroed by the kernel and unmapped again (a quarter
    // of the controller's CPU at 50 zones x 10,000 buckets, bench/control_plane). Keep such
    // blocks on the heap and reuse them.
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    daemon::cli::Outcome<controller::Config> parsed = controller::parse_config(argc, argv);
    if (!parsed.config) {
        std::fputs(parsed.text.c_str(), parsed.exit_code == 0 ? stdout : stderr);
        return parsed.exit_code;
    }
    const controller::Config& c = *parsed.config;
    try {
        daemon::log_init("grl-controller[" + c.opts.name + "]", c.log_level);
        ::zmq::context_t ctx = daemon::make_context();
        daemon::Loop loop;
        controller::Daemon d(c, ctx, loop);
        if (!c.endpoints_file.empty())
            daemon::write_endpoints_file(c.endpoints_file, d.endpoints());
        loop.on_signal(SIGINT, [&] { loop.stop(); });
        loop.on_signal(SIGTERM, [&] { loop.stop(); });
        loop.on_signal(SIGHUP, [&] {
            d.reload_limits("SIGHUP");
            d.reload_keys("SIGHUP");
        });
        loop.run();
        d.stopped();
        daemon::log_info("stopped");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "grl-controller: %s\n", e.what());
        return 1;
    }
    return 0;
}
