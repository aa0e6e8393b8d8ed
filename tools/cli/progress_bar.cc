#include "tools/cli/progress_bar.h"

#include <algorithm>
#include <cinttypes>

namespace tessera::cli {

namespace {

// "0.9/1.1 GB": both amounts in the unit of the total.
std::string amounts(const Progress& p) {
  char buf[64];
  if (!p.bytes) {
    std::snprintf(buf, sizeof buf, "%" PRId64 "/%" PRId64, p.done, p.total);
    return buf;
  }
  const double total = static_cast<double>(p.total);
  const char* unit = total >= 1e9 ? "GB" : total >= 1e6 ? "MB" : "kB";
  const double scale = total >= 1e9 ? 1e9 : total >= 1e6 ? 1e6 : 1e3;
  std::snprintf(buf, sizeof buf, "%.1f/%.1f %s", static_cast<double>(p.done) / scale, total / scale, unit);
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::FILE* out, bool enabled, std::chrono::milliseconds interval, Clock now)
    : out_(out), enabled_(enabled), interval_(interval), now_(std::move(now)) {}

std::string ProgressBar::line(const Progress& p, int width) {
  double fraction = p.total > 0 ? std::clamp(static_cast<double>(p.done) / static_cast<double>(p.total), 0.0, 1.0) : 0;
  int filled = static_cast<int>(fraction * width);
  std::string s = p.phase;
  if (!p.item.empty()) s += " " + p.item;
  s += " [" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.') + "]";
  // A count of parts is the item itself ("set 2/3"); bytes are shown.
  if (p.bytes || p.item.empty()) s += " " + amounts(p);
  return s;
}

void ProgressBar::update(const Progress& p) {
  if (!enabled_) return;
  auto now = now_();
  std::string part = p.phase + "\n" + p.item;
  bool done = p.total > 0 && p.done >= p.total;
  if (part == shown_ && !done && now - last_ < interval_) return;
  last_ = now;
  shown_ = part;
  ++redraws_;
  // \r and erase to the end of the line: a shorter line leaves nothing behind.
  std::fprintf(out_, "\r%s\033[K", line(p).c_str());
  std::fflush(out_);
}

void ProgressBar::clear() {
  if (!enabled_ || shown_.empty()) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  shown_.clear();
}

}  // namespace tessera::cli
