// Interruption (SIGINT, SIGTERM, SIGHUP) while a plan folder is written.
// Before the writing starts nothing is on disk, so the default action (the
// process ends) leaves nothing behind; while the temporary folder is filled
// and moved into place the signal is held, and acted on once the folder is
// complete, so that OUT_DIR is the old plan or the new one, never a mix.
//
// Only a program that owns the process installs the handlers (the CLI); an
// embedding framework keeps its own, and writing works the same without.
#pragma once

namespace tessera::api {

void install_interrupt_handlers();

// Holds the signals while alive (where the handlers are installed); on
// destruction a held signal is raised again with its default action.
class HoldInterrupts {
 public:
  HoldInterrupts();
  ~HoldInterrupts();
  HoldInterrupts(const HoldInterrupts&) = delete;
  HoldInterrupts& operator=(const HoldInterrupts&) = delete;
};

}  // namespace tessera::api
