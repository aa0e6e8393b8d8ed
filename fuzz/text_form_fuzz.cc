// Fuzz target: the text-form parser (graph/text_form.h). A text that parses
// must print to a text that parses back to the same print.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_util.h"
#include "graph/text_form.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::expect_user_errors_only([&] {
    tessera::Graph g = tessera::parse_graph(text, "fuzz.txt");
    std::string printed = tessera::print_graph(g);
    std::string again;
    try {
      again = tessera::print_graph(tessera::parse_graph(printed, "printed"));
    } catch (const tessera::Error& e) {
      std::fprintf(stderr, "fuzz: the printed form of a parsed graph does not parse: %s\n", e.what());
      std::abort();
    }
    if (again != printed) {
      std::fprintf(stderr, "fuzz: print(parse(print(g))) != print(g)\n");
      std::abort();
    }
  });
  return 0;
}
