// `onecard serve`'s stop signals (SIGINT, SIGTERM): blocked in every thread so that the main thread's
// sigwait() takes them once serving, and a clean stop while the model is still loading.
#pragma once

#include <csignal>

namespace onecard::cli {

// Blocks SIGINT and SIGTERM in the calling (main) thread and every thread it starts later, fills `set`
// with them for sigwait(), installs the handler that threads started before main() run (OpenBLAS's
// pool), starts one thread of its own that runs it whatever else blocks them, and ignores SIGPIPE.
// Until mark_serving(), a stop signal ends the process at once with status 0.
void block_stop_signals(sigset_t& set);

// From now on a stop signal goes to the main thread's sigwait() (the drain), not to the exit.
void mark_serving();

}  // namespace onecard::cli
