#include "server/response_store.h"

#include "core/error.h"

namespace onecard::server {

ResponseStore::ResponseStore(size_t max_entries, size_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {
    ONECARD_CHECK(max_entries_ >= 1 && max_bytes_ >= 1, "response store: bounds must be >= 1");
}

bool ResponseStore::put(const std::string& id, Json messages, Json response) {
    // The JSON text's size stands for the entry's memory: close enough to bound it, cheap to compute.
    const size_t n = dump_json(messages).size() + dump_json(response).size();
    std::lock_guard lk(mu_);
    erase_locked(id);
    if (n > max_bytes_) return false;
    lru_.push_front(Entry{id, std::move(messages), std::move(response), n});
    index_[id] = lru_.begin();
    bytes_ += n;
    evict_locked();
    return true;
}

std::optional<Json> ResponseStore::get(const std::string& id) {
    std::lock_guard lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->messages;
}

std::optional<Json> ResponseStore::response(const std::string& id) {
    std::lock_guard lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->response;
}

bool ResponseStore::erase(const std::string& id) {
    std::lock_guard lk(mu_);
    if (index_.find(id) == index_.end()) return false;
    erase_locked(id);
    return true;
}

void ResponseStore::erase_locked(const std::string& id) {
    auto it = index_.find(id);
    if (it == index_.end()) return;
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
}

void ResponseStore::evict_locked() {
    while (!lru_.empty() && (lru_.size() > max_entries_ || bytes_ > max_bytes_)) {
        bytes_ -= lru_.back().bytes;
        index_.erase(lru_.back().id);
        lru_.pop_back();
    }
}

size_t ResponseStore::size() const {
    std::lock_guard lk(mu_);
    return lru_.size();
}

size_t ResponseStore::bytes() const {
    std::lock_guard lk(mu_);
    return bytes_;
}

void ResponseStore::check_integrity() const {
    std::lock_guard lk(mu_);
    ONECARD_CHECK(index_.size() == lru_.size(), "response store: index has {} ids, list {} entries", index_.size(),
                  lru_.size());
    size_t sum = 0;
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        auto f = index_.find(it->id);
        ONECARD_CHECK(f != index_.end() && f->second == it, "response store: entry '{}' is not indexed", it->id);
        sum += it->bytes;
    }
    ONECARD_CHECK(sum == bytes_, "response store: entries hold {} bytes, counter says {}", sum, bytes_);
    ONECARD_CHECK(lru_.size() <= max_entries_ && bytes_ <= max_bytes_,
                  "response store: {} entries / {} bytes over the bounds {} / {}", lru_.size(), bytes_, max_entries_,
                  max_bytes_);
}

}  // namespace onecard::server
