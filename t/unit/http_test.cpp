// Unit tests of the /metrics server's request-head reader (daemon/http.h).
#include "grl/daemon/http.h"

#include <gtest/gtest.h>

namespace grl::daemon {
namespace {

TEST(RequestHead, MethodAndPathWithoutQuery) {
    RequestHead h = parse_request_head("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
    EXPECT_TRUE(h.complete);
    EXPECT_EQ(h.method, "GET");
    EXPECT_EQ(h.path, "/metrics");
    EXPECT_EQ(h.query, "x=1");
    h = parse_request_head("HEAD /metrics HTTP/1.0\n\n");
    EXPECT_EQ(h.query, "");
    EXPECT_TRUE(h.complete);
    EXPECT_EQ(h.method, "HEAD");
    EXPECT_EQ(h.path, "/metrics");
}

TEST(RequestHead, IncompleteAndOddRequests) {
    EXPECT_FALSE(parse_request_head("GET /metrics HTTP/1.1\r\n").complete);
    RequestHead h = parse_request_head("GET\r\n\r\n");
    EXPECT_TRUE(h.complete);
    EXPECT_EQ(h.method, "GET");
    EXPECT_EQ(h.path, "");
    h = parse_request_head("GET /metrics\r\n\r\n");  // HTTP/0.9 style: no version
    EXPECT_EQ(h.path, "/metrics");
    h = parse_request_head("");
    EXPECT_FALSE(h.complete);
    EXPECT_EQ(h.method, "");
}

}  // namespace
}  // namespace grl::daemon
