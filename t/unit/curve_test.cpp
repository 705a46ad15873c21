// Unit tests of the CURVE key files (daemon/curve.h): layout, Z85 keys containing '#',
// errors naming the file and the line.
#include "grl/daemon/curve.h"

#include <gtest/gtest.h>
#include <zmq.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace grl::daemon {
namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/grl-curve-test-XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir() { std::system(("rm -rf " + path).c_str()); }
    std::string write(const std::string& name, const std::string& text) const {
        std::string p = path + "/" + name;
        std::ofstream(p) << text;
        return p;
    }
};

std::string error_of(void (*fn)(const std::string&), const std::string& path) {
    try {
        fn(path);
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

TEST(Curve, GeneratedKeyPairsRoundTrip) {
    TempDir d;
    for (int i = 0; i < 20; ++i) {  // enough pairs that some keys contain '#'
        KeyPair k = generate_keypair();
        ASSERT_EQ(k.public_key.size(), 40u);
        std::string base = d.path + "/k" + std::to_string(i);
        write_keypair(base, k);
        KeyPair back = load_keypair(base);
        EXPECT_EQ(back.public_key, k.public_key);
        EXPECT_EQ(back.secret_key, k.secret_key);
        EXPECT_EQ(load_public_key(base + ".pub"), k.public_key);
        std::set<std::string> list = load_authorized(base + ".pub");
        EXPECT_EQ(list, std::set<std::string>{k.public_key});
    }
}

// The secret key file is 0600 whatever the umask, an existing pair is never replaced, and
// no temporary file is left behind (its name is mkstemp's, not "<file>.tmp").
TEST(Curve, KeygenWritesPrivateFilesAndNeverOverwrites) {
    TempDir d;
    const mode_t old_mask = umask(0);
    const std::string base = d.path + "/host.key";
    KeyPair k = generate_keypair();
    write_keypair(base, k);
    umask(old_mask);
    struct stat st;
    ASSERT_EQ(stat(base.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(stat((base + ".pub").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
    std::string err;
    try {
        write_keypair(base, generate_keypair());
    } catch (const std::exception& e) {
        err = e.what();
    }
    EXPECT_EQ(err, base + ": exists; remove it first to replace the key pair");
    EXPECT_EQ(load_keypair(base).secret_key, k.secret_key);  // untouched
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.path)) {
        (void)e;
        ++files;
    }
    EXPECT_EQ(files, 2);
}

TEST(Curve, AuthorisedListsAcceptBareKeysAndKeepHashes) {
    TempDir d;
    std::string a = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
    std::string b = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
    std::string with_hash = "#" + a.substr(1);
    std::string p = d.write(
        "list", "# comment line\n\n" + a + "\n    public-key = \"" + b + "\"\n" + with_hash + "\n");
    // A line starting with '#' is a comment, even when it would be a valid key.
    EXPECT_EQ(load_authorized(p), (std::set<std::string>{a, b}));
    std::string q = d.write("bad", a + "\nnot-a-key\n");
    EXPECT_EQ(error_of([](const std::string& x) { load_authorized(x); }, q),
              q + ":2: invalid public key, expected 40 Z85 characters");
}

TEST(Curve, KeyPairErrors) {
    TempDir d;
    std::string p = d.write(
        "pub-only", "curve\n    public-key = \"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\"\n");
    EXPECT_EQ(error_of([](const std::string& x) { load_keypair(x); }, p),
              p + ": a key pair file needs public-key and secret-key lines");
    std::string bad = d.write("bad", "curve\n    public-key = \"short\"\n");
    EXPECT_EQ(error_of([](const std::string& x) { load_public_key(x); }, bad),
              bad + ":2: invalid public-key, expected 40 Z85 characters");
    EXPECT_EQ(error_of([](const std::string& x) { load_public_key(x); }, d.path + "/missing"),
              d.path + "/missing: cannot read");
}

}  // namespace
}  // namespace grl::daemon

namespace grl::curve {
namespace {

TEST(CurveKeys, ValidKeyAgreesWithZeroMQ) {
    for (int i = 0; i < 200; ++i) {
        daemon::KeyPair k = daemon::generate_keypair();
        EXPECT_TRUE(valid_key(k.public_key)) << k.public_key;
        EXPECT_TRUE(valid_key(k.secret_key));
    }
    // Five Z85 digits above 2^32 - 1 do not decode (zmq_z85_decode refuses them too).
    std::string overflow(40, '#');
    std::uint8_t bin[32];
    EXPECT_EQ(zmq_z85_decode(bin, overflow.c_str()), nullptr);
    EXPECT_FALSE(valid_key(overflow));
    EXPECT_FALSE(valid_key(std::string(39, '0')));
    EXPECT_FALSE(valid_key(std::string(39, '0') + "\""));
    EXPECT_TRUE(valid_key(std::string(40, '0')));
}

TEST(CurveKeys, ParsesFromText) {
    std::string pub = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
    std::string sec = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs";
    KeyPair k = parse_keypair(
        "curve\n  public-key = \"" + pub + "\"\n  secret-key = \"" + sec + "\"\n", "k");
    EXPECT_EQ(k.public_key, pub);
    EXPECT_EQ(k.secret_key, sec);
    EXPECT_EQ(parse_public_key("public-key = " + pub, "p"), pub);  // unquoted, no newline
    try {
        parse_keypair("curve\n\n  secret-key = \"x\"\n", "f.key");
        FAIL();
    } catch (const std::exception& e) {
        EXPECT_STREQ(e.what(), "f.key:3: invalid secret-key, expected 40 Z85 characters");
    }
    try {
        parse_public_key("", "empty");
        FAIL();
    } catch (const std::exception& e) {
        EXPECT_STREQ(e.what(), "empty: no public-key line");
    }
}

}  // namespace
}  // namespace grl::curve

namespace grl::curve {
namespace {

const std::string kA = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
const std::string kB = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";

TEST(CurveKeys, AKeyListNamesWhatEachKeySpeaksFor) {
    KeyList l = parse_key_list(
        "# hosts of zone z1\n" + kA + " web-1, web-2\n" + kB + "\tweb-eu-*\n" + kB + " api-*.x:1\n",
        "hosts.list");
    ASSERT_EQ(l.size(), 2u);
    EXPECT_EQ(l[kA], (std::vector<std::string>{"web-1", "web-2"}));
    // A key on several lines speaks for the names of all of them.
    EXPECT_EQ(l[kB], (std::vector<std::string>{"web-eu-*", "api-*.x:1"}));
    EXPECT_EQ(keys_of(l), (std::set<std::string>{kA, kB}));
}

TEST(CurveKeys, OldKeyListsStayValidAndBindFirstCome) {
    std::string old = "curve\n    public-key = \"" + kA + "\"\n" + kB + "\n" + kB + "  \n";
    KeyList l = parse_key_list(old, "old.list");
    EXPECT_EQ(l, (KeyList{{kA, {}}, {kB, {}}}));
    EXPECT_EQ(parse_authorized(old, "old.list"), (std::set<std::string>{kA, kB}));
}

TEST(CurveKeys, ABadNameAfterAKeyNamesTheFileAndLine) {
    for (const char* names : {"web 1", "web-1,,web-2", "web/1", "web-1,"}) {
        try {
            parse_key_list("\n" + kA + " " + names + "\n", "hosts.list");
            ADD_FAILURE() << names << " was accepted";
        } catch (const std::runtime_error& e) {
            EXPECT_EQ(std::string(e.what()).rfind("hosts.list:2: invalid name \"", 0), 0u)
                << e.what();
        }
    }
}

TEST(CurveKeys, NamesMatchGlobs) {
    EXPECT_TRUE(name_matches("web-1", "web-1"));
    EXPECT_FALSE(name_matches("web-1", "web-10"));
    EXPECT_TRUE(name_matches("web-*", "web-"));
    EXPECT_TRUE(name_matches("web-*", "web-10"));
    EXPECT_FALSE(name_matches("web-*", "api-web-1"));
    EXPECT_TRUE(name_matches("*-eu-*", "web-eu-3"));
    EXPECT_TRUE(name_matches("*", "anything"));
    EXPECT_TRUE(name_matches("a*b*c", "aXXbYYbc"));
    EXPECT_FALSE(name_matches("a*b*c", "aXXbYYb"));
    EXPECT_FALSE(name_matches("", "x"));
}

}  // namespace
}  // namespace grl::curve
