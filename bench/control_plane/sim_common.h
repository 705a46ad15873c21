// What the control-plane simulators (fleet_sim.cpp, controller_sim.cpp) share: clocks, the
// exit on a usage or setup error, and their ZeroMQ sockets (benchmark only).
#pragma once

#include <errno.h>  // program_invocation_short_name (glibc)
#include <time.h>
#include <zmq.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace grl::sim {

inline double wall_s() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

inline double mono_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

[[noreturn]] inline void die(const std::string& m) {
    std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, m.c_str());
    std::exit(2);
}

inline void set_int(void* s, int option, int value) {
    zmq_setsockopt(s, option, &value, sizeof(value));
}

// A socket of `type` that drops what it holds when closed (LINGER 0).
inline void* socket(void* ctx, int type) {
    void* s = zmq_socket(ctx, type);
    if (s == nullptr) die(std::string("zmq_socket: ") + zmq_strerror(zmq_errno()));
    set_int(s, ZMQ_LINGER, 0);
    return s;
}

inline void connect(void* s, const std::string& ep) {
    if (zmq_connect(s, ep.c_str()) != 0) die("connect " + ep + ": " + zmq_strerror(zmq_errno()));
}

// A PUSH socket connected to `ep` (one TCP connection), like a reporting nginx or a collector.
inline void* push(void* ctx, const std::string& ep, int sndhwm = 1000) {
    void* s = socket(ctx, ZMQ_PUSH);
    set_int(s, ZMQ_SNDHWM, sndhwm);
    connect(s, ep);
    return s;
}

// A SUB socket on `ep` subscribed to `topics`; extra options (RCVHWM, RCVBUF...) are set before
// it connects.
inline void* subscriber(void* ctx, const std::string& ep, const std::vector<std::string>& topics,
                        const std::vector<std::pair<int, int>>& options = {}) {
    void* s = socket(ctx, ZMQ_SUB);
    for (const auto& [option, value] : options) set_int(s, option, value);
    for (const std::string& t : topics) zmq_setsockopt(s, ZMQ_SUBSCRIBE, t.data(), t.size());
    connect(s, ep);
    return s;
}

}  // namespace grl::sim
