// The limits file as grl-rlc writes it: what it renders parses back to the same limits
// with the controllers' parser; diffs; the atomic write.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "grl/daemon/limits_file.h"
#include "limits_out.h"

using namespace grl;
using namespace grl::rlc;

namespace {

const char* kFile =
    "buckets:\n"
    "  api:\n    limit: 500r/s\n    mode: shadow\n"
    "  slow:\n    limit: 90r/m\n"
    "  lowering:\n    limit: 300r/s\n    mode: deny\n    candidate: 200r/s\n"
    "  only-mode:\n    mode: deny\n"
    "  bots:\n    caller_prefix: \"bot-: #1\"\n    procedure_regex: '^/a[0-9]+: x$'\n    scope: "
    "zone\n"
    "    limit: 0\n"
    "  exact:\n    caller: \"key'with\\\"quotes\"\n    procedure_prefix: /search/\n    limit: "
    "10r/s\n";

TEST(LimitsOut, RenderedFileParsesBackToTheSameLimits) {
    auto in = daemon::parse_limits(kFile, "in.yaml");
    ASSERT_TRUE(in.ok) << in.error;
    std::string text = render_limits(in.limits, "a header: with # signs");
    auto out = daemon::parse_limits(text, "out.yaml");
    ASSERT_TRUE(out.ok) << out.error << "\n" << text;
    EXPECT_EQ(control::digest(out.limits), control::digest(in.limits)) << text;
    EXPECT_TRUE(diff_limits(in.limits, out.limits).empty());
    EXPECT_EQ(text.rfind("# a header: with # signs\nbuckets:\n", 0), 0u) << text;
    EXPECT_NE(text.find("limit: 90r/m"), std::string::npos) << text;
    EXPECT_NE(text.find("limit: 300r/s\n    mode: deny\n    candidate: 200r/s\n"),
              std::string::npos)
        << text;
}

TEST(LimitsOut, DiffNamesEveryChangedBucket) {
    control::Limits a, b;
    a.buckets["api"].limit_mrps = 300000;
    a.buckets["gone"].mode = Mode::Shadow;
    b.buckets["api"].limit_mrps = 360000;
    b.buckets["api"].mode = Mode::Deny;
    b.buckets["new"].limit_mrps = 1000;
    auto d = diff_limits(a, b);
    EXPECT_EQ(render_diff(d),
              "api: limit 300r/s -> 360r/s, mode (none) -> deny\n- gone: mode shadow\n+ new: limit "
              "1r/s\n");
    EXPECT_EQ(render_diff(diff_limits(a, a)), "no change\n");
    // A candidate added, then promoted: the limit changes and the candidate goes.
    control::Limits c = a, e = a;
    c.buckets["api"].candidate_mrps = 200000;
    e.buckets["api"].limit_mrps = 200000;
    EXPECT_EQ(render_diff(diff_limits(a, c)), "api: candidate (none) -> 200r/s\n");
    EXPECT_EQ(render_diff(diff_limits(c, e)),
              "api: limit 300r/s -> 200r/s, candidate 200r/s -> (none)\n");
}

TEST(LimitsOut, AtomicWriteReplacesTheFileAndLeavesNoTemporary) {
    char d[] = "/tmp/rlc-out-XXXXXX";
    ASSERT_TRUE(mkdtemp(d));
    std::string dir = d, path = dir + "/limits.yaml";
    std::ofstream(path) << "old\n";
    write_atomically(path, "new content\n");
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(ss.str(), "new content\n");
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
    EXPECT_EQ(std::system(("test $(ls -A " + dir + " | wc -l) -eq 1").c_str()),
              0);  // no temp file left
    EXPECT_EQ(*read_text_file(path), "new content\n");
    EXPECT_FALSE(read_text_file(dir + "/missing.yaml"));
    try {
        write_atomically(dir + "/no/such/dir/limits.yaml", "x");
        FAIL() << "wrote into a missing directory";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(dir + "/no/such/dir/limits.yaml.tmp."),
                  std::string::npos)
            << e.what();
    }
    std::system(("rm -rf " + dir).c_str());
}

}  // namespace
