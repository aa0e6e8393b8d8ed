// Progress of long work (loading a model, the end-to-end check, writing a
// plan's files), reported by the libraries through a callback so that they
// never print: the CLI draws it on a terminal (tools/cli/progress_bar.h),
// an embedder does what it likes with it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tessera {

struct Progress {
  std::string phase;  // "loading", "checking", "writing"
  std::string item;   // the part under way: "set 2/3", "rank 3/4"; empty for none
  int64_t done = 0;   // of total, in bytes when `bytes`, else in parts
  int64_t total = 0;
  bool bytes = false;
};

// Called from the thread doing the work, as often as it likes: a receiver
// that draws throttles itself.
using ProgressFn = std::function<void(const Progress&)>;

}  // namespace tessera
