#include "graph/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace tessera {

std::string user_cache_dir() {
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir;
  if (xdg && *xdg) dir = xdg;
  else if (home && *home) dir = fs::path(home) / ".cache";
  else dir = fs::temp_directory_path();
  return (dir / "tessera").string();
}

}  // namespace tessera
