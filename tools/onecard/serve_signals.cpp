#include "serve_signals.h"

#include <pthread.h>
#include <unistd.h>
#include <atomic>
#include <thread>

namespace onecard::cli {
namespace {

// What SIGTERM/SIGINT do when a thread that does not block them takes them: serve's own signal thread
// (block_stop_signals) or a thread started before main() could block them (OpenBLAS's pool, started in
// a library constructor). The kernel hands a process-directed signal to such a thread whenever the main
// thread is not in sigwait(): while the model loads. A signal handler has no context argument, hence
// these two process-wide values (set once on the main thread before loading; lock-free atomics are
// async-signal-safe).
std::atomic<bool> g_serving{false};
pthread_t g_main_thread;

void on_stop_signal(int sig) {
    if (g_serving.load()) {
        pthread_kill(g_main_thread, sig);  // pending on the main thread, whose sigwait() takes it
        return;
    }
    // Still loading: nothing to drain and nothing half-written that the next start does not clean up
    // (a disk KV tier's temp files), so stop at once, saying so, with a clean exit status.
    static const char msg[] = "serve: stop signal while loading: stopped before serving\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(0);
}

}  // namespace

void block_stop_signals(sigset_t& set) {
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    // Blocked here, so every thread started from now on inherits the mask and only sigwait() sees them;
    // threads started before main() (OpenBLAS's) run on_stop_signal instead of dying of the signal.
    g_main_thread = pthread_self();
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    // And one thread of our own that takes them whatever else runs: with OPENBLAS_NUM_THREADS=1 (or
    // any BLAS without a pool) no thread started before main(), every thread blocked the signals, and a
    // stop signal during the load stayed pending until serving began (found by the ASan suite, which
    // runs with one BLAS thread). It runs on_stop_signal like any such thread, for the process's life.
    std::thread([] {
        sigset_t mine;
        sigemptyset(&mine);
        sigaddset(&mine, SIGINT);
        sigaddset(&mine, SIGTERM);
        pthread_sigmask(SIG_UNBLOCK, &mine, nullptr);
        for (;;) pause();
    }).detach();
    std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server
}

void mark_serving() {
    g_serving = true;
}

}  // namespace onecard::cli
