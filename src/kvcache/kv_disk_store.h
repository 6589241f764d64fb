// Disk tier of the KV prefix cache (`--kv-disk-dir`, `--kv-disk-bytes`): a bounded, least recently used
// set of entry files in one directory, each a paged KV block (keyed by its chain hash) or a
// sequence-state snapshot (keyed by the hash of the block that ends at its boundary). The store moves
// bytes; what they mean is the caller's (kv_manager.h, the runner).
//
// Guarantees:
//  * never wrong KV: every entry carries a SHA-256 over its header and payload (format in
//    kv_disk_entry.h); a missing, truncated, extended, renamed, corrupt or foreign entry is a miss and
//    its file is removed;
//  * never a partial visible entry: put() writes "<entry>.tmp" and renames it over the entry. There is
//    no fsync: after a power loss a renamed file may hold garbage, which the checksum turns into a miss,
//    so durability would only buy back cache contents at the cost of a sync per put;
//  * bounded: the entry files (header + payload) stay within max_bytes; put() evicts least recently
//    used entries first; an entry larger than the bound alone is refused;
//  * restart reuse: opening a directory indexes the entries left by an earlier process (header checked,
//    payload checked on get), in LRU order by file mtime (put and get stamp it, strictly increasing
//    within a process), and removes what a crashed process left (temp files of torn writes; a stale
//    lock file is harmless, see below), counting each in startup_report();
//  * one process per directory: an exclusive flock on "<dir>/kv-disk.lock" held for the store's life.
//    A second store on the directory (another process, or another store in this one) throws an
//    onecard::Error naming the directory and the holder's pid. flock is released by the kernel when
//    its holder dies, so the lock file a crashed process leaves behind blocks nobody.
// The key is the caller's 64-bit hash and the store cannot tell two contents with one hash apart: a
// caller that must be safe from collisions puts what identifies the content (for a block, its token
// ids) in the payload and compares it on a hit, as kv_manager does in memory.
// Files in the directory whose names do not end in ".kv" or ".kv.tmp" (and the lock file) are left
// alone: a directory shared with other files by mistake loses nothing that is not ours.
//
// Entry files are created 0600 and a directory the store creates is 0700: KV reveals the prompts.
// Threading: the engine thread owns the store (as it owns all KV state); no member is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace onecard {

// What an entry holds: a paged KV block (by its chain hash) or a sequence-state snapshot (by the hash
// of the block that ends at its boundary).
enum class KvTierKind : uint8_t { Block = 0, Snapshot = 1 };
struct KvTierKey {
    KvTierKind kind = KvTierKind::Block;
    uint64_t hash = 0;
    bool operator==(const KvTierKey&) const = default;
};
struct KvTierKeyHash {
    size_t operator()(const KvTierKey& k) const;
};

struct KvDiskStoreOptions {
    std::filesystem::path dir;  // created if missing
    int64_t max_bytes = 0;      // bound on the bytes of entry files kept (> 0)
    // Identifies the KV byte layout (model shape, block size, formats): an entry written under another
    // fingerprint is a miss (and removed), so a directory reused by a different model never yields KV.
    uint64_t layout_fingerprint = 0;
};

struct KvDiskStartupReport {           // what opening the directory found (the server's startup report prints it)
    int64_t n_entries = 0, bytes = 0;  // valid-looking entries indexed for reuse
    int64_t n_removed_temp = 0;        // torn writes of a crashed process (temp files) removed
    int64_t n_removed_foreign = 0;     // other fingerprint / unparsable "*.kv" names, removed
    int64_t n_removed_corrupt = 0;     // our name, but a header that does not match it or the file size
    int64_t n_evicted_over_bound = 0;  // entries beyond max_bytes removed (LRU by mtime)
    int64_t n_ignored = 0;             // files that are not ours (other names, directories), left alone
};

struct KvDiskStats {
    int64_t n_entries = 0, bytes = 0;  // indexed now (bytes: entry files, headers included)
    int64_t n_puts = 0;                // entries written
    int64_t n_hits = 0, n_misses = 0;  // get() results
    int64_t n_corrupt = 0;             // entries found unusable (vanished, or failed a check) and dropped
    int64_t n_evicted = 0;             // entries put() removed to stay within max_bytes
    int64_t n_put_failed = 0;          // puts refused: larger than the bound, or the write failed
};

class KvDiskStore {
public:
    // Opens (creates) the directory, takes the lock, removes leftovers (temp files, foreign entries,
    // entries whose header does not match their name or size, entries beyond max_bytes), indexes the
    // rest. Throws onecard::Error on bad options, a directory that cannot be created or read, or a lock
    // held by another store.
    explicit KvDiskStore(KvDiskStoreOptions opt);
    ~KvDiskStore();  // releases the lock; the entries stay for the next process
    KvDiskStore(const KvDiskStore&) = delete;
    KvDiskStore& operator=(const KvDiskStore&) = delete;

    const KvDiskStartupReport& startup_report() const { return report_; }
    const KvDiskStoreOptions& options() const { return opt_; }

    // Stores bytes under key (replacing an entry with the key), evicting least recently used entries to
    // stay within max_bytes; returns false (stores nothing, keeps an existing entry of the key) when the
    // entry alone exceeds max_bytes or the write fails (disk full: no throw, no log, no visible partial
    // entry, the temp file removed). The new entry is the most recently used.
    bool put(const KvTierKey& key, std::span<const uint8_t> bytes);
    // The entry's payload into out (resized), or false on a miss (out emptied). A missing, truncated or
    // corrupt entry (checksum mismatch, wrong header, wrong length, wrong fingerprint) is a miss and its
    // file is removed. A hit makes the entry the most recently used.
    bool get(const KvTierKey& key, std::vector<uint8_t>& out);
    bool contains(const KvTierKey& key) const;  // indexed (a later get may still find it corrupt)
    void erase(const KvTierKey& key);           // removes the entry and its file; no-op if absent
    KvDiskStats stats() const;

    // Where key's entry file lives (whether or not it exists). For diagnostics and tests.
    std::filesystem::path entry_path(const KvTierKey& key) const;
    // Bytes an entry with an n-byte payload occupies (what counts against max_bytes).
    static int64_t entry_bytes(int64_t n_payload);

    // Throws onecard::Error unless the index and the LRU list hold the same keys once each, the
    // entries' bytes add up to the total, the total is within max_bytes and the counters are sane.
    // In-memory only: the files themselves are checked by get().
    void check_integrity() const;

private:
    struct Entry {
        int64_t bytes = 0;                   // file size, header included
        std::list<KvTierKey>::iterator lru;  // position in lru_
    };

    void open_directory();
    void lock_directory();
    void scan_directory();
    // Removes entries from the LRU front, skipping `keep`, until `incoming` more bytes fit.
    void evict_for(int64_t incoming, const KvTierKey* keep);
    void drop(const KvTierKey& key);  // removes the file and forgets the entry
    void touch(Entry& e, int fd);     // makes e the most recently used, in the LRU and in its file's mtime
    int64_t next_stamp_ns();          // strictly increasing, at least the wall clock

    KvDiskStoreOptions opt_;
    std::filesystem::path lock_path_;
    int lock_fd_ = -1;
    KvDiskStartupReport report_;
    KvDiskStats stats_;                                          // n_entries and bytes filled in by stats()
    std::list<KvTierKey> lru_;                                   // front() is evicted next
    std::unordered_map<KvTierKey, Entry, KvTierKeyHash> index_;  // [n_entries]
    int64_t bytes_ = 0;                                          // sum of index_ bytes
    int64_t last_stamp_ns_ = 0;                                  // newest mtime given (or found at open)
};

}  // namespace onecard
