#include "grl/daemon/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "grl/daemon/json.h"

namespace grl::daemon {

void write_file_atomically(const std::string& path, const std::string& text, mode_t mode) {
    std::string tmp = path + ".XXXXXX";
    int fd = mkstemp(tmp.data());
    if (fd < 0) throw std::runtime_error(path + ": cannot create: " + std::strerror(errno));
    bool ok = fchmod(fd, mode) == 0;
    for (std::size_t off = 0; ok && off < text.size();) {
        ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        off += n > 0 ? static_cast<std::size_t>(n) : 0;
    }
    ok = ok && fsync(fd) == 0;
    const int err = errno;
    ok = close(fd) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = ok ? errno : err;
        unlink(tmp.c_str());
        throw std::runtime_error(path + ": cannot write: " + std::strerror(e));
    }
    // The rename itself is durable only once the directory is.
    const std::size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
}

std::optional<std::string> read_file_if_exists(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        if (errno == ENOENT) return std::nullopt;
        throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    }
    std::ostringstream text;
    text << f.rdbuf();
    if (f.bad()) throw std::runtime_error(path + ": cannot read");
    return text.str();
}

void write_endpoints_file(const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& endpoints) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [name, ep] : endpoints) j[name] = ep;
    write_file_atomically(path, json_text(j) + "\n", 0644);
}

}  // namespace grl::daemon
