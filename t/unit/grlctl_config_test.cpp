// grlctl's command line (controller/grlctl_config.cpp): each command into its admin_request,
// options before or after the command, usage errors naming the option and the value.
#include "controller/grlctl_config.h"

#include <gtest/gtest.h>

#include "cli_args.h"

namespace grl::grlctl {
namespace {

daemon::cli::Outcome<Config> parse(std::vector<std::string> args, const char* env = nullptr) {
    test::Argv a("grlctl", std::move(args));
    return parse_config(a.argc(), a.argv(), env);
}

Config ok(std::vector<std::string> args) {
    auto p = parse(std::move(args));
    EXPECT_TRUE(p.config) << p.text;
    return p.config.value_or(Config{});
}

std::string error_of(std::vector<std::string> args) {
    auto p = parse(std::move(args));
    EXPECT_FALSE(p.config);
    EXPECT_EQ(p.exit_code, 2);
    return p.text;
}

#define EXPECT_MENTIONS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(GrlctlConfig, Defaults) {
    Config c = ok({"status"});
    EXPECT_EQ(c.command, Command::Status);
    EXPECT_EQ(c.request.op, wire::AdminOp::Status);
    EXPECT_EQ(c.controller, "tcp://127.0.0.1:7203");
    EXPECT_FALSE(c.json);
    EXPECT_EQ(c.timeout_ms, 3000u);
    EXPECT_FALSE(c.keypair);
    auto p = parse({"status"}, "tcp://ctl:9");
    ASSERT_TRUE(p.config);
    EXPECT_EQ(p.config->controller, "tcp://ctl:9");  // $GRL_CONTROLLER
    p = parse({"--controller", "tcp://other:1", "status"}, "tcp://ctl:9");
    ASSERT_TRUE(p.config);
    EXPECT_EQ(p.config->controller, "tcp://other:1");
}

TEST(GrlctlConfig, KeysAsksForAKeyedBucketsBusiestKeys) {
    Config c = ok({"keys", "per-client"});
    EXPECT_EQ(c.command, Command::Keys);
    EXPECT_EQ(c.request.op, wire::AdminOp::Keys);
    EXPECT_EQ(c.request.bucket, "per-client");
    EXPECT_EQ(c.request.top, 0u);  // the controller's default (20)
    c = ok({"keys", "per-client", "--top", "5", "--json"});
    EXPECT_EQ(c.request.top, 5u);
    EXPECT_TRUE(c.json);
    EXPECT_MENTIONS(error_of({"keys"}), "BUCKET");
    EXPECT_MENTIONS(error_of({"keys", "per-client", "--top", "0"}), "--top");
    EXPECT_MENTIONS(error_of({"keys", "per-client", "--top", "1025"}), "--top");
}

TEST(GrlctlConfig, TopAsksForTheBucketsEveryInterval) {
    Config c = ok({"top"});
    EXPECT_EQ(c.command, Command::Top);
    EXPECT_EQ(c.request.op, wire::AdminOp::Buckets);
    EXPECT_EQ(c.top_interval_ms, 1000u);
    EXPECT_EQ(c.top_count, 0u);
    c = ok({"top", "--interval", "500ms", "--count", "3", "--controller", "tcp://ctl:9"});
    EXPECT_EQ(c.top_interval_ms, 500u);
    EXPECT_EQ(c.top_count, 3u);
    EXPECT_EQ(c.controller, "tcp://ctl:9");
    EXPECT_MENTIONS(error_of({"top", "--interval", "10ms"}), "--interval");
    EXPECT_MENTIONS(error_of({"top", "--count", "x"}), "--count");
}

TEST(GrlctlConfig, GlobalOptionsBeforeOrAfterTheCommand) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"--controller", "tcp://c:1", "--json", "--timeout", "1s", "buckets", "--hosts"},
             {"buckets", "--hosts", "--json", "--timeout", "1s", "--controller", "tcp://c:1"}}) {
        Config c = ok(args);
        EXPECT_EQ(c.command, Command::Buckets);
        EXPECT_EQ(c.controller, "tcp://c:1");
        EXPECT_TRUE(c.json);
        EXPECT_EQ(c.timeout_ms, 1000u);
        EXPECT_TRUE(c.request.hosts);
        EXPECT_EQ(c.request.bucket, "");
    }
}

TEST(GrlctlConfig, Commands) {
    Config c = ok({"list", "api"});
    EXPECT_EQ(c.command, Command::Buckets);
    EXPECT_EQ(c.request.op, wire::AdminOp::Buckets);
    EXPECT_EQ(c.request.bucket, "api");
    EXPECT_FALSE(c.request.hosts);

    c = ok({"show", "api"});
    EXPECT_EQ(c.command, Command::Show);
    EXPECT_EQ(c.request.op, wire::AdminOp::Buckets);
    EXPECT_TRUE(c.request.hosts);

    c = ok({"set", "g", "--limit", "50r/s", "--mode", "shadow", "--for", "2s"});
    EXPECT_EQ(c.request.op, wire::AdminOp::Set);
    EXPECT_EQ(c.request.bucket, "g");
    EXPECT_EQ(c.request.limit_mrps, 50000u);
    EXPECT_EQ(c.request.mode, Mode::Shadow);
    EXPECT_EQ(c.request.for_ms, 2000u);
    c = ok({"set", "g", "--limit", "0"});
    EXPECT_EQ(c.request.limit_mrps, 0u);
    EXPECT_FALSE(c.request.mode);

    c = ok({"clear", "g"});
    EXPECT_EQ(c.request.op, wire::AdminOp::Clear);
    EXPECT_FALSE(c.request.clear_limit || c.request.clear_mode);
    c = ok({"clear", "g", "mode"});
    EXPECT_TRUE(c.request.clear_mode);
    EXPECT_FALSE(c.request.clear_limit);

    c = ok({"add", "bots", "--caller-prefix", "bot-", "--limit", "0", "--scope", "zone"});
    EXPECT_EQ(c.request.op, wire::AdminOp::Add);
    EXPECT_TRUE(c.request.has_match);
    EXPECT_EQ(c.request.match.caller, "bot-");
    EXPECT_EQ(c.request.match.caller_kind, MatchKind::Prefix);
    EXPECT_EQ(c.request.match.scope, Scope::Zone);
    EXPECT_EQ(c.request.limit_mrps, 0u);
    c = ok({"add", "crawl", "--procedure-regex", "^/crawl/[0-9]+$", "--limit", "120r/s"});
    EXPECT_EQ(c.request.match.procedure_kind, MatchKind::Regex);
    EXPECT_EQ(c.request.match.scope, Scope::Global);
    EXPECT_EQ(c.request.match.caller, "");

    c = ok({"remove", "bots"});
    EXPECT_EQ(c.request.op, wire::AdminOp::Remove);
    EXPECT_EQ(c.request.bucket, "bots");

    c = ok({"keygen", "/tmp/k"});
    EXPECT_EQ(c.command, Command::Keygen);
    EXPECT_EQ(c.keygen_file, "/tmp/k");
}

TEST(GrlctlConfig, UsageErrors) {
    EXPECT_MENTIONS(error_of({}), "a command is required");
    EXPECT_MENTIONS(error_of({"frobnicate"}), "unknown command \"frobnicate\"");
    EXPECT_MENTIONS(error_of({"--json", "frobnicate", "status"}),
                    "unexpected argument \"frobnicate\"");
    EXPECT_MENTIONS(error_of({"--bogus", "status"}), "--bogus");
    EXPECT_MENTIONS(error_of({"status", "--bogus"}), "--bogus");
    EXPECT_MENTIONS(error_of({"set", "g", "--limit", "5x"}),
                    "--limit: invalid rate \"5x\", expected e.g. 100r/s, 600r/m or 0");
    EXPECT_MENTIONS(error_of({"set", "g", "--mode", "allow"}), "--mode: invalid mode \"allow\"");
    EXPECT_MENTIONS(error_of({"set", "g", "--limit", "1r/s", "--for", "0"}),
                    "--for: \"0\" is out of range");
    EXPECT_MENTIONS(error_of({"set", "g", "--limit", "1r/s", "--for", "ever"}),
                    "--for: invalid duration \"ever\"");
    EXPECT_MENTIONS(error_of({"--timeout", "3x", "status"}), "--timeout: invalid duration \"3x\"");
    EXPECT_MENTIONS(error_of({"set", "g"}), "set needs --limit and/or --mode");
    EXPECT_MENTIONS(error_of({"set"}), "BUCKET is required");
    EXPECT_MENTIONS(error_of({"show", "a b"}), "invalid name \"a b\"");
    EXPECT_MENTIONS(error_of({"clear", "g", "both"}),
                    "invalid part \"both\", expected limit or mode");
    EXPECT_MENTIONS(error_of({"status", "--hosts"}), "--hosts");  // an option of buckets only
    EXPECT_MENTIONS(error_of({"status", "extra"}), "extra");
    EXPECT_MENTIONS(error_of({"add", "b", "--caller", "x"}), "add needs --limit");
    EXPECT_MENTIONS(error_of({"add", "b", "--limit", "1r/s"}),
                    "add needs a caller and/or a procedure match");
    EXPECT_MENTIONS(
        error_of({"add", "b", "--limit", "1r/s", "--caller", "x", "--caller-prefix", "y"}),
        "at most one caller and one procedure match");
    EXPECT_MENTIONS(error_of({"add", "b", "--limit", "1r/s", "--caller", "x", "--scope", "planet"}),
                    "--scope: invalid scope \"planet\"");
    EXPECT_MENTIONS(error_of({"add", "b", "--limit", "1r/s", "--procedure-regex", "("}), "regex");
    EXPECT_MENTIONS(error_of({"--curve-keypair", "/nonexistent/k", "status"}),
                    "--curve-keypair: /nonexistent/k");
    EXPECT_MENTIONS(error_of({"keygen"}), "FILE is required");
}

TEST(GrlctlConfig, Help) {
    auto p = parse({"--help"});
    EXPECT_EQ(p.exit_code, 0);
    EXPECT_MENTIONS(p.text, "usage: grlctl");
    EXPECT_MENTIONS(p.text, "buckets [BUCKET] [--hosts]");
    EXPECT_MENTIONS(p.text, "(alias: list)");
    p = parse({"add", "--help"});
    EXPECT_EQ(p.exit_code, 0);
    EXPECT_EQ(p.text.rfind("usage: grlctl add BUCKET --limit RATE", 0), 0u) << p.text;
    EXPECT_MENTIONS(p.text, "--procedure-regex RE");
}

}  // namespace
}  // namespace grl::grlctl
