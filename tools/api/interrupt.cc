#include "tools/api/interrupt.h"

#include <atomic>
#include <csignal>

namespace tessera::api {

namespace {

std::atomic<int> g_holding{0};  // nesting depth of HoldInterrupts
std::atomic<int> g_pending{0};  // a held signal, 0 if none
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Async-signal-safe: atomics, signal() and raise() only.
extern "C" void on_interrupt(int sig) {
  if (g_holding.load() > 0) {
    g_pending.store(sig);
    return;
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void install_interrupt_handlers() {
  for (int sig : kSignals) {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

HoldInterrupts::HoldInterrupts() { ++g_holding; }

HoldInterrupts::~HoldInterrupts() {
  if (--g_holding == 0) {
    int sig = g_pending.exchange(0);
    if (sig != 0) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
  }
}

}  // namespace tessera::api
