// The CLI's progress bar: one line on stderr, redrawn in place, for the
// libraries' Progress reports (graph/progress.h): `loading  [####......]
// 1.2/4.4 GB`, `checking 3 sets, plan [####......]`, `writing rank 3/4 [###...]
// 0.9/1.1 GB`. Drawn only when enabled (the CLI enables it when stderr is a
// terminal, so pipes, logs and the tests' captured stderr get nothing), and
// at most once per interval within one part of the work.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "graph/progress.h"

namespace tessera::cli {

class ProgressBar {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  ProgressBar(std::FILE* out, bool enabled, std::chrono::milliseconds interval = std::chrono::milliseconds(100),
              Clock now = [] { return std::chrono::steady_clock::now(); });
  ~ProgressBar() { clear(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Redraws for p: at once when the phase or part changed or the work is
  // done, else only when `interval` has passed since the last redraw.
  void update(const Progress& p);
  // Erases the bar (before the command prints its results).
  void clear();
  // A callback for the libraries that updates this bar (which must outlive it).
  ProgressFn callback() {
    return [this](const Progress& p) { update(p); };
  }
  int redraws() const { return redraws_; }

  // The text of the bar for p, without the carriage return: the phase, the
  // part, a bar of `width` cells, and the amount done.
  static std::string line(const Progress& p, int width = 24);

 private:
  std::FILE* out_;
  bool enabled_;
  std::chrono::milliseconds interval_;
  Clock now_;
  std::chrono::steady_clock::time_point last_{};
  std::string shown_;  // phase and part of the last redraw; empty: nothing on the line
  int redraws_ = 0;
};

}  // namespace tessera::cli
