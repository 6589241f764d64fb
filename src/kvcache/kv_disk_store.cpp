#include "kvcache/kv_disk_store.h"

#include "core/error.h"
#include "kvcache/kv_disk_entry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iterator>
#include <string>
#include <tuple>

namespace onecard {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = "kv-disk.lock";

// Closes a file descriptor on scope exit (the store's I/O paths return early on every failure).
class ScopedFd {
public:
    explicit ScopedFd(int fd) : fd_(fd) {}
    ~ScopedFd() {
        if (fd_ >= 0) ::close(fd_);
    }
    ScopedFd(const ScopedFd&) = delete;
    ScopedFd& operator=(const ScopedFd&) = delete;
    int get() const { return fd_; }
    // Closes now and reports whether close succeeded (a delayed write error can surface only here).
    bool close() {
        const int fd = fd_;
        fd_ = -1;
        return ::close(fd) == 0;
    }

private:
    int fd_;
};

bool pread_full(int fd, uint8_t* dst, size_t n, off_t off) {
    while (n > 0) {
        const ssize_t r = ::pread(fd, dst, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;  // error, or the file is shorter than its header says
        dst += r;
        off += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

bool write_full(int fd, const uint8_t* src, size_t n) {
    while (n > 0) {
        const ssize_t r = ::write(fd, src, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;  // ENOSPC, EFBIG, EIO, ...
        src += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

timespec to_timespec(int64_t ns) {
    return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

// Sets fd's mtime (atime left alone). Failure only costs LRU order after a restart, so it is ignored.
void set_mtime(int fd, int64_t ns) {
    const timespec times[2] = {timespec{0, UTIME_OMIT}, to_timespec(ns)};
    (void)::futimens(fd, times);
}

std::string read_lock_holder(int fd) {
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s.empty() ? std::string("unknown") : s;
}

void remove_file(const fs::path& p, const char* what) {
    std::error_code ec;
    fs::remove(p, ec);
    ONECARD_CHECK(!ec, "kv disk dir: cannot remove {} {}: {}", what, p.string(), ec.message());
}

}  // namespace

size_t KvTierKeyHash::operator()(const KvTierKey& k) const {
    // Chain hashes are already well mixed; the kind only has to separate blocks from snapshots.
    return static_cast<size_t>(k.hash ^ (static_cast<uint64_t>(k.kind) * 0x9e3779b97f4a7c15ULL));
}

int64_t KvDiskStore::entry_bytes(int64_t n_payload) {
    return kKvDiskHeaderBytes + n_payload;
}

KvDiskStore::KvDiskStore(KvDiskStoreOptions opt) : opt_(std::move(opt)) {
    ONECARD_CHECK(!opt_.dir.empty(), "kv disk store: no directory given (--kv-disk-dir)");
    ONECARD_CHECK(opt_.max_bytes > 0, "kv disk dir {}: the byte bound must be > 0 (got {}; --kv-disk-bytes)",
                  opt_.dir.string(), opt_.max_bytes);
    open_directory();
    lock_directory();
    try {
        scan_directory();
        check_integrity();
    } catch (...) {
        ::close(lock_fd_);  // no destructor runs for a throwing constructor
        throw;
    }
}

KvDiskStore::~KvDiskStore() {
    // The lock file stays: unlinking it would let a process that opened it just before lock a file no
    // longer in the directory while a third creates a new one, and both would think they own the tier.
    if (lock_fd_ >= 0) ::close(lock_fd_);
}

void KvDiskStore::open_directory() {
    const std::string dir = opt_.dir.string();
    std::error_code ec;
    if (!fs::exists(opt_.dir, ec)) {
        fs::create_directories(opt_.dir, ec);
        ONECARD_CHECK(!ec, "kv disk dir {}: cannot create it: {}", dir, ec.message());
        fs::permissions(opt_.dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    }
    ONECARD_CHECK(fs::is_directory(opt_.dir, ec), "kv disk dir {}: not a directory", dir);
}

void KvDiskStore::lock_directory() {
    lock_path_ = opt_.dir / kLockName;
    lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    ONECARD_CHECK(lock_fd_ >= 0, "kv disk dir {}: cannot open the lock file {}: {}", opt_.dir.string(),
                  lock_path_.string(), std::strerror(errno));
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        const std::string holder = read_lock_holder(lock_fd_);
        ::close(lock_fd_);
        lock_fd_ = -1;
        if (err == EWOULDBLOCK)
            fail(
                "kv disk dir {}: in use by another KV disk store (pid {} holds {}); give each server its own "
                "--kv-disk-dir",
                opt_.dir.string(), holder, lock_path_.string());
        fail("kv disk dir {}: cannot lock {}: {}", opt_.dir.string(), lock_path_.string(), std::strerror(err));
    }
    // The pid is only for the message above; whatever an earlier holder wrote is replaced.
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock_fd_, 0) == 0) (void)::pwrite(lock_fd_, pid.data(), pid.size(), 0);
}

void KvDiskStore::scan_directory() {
    struct Found {
        int64_t mtime_ns;
        std::string name;
        KvTierKey key;
        int64_t bytes;
    };
    std::vector<Found> found;
    const std::string dir = opt_.dir.string();
    std::error_code ec;
    fs::directory_iterator it(opt_.dir, ec);
    ONECARD_CHECK(!ec, "kv disk dir {}: cannot list it: {}", dir, ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        ONECARD_CHECK(!ec, "kv disk dir {}: cannot list it: {}", dir, ec.message());
        const fs::path& p = it->path();
        const std::string name = p.filename().string();
        if (name == kLockName) continue;
        // symlink_status: a link is never ours (entries are created as regular files), so never followed.
        if (!fs::is_regular_file(it->symlink_status(ec))) {
            ++report_.n_ignored;
            continue;
        }
        if (name.ends_with(kKvDiskTempSuffix)) {  // we hold the lock: no live writer, a torn write
            remove_file(p, "torn temp file");
            ++report_.n_removed_temp;
            continue;
        }
        if (!name.ends_with(kKvDiskEntrySuffix)) {
            ++report_.n_ignored;
            continue;
        }
        const auto parsed = parse_kv_disk_entry_name(name);
        if (!parsed || parsed->fingerprint != opt_.layout_fingerprint) {
            remove_file(p, "foreign entry");
            ++report_.n_removed_foreign;
            continue;
        }
        // The header is read now (cheap: one small read per entry) so that a truncated or renamed file
        // neither counts against the bound nor evicts a good entry; the payload is checked by get().
        ScopedFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
        struct stat st {};
        KvDiskHeaderBytes header{};
        const bool readable = fd.get() >= 0 && ::fstat(fd.get(), &st) == 0 && st.st_size >= kKvDiskHeaderBytes &&
                              pread_full(fd.get(), header.data(), header.size(), 0);
        if (!readable ||
            check_kv_disk_header(header, opt_.layout_fingerprint, parsed->key, st.st_size) != KvDiskEntryCheck::Ok) {
            remove_file(p, "corrupt entry");
            ++report_.n_removed_corrupt;
            continue;
        }
        const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
        found.push_back(Found{mtime_ns, name, parsed->key, static_cast<int64_t>(st.st_size)});
    }
    // Oldest first; equal mtimes (a coarse-timestamp filesystem) fall back to the name, so the order is
    // at least deterministic.
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
        return std::tie(a.mtime_ns, a.name) < std::tie(b.mtime_ns, b.name);
    });
    for (const auto& f : found) {
        lru_.push_back(f.key);
        index_.emplace(f.key, Entry{f.bytes, std::prev(lru_.end())});
        bytes_ += f.bytes;
        last_stamp_ns_ = std::max(last_stamp_ns_, f.mtime_ns);
    }
    // A smaller --kv-disk-bytes than last time: the least recently used go.
    while (bytes_ > opt_.max_bytes) {
        drop(lru_.front());
        ++report_.n_evicted_over_bound;
    }
    report_.n_entries = static_cast<int64_t>(index_.size());
    report_.bytes = bytes_;
}

fs::path KvDiskStore::entry_path(const KvTierKey& key) const {
    return opt_.dir / kv_disk_entry_name(opt_.layout_fingerprint, key);
}

int64_t KvDiskStore::next_stamp_ns() {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const int64_t now_ns = static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
    // Strictly increasing: file timestamps come from a coarse clock, and puts in one tick must still
    // be ordered after a restart. Past the newest stamp found at open, in case the clock went back.
    last_stamp_ns_ = std::max(now_ns, last_stamp_ns_ + 1);
    return last_stamp_ns_;
}

void KvDiskStore::drop(const KvTierKey& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    std::error_code ec;
    fs::remove(entry_path(key), ec);  // already gone or not removable: either way it is no longer indexed
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    index_.erase(it);
}

void KvDiskStore::evict_for(int64_t incoming, const KvTierKey* keep) {
    const auto kept = keep ? index_.find(*keep) : index_.end();
    const int64_t kept_bytes = kept != index_.end() ? kept->second.bytes : 0;  // replaced, so not counted
    auto it = lru_.begin();
    while (bytes_ - kept_bytes + incoming > opt_.max_bytes && it != lru_.end()) {
        const KvTierKey victim = *it++;
        if (keep && victim == *keep) continue;
        drop(victim);
        ++stats_.n_evicted;
    }
}

void KvDiskStore::touch(Entry& e, int fd) {
    lru_.splice(lru_.end(), lru_, e.lru);  // iterators stay valid across splice
    set_mtime(fd, next_stamp_ns());
}

bool KvDiskStore::put(const KvTierKey& key, std::span<const uint8_t> bytes) {
    const int64_t need = entry_bytes(static_cast<int64_t>(bytes.size()));
    if (need > opt_.max_bytes) {
        ++stats_.n_put_failed;
        return false;
    }
    const KvDiskHeaderBytes header = encode_kv_disk_header(opt_.layout_fingerprint, key, bytes);
    const fs::path path = entry_path(key);
    fs::path tmp = path;
    tmp += ".tmp";  // "<name>.kv.tmp": kKvDiskTempSuffix
    // Evict before writing, so that the files on disk stay within the bound while the entry is written
    // (the replaced entry of the same key aside): on a nearly full disk that is what lets it fit.
    evict_for(need, &key);

    bool ok = false;
    {
        ScopedFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (fd.get() >= 0) {
            ok = write_full(fd.get(), header.data(), header.size()) && write_full(fd.get(), bytes.data(), bytes.size());
            if (ok) set_mtime(fd.get(), next_stamp_ns());
            ok = fd.close() && ok;
        }
    }
    if (ok) ok = ::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
        ::unlink(tmp.c_str());  // whatever was written is invisible under the temp name; now it is gone
        ++stats_.n_put_failed;
        return false;
    }
    // The rename replaced any older entry of the key; forget it without touching the new file.
    if (auto it = index_.find(key); it != index_.end()) {
        bytes_ -= it->second.bytes;
        lru_.erase(it->second.lru);
        index_.erase(it);
    }
    lru_.push_back(key);
    index_.emplace(key, Entry{need, std::prev(lru_.end())});
    bytes_ += need;
    ++stats_.n_puts;
    return true;
}

bool KvDiskStore::get(const KvTierKey& key, std::vector<uint8_t>& out) {
    out.clear();
    auto it = index_.find(key);
    if (it == index_.end()) {
        ++stats_.n_misses;
        return false;
    }
    const fs::path path = entry_path(key);
    ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    struct stat st {};
    KvDiskHeaderBytes header{};
    bool ok = fd.get() >= 0 && ::fstat(fd.get(), &st) == 0 && st.st_size >= kKvDiskHeaderBytes &&
              pread_full(fd.get(), header.data(), header.size(), 0) &&
              check_kv_disk_header(header, opt_.layout_fingerprint, key, st.st_size) == KvDiskEntryCheck::Ok;
    if (ok) {
        out.resize(static_cast<size_t>(st.st_size - kKvDiskHeaderBytes));
        ok = pread_full(fd.get(), out.data(), out.size(), kKvDiskHeaderBytes) &&
             check_kv_disk_entry(header, out, opt_.layout_fingerprint, key) == KvDiskEntryCheck::Ok;
    }
    if (!ok) {
        out.clear();
        drop(key);
        ++stats_.n_corrupt;
        ++stats_.n_misses;
        return false;
    }
    touch(it->second, fd.get());
    ++stats_.n_hits;
    return true;
}

bool KvDiskStore::contains(const KvTierKey& key) const {
    return index_.contains(key);
}

void KvDiskStore::erase(const KvTierKey& key) {
    drop(key);
}

KvDiskStats KvDiskStore::stats() const {
    KvDiskStats s = stats_;
    s.n_entries = static_cast<int64_t>(index_.size());
    s.bytes = bytes_;
    return s;
}

void KvDiskStore::check_integrity() const {
    const std::string dir = opt_.dir.string();
    ONECARD_CHECK(lock_fd_ >= 0, "kv disk store {} integrity: the directory lock is not held", dir);
    ONECARD_CHECK(lru_.size() == index_.size(), "kv disk store {} integrity: {} keys in the LRU, {} indexed", dir,
                  lru_.size(), index_.size());
    int64_t sum = 0;
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        const auto e = index_.find(*it);
        ONECARD_CHECK(e != index_.end(), "kv disk store {} integrity: LRU key {:016x} is not indexed", dir, it->hash);
        // With equal sizes, every node pointing back at its own entry makes LRU and index a bijection.
        ONECARD_CHECK(e->second.lru == it, "kv disk store {} integrity: key {:016x} is in the LRU twice", dir,
                      it->hash);
        ONECARD_CHECK(e->second.bytes >= kKvDiskHeaderBytes, "kv disk store {} integrity: entry {:016x} has {} bytes",
                      dir, it->hash, e->second.bytes);
        sum += e->second.bytes;
    }
    ONECARD_CHECK(sum == bytes_, "kv disk store {} integrity: entries add up to {} bytes, total says {}", dir, sum,
                  bytes_);
    ONECARD_CHECK(bytes_ <= opt_.max_bytes, "kv disk store {} integrity: {} bytes over the bound {}", dir, bytes_,
                  opt_.max_bytes);
    ONECARD_CHECK(stats_.n_puts >= 0 && stats_.n_hits >= 0 && stats_.n_misses >= stats_.n_corrupt &&
                      stats_.n_corrupt >= 0 && stats_.n_evicted >= 0 && stats_.n_put_failed >= 0,
                  "kv disk store {} integrity: negative or inconsistent counters", dir);
}

}  // namespace onecard
