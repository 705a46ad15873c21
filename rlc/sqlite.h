// A thin RAII layer over the sqlite3 C API: a connection, prepared statements and an
// IMMEDIATE transaction that rolls back unless committed. Every error throws
// StoreError naming the database file and what was being done.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace grl::rlc {

class StoreError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// One thread at a time: opened without SQLite's per-connection mutex (sqlite.cpp).
class Db {
  public:
    // Opens (create: or creates) `path`. busy_timeout_ms: how long a statement waits for
    // another connection's lock before failing (a reader never waits in WAL mode).
    Db(const std::string& path, bool create, int busy_timeout_ms);
    ~Db();
    Db(const Db&) = delete;
    Db& operator=(const Db&) = delete;

    void exec(const std::string& sql);
    // Rows changed by the last INSERT, UPDATE or DELETE.
    std::int64_t changes() const;
    sqlite3* handle() const { return db_; }
    const std::string& path() const { return path_; }
    // Throws StoreError: "<path>: <what>: <sqlite's message>".
    [[noreturn]] void fail(std::string_view what) const;

  private:
    sqlite3* db_ = nullptr;
    std::string path_;
};

class Stmt {
  public:
    Stmt(Db& db, const std::string& sql);
    ~Stmt();
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;

    // Parameters are 1-based, as in SQL.
    Stmt& bind(int i, std::int64_t v);
    Stmt& bind(int i, const std::string& v);
    Stmt& bind_null(int i);
    // Runs one step: true when a row is available, false when done.
    bool step();
    // Ready for new bindings and steps.
    void reset();

    // Columns are 0-based, as in sqlite3_column_*.
    std::int64_t int64(int col) const;
    std::string text(int col) const;
    // Valid until the next step() or reset().
    std::string_view blob(int col) const;
    Stmt& bind_blob(int i, std::string_view v);
    bool is_null(int col) const;

  private:
    Db& db_;
    sqlite3_stmt* s_ = nullptr;
};

// BEGIN IMMEDIATE: takes the write lock at once (waiting up to the busy timeout), so a
// writer never fails half-way on a lock upgrade. Rolls back unless commit() was called.
class Transaction {
  public:
    explicit Transaction(Db& db);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit();

  private:
    Db& db_;
    bool open_ = true;
};

}  // namespace grl::rlc
