#include "sqlite.h"

#include <sqlite3.h>

namespace grl::rlc {

Db::Db(const std::string& path, bool create, int busy_timeout_ms) : path_(path) {
    // NOMUTEX: a Db is used by one thread at a time (a thread that needs the store opens its
    // own), so SQLite's per-call mutex is pure cost: 12% of a cycle's read, taken by each
    // sqlite3_column_* of every row.
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
        std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        throw StoreError(path + ": cannot open: " + msg);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, busy_timeout_ms);
}

Db::~Db() {
    sqlite3_close_v2(db_);
}

void Db::fail(std::string_view what) const {
    throw StoreError(path_ + ": " + std::string(what) + ": " + sqlite3_errmsg(db_));
}

void Db::exec(const std::string& sql) {
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql);
}

std::int64_t Db::changes() const {
    return sqlite3_changes64(db_);
}

Stmt::Stmt(Db& db, const std::string& sql) : db_(db) {
    if (sqlite3_prepare_v2(db.handle(), sql.c_str(), static_cast<int>(sql.size()), &s_, nullptr) !=
        SQLITE_OK)
        db.fail("prepare " + sql);
}

Stmt::~Stmt() {
    sqlite3_finalize(s_);
}

Stmt& Stmt::bind(int i, std::int64_t v) {
    if (sqlite3_bind_int64(s_, i, v) != SQLITE_OK) db_.fail("bind");
    return *this;
}

Stmt& Stmt::bind(int i, const std::string& v) {
    if (sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) !=
        SQLITE_OK)
        db_.fail("bind");
    return *this;
}

Stmt& Stmt::bind_null(int i) {
    if (sqlite3_bind_null(s_, i) != SQLITE_OK) db_.fail("bind");
    return *this;
}

bool Stmt::step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    db_.fail(sqlite3_sql(s_));
}

void Stmt::reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
}

std::int64_t Stmt::int64(int col) const {
    return sqlite3_column_int64(s_, col);
}

std::string Stmt::text(int col) const {
    const unsigned char* p = sqlite3_column_text(s_, col);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<std::size_t>(sqlite3_column_bytes(s_, col)))
             : std::string();
}

std::string_view Stmt::blob(int col) const {
    const void* p = sqlite3_column_blob(s_, col);
    return p ? std::string_view(static_cast<const char*>(p),
                                static_cast<std::size_t>(sqlite3_column_bytes(s_, col)))
             : std::string_view();
}

Stmt& Stmt::bind_blob(int i, std::string_view v) {
    if (sqlite3_bind_blob64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT) != SQLITE_OK)
        db_.fail("bind");
    return *this;
}

bool Stmt::is_null(int col) const {
    return sqlite3_column_type(s_, col) == SQLITE_NULL;
}

Transaction::Transaction(Db& db) : db_(db) {
    db_.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
    if (open_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
    db_.exec("COMMIT");
    open_ = false;
}

}  // namespace grl::rlc
