// Unit tests of the etcd client's pure parts (daemon/etcd.h): the etcd:// URL, base64, the
// watch stream's line reader and the gateway's replies. The HTTP side is exercised against a
// real etcd by t/integration/test_fleet_etcd.py.
#include "grl/daemon/etcd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include <string>

namespace grl::daemon::etcd {
namespace {

TEST(EtcdUrl, HostPortKey) {
    std::string error;
    auto u = parse_url("etcd://127.0.0.1:2379/grl/limits", error);
    ASSERT_TRUE(u) << error;
    EXPECT_EQ(u->host, "127.0.0.1");
    EXPECT_EQ(u->port, 2379);
    EXPECT_EQ(u->key, "grl/limits");
    EXPECT_EQ(u->text(), "etcd://127.0.0.1:2379/grl/limits");
    EXPECT_TRUE(is_url("etcd://x"));
    std::string tls_error;
    auto tls = parse_url("etcds://etcd.example:2379/grl/limits", tls_error);
    ASSERT_TRUE(tls) << tls_error;
    EXPECT_TRUE(tls->tls);
    EXPECT_FALSE(u->tls);
    EXPECT_EQ(tls->host, "etcd.example");
    EXPECT_EQ(tls->text(), "etcds://etcd.example:2379/grl/limits");
    EXPECT_FALSE(is_url("/etc/grl/limits.yaml"));
}

TEST(EtcdUrl, BadUrlsNameTheValue) {
    auto error_of = [](const std::string& s) {
        std::string error;
        EXPECT_FALSE(parse_url(s, error)) << s;
        return error;
    };
    EXPECT_EQ(error_of("http://h:1/k"),
              "invalid etcd URL \"http://h:1/k\": not etcd:// or etcds:// (expected "
              "etcd://HOST:PORT/KEY or etcds://HOST:PORT/KEY)");
    EXPECT_EQ(error_of("etcd://h:1"),
              "invalid etcd URL \"etcd://h:1\": no key (expected etcd://HOST:PORT/KEY or "
              "etcds://HOST:PORT/KEY)");
    EXPECT_EQ(error_of("etcd://h:1/"),
              "invalid etcd URL \"etcd://h:1/\": empty key (expected etcd://HOST:PORT/KEY or "
              "etcds://HOST:PORT/KEY)");
    EXPECT_EQ(error_of("etcd://h/k"),
              "invalid etcd URL \"etcd://h/k\": no port (expected etcd://HOST:PORT/KEY or "
              "etcds://HOST:PORT/KEY)");
    EXPECT_EQ(error_of("etcd://:1/k"),
              "invalid etcd URL \"etcd://:1/k\": empty host (expected etcd://HOST:PORT/KEY or "
              "etcds://HOST:PORT/KEY)");
    for (const char* bad : {"etcd://h:0/k", "etcd://h:65536/k", "etcd://h:12a/k", "etcd://h:/k"})
        EXPECT_NE(error_of(bad).find("invalid port"), std::string::npos) << bad;
}

TEST(EtcdAuth, PasswordFilesAndTokens) {
    char path[] = "/tmp/grl-etcd-pw-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "s3cret\r\nignored\n", 17), 17);
    close(fd);
    std::string pw, error;
    ASSERT_TRUE(read_password_file(path, pw, error)) << error;
    EXPECT_EQ(pw, "s3cret");
    FILE* f = std::fopen(path, "w");
    std::fclose(f);
    EXPECT_FALSE(read_password_file(path, pw, error));
    EXPECT_EQ(error, std::string("password file ") + path + " is empty");
    unlink(path);
    EXPECT_FALSE(read_password_file(path, pw, error));
    EXPECT_EQ(error,
              std::string("cannot read password file ") + path + ": No such file or directory");
    std::string token;
    ASSERT_TRUE(parse_auth_reply(R"({"header":{"revision":"5"},"token":"abc.7"})", token, error));
    EXPECT_EQ(token, "abc.7");
    EXPECT_FALSE(parse_auth_reply(R"({"header":{}})", token, error));
    EXPECT_EQ(error, "authenticate reply has no token");
}

TEST(EtcdBase64, RoundTripsEveryLength) {
    EXPECT_EQ(base64_encode(""), "");
    EXPECT_EQ(base64_encode("f"), "Zg==");
    EXPECT_EQ(base64_encode("fo"), "Zm8=");
    EXPECT_EQ(base64_encode("foo"), "Zm9v");
    EXPECT_EQ(base64_encode("grl/limits"), "Z3JsL2xpbWl0cw==");  // as etcd writes it
    std::string all;
    for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
    for (std::size_t n = 0; n <= all.size(); n += 37) {
        std::string out;
        ASSERT_TRUE(base64_decode(base64_encode(all.substr(0, n)), out));
        EXPECT_EQ(out, all.substr(0, n));
    }
}

TEST(EtcdBase64, RejectsWhatIsNotBase64) {
    std::string out;
    EXPECT_FALSE(base64_decode("Zg=", out));       // length
    EXPECT_FALSE(base64_decode("Z!==", out));      // alphabet
    EXPECT_FALSE(base64_decode("Zg==Zg==", out));  // padding before the end
    EXPECT_FALSE(base64_decode("Z=g=", out));
    EXPECT_TRUE(base64_decode("YnVja2V0czoge30=", out));
    EXPECT_EQ(out, "buckets: {}");
}

TEST(EtcdLineReader, LinesAcrossChunks) {
    LineReader r(100);
    ASSERT_TRUE(r.feed("{\"a\":1}\n{\"b\""));
    EXPECT_EQ(r.next(), "{\"a\":1}");
    EXPECT_FALSE(r.next());
    ASSERT_TRUE(r.feed(":2}\r\n\n{\"c\":3}\n"));
    EXPECT_EQ(r.next(), "{\"b\":2}");
    EXPECT_EQ(r.next(), "");
    EXPECT_EQ(r.next(), "{\"c\":3}");
    EXPECT_FALSE(r.next());
}

TEST(EtcdLineReader, ALineTooLongIsAnError) {
    LineReader r(8);
    EXPECT_TRUE(r.feed("12345678\n"));
    EXPECT_FALSE(r.feed("123456789"));  // incomplete, and already too long
    LineReader q(8);
    EXPECT_FALSE(q.feed("123456789\n"));
}

TEST(EtcdReplies, Range) {
    RangeReply r;
    std::string error;
    // Copied from etcd 3.4's gateway: a missing key has no "kvs".
    ASSERT_TRUE(parse_range_reply(
        R"({"header":{"cluster_id":"1","member_id":"2","revision":"1","raft_term":"2"}})", r,
        error))
        << error;
    EXPECT_EQ(r.revision, 1);
    EXPECT_FALSE(r.kv.exists);
    ASSERT_TRUE(parse_range_reply(
        R"({"header":{"revision":"2"},"kvs":[{"key":"Z3JsL2xpbWl0cw==","create_revision":"2","mod_revision":"2","version":"1","value":"YnVja2V0czoge30="}],"count":"1"})",
        r, error))
        << error;
    EXPECT_EQ(r.revision, 2);
    EXPECT_TRUE(r.kv.exists);
    EXPECT_EQ(r.kv.value, "buckets: {}");
    EXPECT_EQ(r.kv.mod_revision, 2);
    // An empty value has no "value".
    ASSERT_TRUE(parse_range_reply(
        R"({"header":{"revision":"4"},"kvs":[{"key":"eA==","mod_revision":"4"}],"count":"1"})", r,
        error));
    EXPECT_TRUE(r.kv.exists);
    EXPECT_EQ(r.kv.value, "");
    EXPECT_FALSE(parse_range_reply("not json", r, error));
    EXPECT_FALSE(parse_range_reply(R"({"kvs":[]})", r, error));
    EXPECT_EQ(error, "no valid \"header\".\"revision\"");
    EXPECT_FALSE(parse_range_reply(R"({"header":{"revision":"x"}})", r, error));
    EXPECT_FALSE(
        parse_range_reply(R"({"header":{"revision":"3"},"kvs":[{"value":"%%%"}]})", r, error));
    EXPECT_EQ(error, "\"value\" is not base64");
}

TEST(EtcdReplies, WatchLines) {
    WatchMessage m;
    std::string error;
    ASSERT_TRUE(
        parse_watch_line(R"({"result":{"header":{"revision":"2"},"created":true}})", m, error))
        << error;
    EXPECT_TRUE(m.created);
    EXPECT_TRUE(m.events.empty());
    ASSERT_TRUE(parse_watch_line(
        R"({"result":{"header":{"revision":"3"},"events":[{"kv":{"key":"eA==","mod_revision":"2","value":"YQ=="}},{"type":"DELETE","kv":{"key":"eA==","mod_revision":"3"}}]}})",
        m, error))
        << error;
    ASSERT_EQ(m.events.size(), 2u);
    EXPECT_TRUE(m.events[0].exists);
    EXPECT_EQ(m.events[0].value, "a");
    EXPECT_EQ(m.events[0].mod_revision, 2);
    EXPECT_FALSE(m.events[1].exists);
    EXPECT_EQ(m.events[1].mod_revision, 3);
    ASSERT_TRUE(parse_watch_line(
        R"({"result":{"header":{"revision":"9"},"canceled":true,"compact_revision":"5"}})", m,
        error));
    EXPECT_TRUE(m.canceled);
    EXPECT_EQ(m.compact_revision, 5);
    EXPECT_FALSE(
        parse_watch_line(R"({"error":{"grpc_code":14,"message":"unavailable"}})", m, error));
    EXPECT_NE(error.find("unavailable"), std::string::npos);
    EXPECT_FALSE(
        parse_watch_line(R"({"result":{"header":{"revision":"3"},"events":[{}]}})", m, error));
    EXPECT_EQ(error, "an event without \"kv\"");
}

TEST(EtcdReplies, Put) {
    std::int64_t rev = 0;
    std::string error;
    ASSERT_TRUE(parse_put_reply(R"({"header":{"revision":"7"}})", rev, error));
    EXPECT_EQ(rev, 7);
    EXPECT_FALSE(parse_put_reply("[]", rev, error));
}

}  // namespace
}  // namespace grl::daemon::etcd
