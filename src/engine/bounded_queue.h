// A small thread-safe FIFO with a capacity: push blocks while full, pop blocks while empty, close()
// wakes everyone (pushes then fail, pops drain what is left and then return nullopt).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

namespace onecard {

template <typename T>
class BoundedQueue {
public:
    explicit BoundedQueue(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

    // Blocks while full; returns false if the queue was closed.
    bool push(T v) {
        std::unique_lock lk(mu_);
        not_full_.wait(lk, [&] { return closed_ || items_.size() < capacity_; });
        if (closed_) return false;
        items_.push_back(std::move(v));
        not_empty_.notify_one();
        return true;
    }
    // Ignores the capacity: for producers that must never block (the engine thread's final events).
    void force_push(T v) {
        std::lock_guard lk(mu_);
        items_.push_back(std::move(v));
        not_empty_.notify_one();
    }
    std::optional<T> pop() {
        std::unique_lock lk(mu_);
        not_empty_.wait(lk, [&] { return closed_ || !items_.empty(); });
        return take_locked();
    }
    template <typename Rep, typename Period>
    std::optional<T> pop_for(std::chrono::duration<Rep, Period> timeout) {
        std::unique_lock lk(mu_);
        not_empty_.wait_for(lk, timeout, [&] { return closed_ || !items_.empty(); });
        return take_locked();
    }
    std::optional<T> try_pop() {
        std::lock_guard lk(mu_);
        return take_locked();
    }
    void close() {
        std::lock_guard lk(mu_);
        closed_ = true;
        not_empty_.notify_all();
        not_full_.notify_all();
    }
    size_t size() const {
        std::lock_guard lk(mu_);
        return items_.size();
    }
    size_t capacity() const { return capacity_; }

private:
    std::optional<T> take_locked() {
        if (items_.empty()) return std::nullopt;
        T v = std::move(items_.front());
        items_.pop_front();
        not_full_.notify_one();
        return v;
    }

    const size_t capacity_;
    mutable std::mutex mu_;
    std::condition_variable not_empty_, not_full_;
    std::deque<T> items_;
    bool closed_ = false;
};

}  // namespace onecard
