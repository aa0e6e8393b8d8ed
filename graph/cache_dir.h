// Where Tessera keeps what it learns about this machine between runs (the
// host profile, proof results): $XDG_CACHE_HOME/tessera, else
// ~/.cache/tessera, else the temporary folder's tessera/. Shared by cost/
// and verifier/, which both depend on graph/ only.
#pragma once

#include <string>

namespace tessera {

std::string user_cache_dir();

}  // namespace tessera
