// Internal: the finished /v1/responses kept for `previous_response_id` and for GET / DELETE
// /v1/responses/{id}. Each entry is the conversation a response ended, as chat messages (the turns
// that led to it and its own assistant turn; never the request's instructions, which OpenAI does not
// carry over either), so a follow-up request is that conversation plus its own input; and the
// response object itself, as the client got it, for retrieval.
//
// Lifetime: in memory only (gone at restart), least recently used out first, bounded two ways:
// kMaxStoredResponses entries (1024) and kMaxStoredResponseBytes (256 MiB of JSON text, conversation and response
// together), so a few huge conversations cannot hold the server's memory. A conversation larger than the byte bound is
// not kept at all. Requests with `store: false` are never kept. Thread-safe (one mutex).
#pragma once

#include "server/request_json.h"

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace onecard::server {

inline constexpr size_t kMaxStoredResponses = 1024;
inline constexpr size_t kMaxStoredResponseBytes = size_t{256} << 20;

class ResponseStore {
public:
    explicit ResponseStore(size_t max_entries = kMaxStoredResponses, size_t max_bytes = kMaxStoredResponseBytes);

    // Keeps `messages` and `response` under `id` as the most recently used entry (replacing one with
    // the same id), then evicts the least recently used entries until both bounds hold. Returns false
    // when the entry alone is over the byte bound (then nothing is kept under `id`).
    bool put(const std::string& id, Json messages, Json response);
    // The conversation kept under `id` (a copy), marking it most recently used; nullopt when unknown
    // or evicted.
    std::optional<Json> get(const std::string& id);
    // The response object kept under `id` (a copy), marking it most recently used; nullopt as get().
    std::optional<Json> response(const std::string& id);
    // Forgets `id`; false when it was not kept (unknown, evicted or deleted before).
    bool erase(const std::string& id);

    size_t size() const;
    size_t bytes() const;  // sum of the kept entries' JSON text sizes
    // Throws onecard::Error when the index and the LRU list disagree or a bound is exceeded.
    void check_integrity() const;

private:
    struct Entry {
        std::string id;
        Json messages;
        Json response;
        size_t bytes = 0;
    };
    void evict_locked();
    void erase_locked(const std::string& id);

    const size_t max_entries_, max_bytes_;
    mutable std::mutex mu_;
    std::list<Entry> lru_;  // front: most recently used
    std::unordered_map<std::string, std::list<Entry>::iterator> index_;
    size_t bytes_ = 0;
};

}  // namespace onecard::server
