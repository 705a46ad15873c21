#include "grlctl_config.h"

#include <array>
#include <vector>

#include "grl/common/bucket_types.h"

namespace grl::grlctl {

namespace {

namespace cli = daemon::cli;

struct Sub {
    Command command;
    CLI::App* app;
};

CLI::Option* add_bucket(CLI::App& app, std::string& field, bool required) {
    CLI::Option* o = app.add_option("BUCKET", field, required ? "the bucket" : "only this bucket")
                         ->option_text(" ")
                         ->check(cli::name_validator());
    return required ? o->required() : o;
}

// --limit, --mode and --for of set and add.
void add_override(CLI::App& app, wire::AdminRequest& q) {
    app.add_option_function<std::uint64_t>(
           "--limit", [&q](std::uint64_t mrps) { q.limit_mrps = mrps; },
           "the limit: 100r/s, 600r/m, or 0 (drop everything)")
        ->option_text("RATE")
        ->transform(cli::limit_validator());
    app.add_option_function<std::string>(
           "--mode",
           [&q](const std::string& s) {
               q.mode = parse_mode(s);
               if (!q.mode)
                   throw CLI::ValidationError(
                       "--mode", "invalid mode \"" + s + "\", expected deny or shadow");
           },
           "deny or shadow")
        ->option_text("MODE");
    app.add_option("--for", q.for_ms, "the override expires after this long (default: never)")
        ->option_text("DURATION")
        ->transform(cli::duration_validator(1, 365ULL * 24 * 3600000));
}

// The match options of add: each sets the value and its kind.
CLI::Option* add_match(CLI::App& app, const std::string& name, std::string& value, MatchKind& kind,
                       MatchKind this_kind, const std::string& metavar, const std::string& help) {
    return app
        .add_option_function<std::string>(
            name,
            [&value, &kind, this_kind](const std::string& s) {
                value = s;
                kind = this_kind;
            },
            help)
        ->option_text(metavar);
}

// grlctl's commands, each a CLI11 subcommand, and what their parsing leaves to check.
struct Commands {
    explicit Commands(CLI::App& a) : app(a) {}
    CLI::App& app;
    std::vector<Sub> subs;
    std::string part;                          // clear: "limit", "mode" or "" (both)
    std::array<CLI::Option*, 2> callers{};     // add's --caller, --caller-prefix
    std::array<CLI::Option*, 3> procedures{};  // add's --procedure, -prefix, -regex

    CLI::App* sub(Command cmd, const std::string& synopsis, const std::string& help) {
        CLI::App* s = app.add_subcommand(to_string(cmd), help)->group("Commands");
        cli::init(*s, synopsis);
        subs.push_back({cmd, s});
        return s;
    }
    const Sub* given() const {
        const Sub* g = nullptr;
        for (const Sub& s : subs) {
            if (s.app->parsed()) g = &s;
        }
        return g;
    }
};

void add_add_command(Commands& k, wire::AdminRequest& q) {
    CLI::App* add = k.sub(
        Command::Add,
        "BUCKET --limit RATE [--scope global|region|zone] [--mode deny|shadow] [--for DURATION]"
        "\n    [--caller V | --caller-prefix V] [--procedure V | --procedure-prefix V | "
        "--procedure-regex RE]",
        "add a run-time (emergency) bucket on every nginx, no reload");
    add_bucket(*add, q.bucket, true);
    add_override(*add, q);
    add->add_option_function<std::string>(
           "--scope",
           [&q](const std::string& s) {
               auto scope = parse_scope(s);
               if (!scope)
                   throw CLI::ValidationError(
                       "--scope", "invalid scope \"" + s + "\", expected global, region or zone");
               q.match.scope = *scope;
           },
           "where the limit holds: global, region or zone (default: global)")
        ->option_text("SCOPE");
    wire::RuntimeMatch& m = q.match;
    k.callers = {
        add_match(*add, "--caller", m.caller, m.caller_kind, MatchKind::Exact, "VALUE",
                  "match this caller exactly"),
        add_match(*add, "--caller-prefix", m.caller, m.caller_kind, MatchKind::Prefix, "VALUE",
                  "match callers starting with this"),
    };
    k.procedures = {
        add_match(*add, "--procedure", m.procedure, m.procedure_kind, MatchKind::Exact, "VALUE",
                  "match this procedure exactly"),
        add_match(*add, "--procedure-prefix", m.procedure, m.procedure_kind, MatchKind::Prefix,
                  "VALUE", "match procedures starting with this"),
        add_match(*add, "--procedure-regex", m.procedure, m.procedure_kind, MatchKind::Regex, "RE",
                  "match procedures with this PCRE2 regex"),
    };
}

void add_commands(Commands& k, Config& c) {
    wire::AdminRequest& q = c.request;
    CLI::App* buckets = k.sub(Command::Buckets, "[BUCKET] [--hosts]",
                              "buckets with live rates, limit, ratio, mode, hosts");
    buckets->alias("list");
    add_bucket(*buckets, q.bucket, false);
    buckets->add_flag("--hosts", q.hosts, "list the reporting hosts of each bucket");

    CLI::App* show =
        k.sub(Command::Show, "BUCKET", "one bucket in detail: every instance, definitions, hosts");
    add_bucket(*show, q.bucket, true);

    k.sub(Command::Status, "", "zones, peer controllers, the limits file");

    CLI::App* explain = k.sub(Command::Explain, "BUCKET [KEY]",
                              "why a bucket's requests are (or are not) dropped: offered, limit, "
                              "ratio, since when, which zones and hosts carry the load");
    add_bucket(*explain, q.bucket, true);
    explain->add_option("KEY", c.explain_key, "a keyed bucket's API key (as its key= gives it)")
        ->option_text(" ");

    CLI::App* top = k.sub(Command::Top, "[--interval DURATION] [--count N]",
                          "a live view of the busiest bucket instances, refreshed until Ctrl-C");
    cli::add_duration(*top, "--interval", c.top_interval_ms, 100, 3600000, "how often to refresh");
    cli::add_count(*top, "--count", c.top_count, 0, 1000000,
                   "stop after N screens (0: until Ctrl-C)");

    CLI::App* keys = k.sub(Command::Keys, "BUCKET [--top N]",
                           "a keyed bucket's busiest keys per instance: offered, dropped, ratio");
    add_bucket(*keys, q.bucket, true);
    cli::add_count(*keys, "--top", q.top, 1, wire::kMaxAdminTopKeys,
                   "keys per instance (default 20)");

    CLI::App* set =
        k.sub(Command::Set, "BUCKET [--limit RATE] [--mode deny|shadow] [--for DURATION]",
              "override a bucket's limit and/or mode (expires after --for)");
    add_bucket(*set, q.bucket, true);
    add_override(*set, q);

    CLI::App* clear =
        k.sub(Command::Clear, "BUCKET [limit|mode]", "remove an override (both parts by default)");
    add_bucket(*clear, q.bucket, true);
    clear->add_option("PART", k.part, "limit or mode: remove only this part")
        ->option_text(" ")
        ->check(CLI::Validator(
            [](std::string& s) -> std::string {
                if (s == "limit" || s == "mode") return {};
                return "invalid part \"" + s + "\", expected limit or mode";
            },
            ""));

    add_add_command(k, q);

    CLI::App* remove = k.sub(Command::Remove, "BUCKET", "remove a run-time bucket");
    add_bucket(*remove, q.bucket, true);

    CLI::App* keygen = k.sub(Command::Keygen, "FILE",
                             "write a CURVE key pair to FILE and its public key to FILE.pub");
    keygen->add_option("FILE", c.keygen_file, "where to write the key pair")
        ->option_text(" ")
        ->required();
}

// add: a limit, and at most one caller and one procedure match, at least one of them.
std::string check_add(const wire::AdminRequest& q, const Commands& k) {
    std::size_t n_callers = k.callers[0]->count() + k.callers[1]->count();
    std::size_t n_procedures =
        k.procedures[0]->count() + k.procedures[1]->count() + k.procedures[2]->count();
    if (!q.limit_mrps) return "add needs --limit";
    if (n_callers > 1 || n_procedures > 1)
        return "add takes at most one caller and one procedure match";
    if (n_callers + n_procedures == 0) return "add needs a caller and/or a procedure match";
    return wire::check_match(q.match);
}

// The command given, as the admin request it sends; "" or why the arguments do not do.
std::string to_request(Config& c, const Commands& k) {
    wire::AdminRequest& q = c.request;
    std::string error;
    switch (c.command) {
        case Command::Buckets: q.op = wire::AdminOp::Buckets; break;
        case Command::Show:
            q.op = wire::AdminOp::Buckets;
            q.hosts = true;
            break;
        case Command::Status: q.op = wire::AdminOp::Status; break;
        case Command::Explain:
            q.op = wire::AdminOp::Buckets;
            q.hosts = true;
            break;
        case Command::Top: q.op = wire::AdminOp::Buckets; break;
        case Command::Set:
            q.op = wire::AdminOp::Set;
            if (!q.limit_mrps && !q.mode) error = "set needs --limit and/or --mode";
            break;
        case Command::Clear:
            q.op = wire::AdminOp::Clear;
            q.clear_limit = k.part == "limit";
            q.clear_mode = k.part == "mode";
            break;
        case Command::Add:
            q.op = wire::AdminOp::Add;
            q.has_match = true;
            error = check_add(q, k);
            break;
        case Command::Remove: q.op = wire::AdminOp::Remove; break;
        case Command::Keys: q.op = wire::AdminOp::Keys; break;
        case Command::Keygen: break;
    }
    return error;
}

}  // namespace

const char* to_string(Command c) {
    switch (c) {
        case Command::Buckets: return "buckets";
        case Command::Show: return "show";
        case Command::Status: return "status";
        case Command::Set: return "set";
        case Command::Clear: return "clear";
        case Command::Add: return "add";
        case Command::Remove: return "remove";
        case Command::Keygen: return "keygen";
        case Command::Top: return "top";
        case Command::Keys: return "keys";
        case Command::Explain: return "explain";
    }
    return "?";
}

daemon::cli::Outcome<Config> parse_config(int argc, const char* const* argv,
                                          const char* env_controller) {
    Config c;
    if (env_controller != nullptr && *env_controller != '\0') c.controller = env_controller;

    CLI::App app(
        "The operator's tool for a grl-controller's admin endpoint. Exit status: 0 done, "
        "1 refused by the controller (the reason is printed), 2 usage error, 3 no "
        "answer.",
        "grlctl");
    cli::init(app, "[options] COMMAND [ARGS] [command options]");
    app.require_subcommand(0, 1);
    app.fallthrough();  // the options above also after the command
    const std::string units =
        "RATE: 100r/s, 600r/m, or 0 (drop everything). DURATION: 250ms, 30s, 10m, 2h.";
    app.footer(units);  // inherited by the commands
    cli::add_text(app, "--controller", c.controller, "EP",
                  "the controller's admin endpoint (or $GRL_CONTROLLER)");
    app.add_flag("--json", c.json, "print JSON instead of tables");
    cli::add_duration(app, "--timeout", c.timeout_ms, 1, 3600000,
                      "how long to wait for the answer");
    CLI::Option* keypair =
        cli::add_keypair(app, "--curve-keypair", c.keypair, "CURVE key pair of this client");
    CLI::Option* server_key =
        cli::add_public_key(app, "--curve-server-key", c.server_key, "the controller's public key");
    Commands k(app);
    add_commands(k, c);
    app.footer(units + "\ngrlctl COMMAND --help shows the arguments and options of one command.");

    // Words that are no command are collected (not refused by CLI11) to be named below; the
    // commands, created before, do not inherit this.
    app.allow_extras();

    cli::Outcome<Config> out;
    if (!cli::parse(app, argc, argv, out.exit_code, out.text)) return out;
    const Sub* given = k.given();
    std::string error;
    if (!app.remaining().empty()) {
        error =
            (given ? "unexpected argument \"" : "unknown command \"") + app.remaining()[0] + "\"";
    } else if (given == nullptr) {
        error = "a command is required";
    }
    if (error.empty()) {
        c.command = given->command;
        error = to_request(c, k);
    }
    if (error.empty() && keypair->count() != server_key->count())
        error = "CURVE needs --curve-keypair and --curve-server-key";
    if (!error.empty()) {
        out.exit_code = cli::kUsageError;
        out.text = cli::usage_error(app, error);
        return out;
    }
    out.config = std::move(c);
    return out;
}

}  // namespace grl::grlctl
