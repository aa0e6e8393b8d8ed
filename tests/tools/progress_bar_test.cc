// The CLI's progress bar (tools/cli/progress_bar.h): its line's format, its
// throttling on an injected clock, and that a disabled bar (stderr not a
// terminal) writes nothing at all.
#include "tools/cli/progress_bar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace tessera::cli {
namespace {

using std::chrono::milliseconds;
using Time = std::chrono::steady_clock::time_point;

// What the bar wrote to a temporary file.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::string out;
  std::rewind(f);
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  return out;
}

TEST(ProgressBar, LineShowsPhasePartBarAndBytesInTheTotalsUnit) {
  EXPECT_EQ(ProgressBar::line({"loading", "", 1'200'000'000, 4'400'000'000, true}, 10),
            "loading [##........] 1.2/4.4 GB");
  EXPECT_EQ(ProgressBar::line({"writing", "rank 3/4", 900'000'000, 1'100'000'000, true}, 10),
            "writing rank 3/4 [########..] 0.9/1.1 GB");
  EXPECT_EQ(ProgressBar::line({"writing", "rank 1/2", 250'000'000, 495'000'000, true}, 4), "writing rank 1/2 [##..] 250.0/495.0 MB");
  // Parts counted by the item: the item says how far, the bar shows it.
  EXPECT_EQ(ProgressBar::line({"checking", "set 2/3", 1, 3, false}, 6), "checking set 2/3 [##....]");
  // Nothing known yet, or more than the total: an empty or full bar, never past it.
  EXPECT_EQ(ProgressBar::line({"loading", "", 0, 0, true}, 4), "loading [....] 0.0/0.0 kB");
  EXPECT_EQ(ProgressBar::line({"searching", "", 7, 5, false}, 4), "searching [####] 7/5");
}

TEST(ProgressBar, DisabledWritesNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(f, /*enabled=*/false);
    ProgressFn report = bar.callback();
    for (int k = 0; k <= 3; ++k) report({"checking", "set " + std::to_string(k) + "/3", k, 3, false});
    report({"writing", "rank 1/1", 10, 10, true});
    bar.clear();
    EXPECT_EQ(bar.redraws(), 0);
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(ProgressBar, RedrawsAtMostOncePerIntervalWithinOnePart) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Time now{};
  ProgressBar bar(f, true, milliseconds(100), [&] { return now; });
  const int64_t total = 1000;
  bar.update({"loading", "", 1, total, true});  // the first report draws
  EXPECT_EQ(bar.redraws(), 1);
  for (int64_t k = 2; k < 50; ++k) {
    now += milliseconds(1);
    bar.update({"loading", "", k, total, true});
  }
  EXPECT_EQ(bar.redraws(), 1) << "49 ms of reports: throttled";
  now += milliseconds(60);
  bar.update({"loading", "", 60, total, true});
  EXPECT_EQ(bar.redraws(), 2) << "past the interval";
  bar.update({"loading", "", total, total, true});
  EXPECT_EQ(bar.redraws(), 3) << "the end of the work always draws";
  bar.update({"writing", "rank 1/2", 0, total, true});
  EXPECT_EQ(bar.redraws(), 4) << "a new phase draws at once";
  bar.update({"writing", "rank 2/2", 0, total, true});
  EXPECT_EQ(bar.redraws(), 5) << "a new part draws at once";
  bar.clear();
  std::string out = contents(f);
  EXPECT_EQ(out.rfind("\r\033[K"), out.size() - 4) << "cleared at the end";
  EXPECT_NE(out.find("\rwriting rank 2/2 ["), std::string::npos);
  EXPECT_NE(out.find("1.0/1.0 kB"), std::string::npos);
  std::fclose(f);
}

}  // namespace
}  // namespace tessera::cli
