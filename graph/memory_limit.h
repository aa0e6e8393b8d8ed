// The process's memory limit (--memory-limit): what the reference
// interpreter, the import and the runtime may allocate at once. Work that
// would go over it is refused before it allocates, with an error that names
// the work, its need and the limit, instead of the machine swapping or the
// kernel killing the process. The default is 3/4 of the physical memory.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

int64_t physical_memory_bytes();
int64_t memory_limit();
// bytes > 0; a limit above the physical memory is allowed (swap).
void set_memory_limit(int64_t bytes);

// Throws Error(kResource) "<what> needs <bytes>, over the memory limit of
// <limit> (--memory-limit)" if bytes exceed the limit.
void check_memory(int64_t bytes, const std::string& what);

// "1.50 GiB", "512 MiB", "12 KiB", "100 B".
std::string bytes_str(int64_t bytes);

// Parses "8G", "512M", "64K" (binary units) or plain bytes; throws Error(kUsage).
int64_t parse_bytes(const std::string& text);

}  // namespace tessera
