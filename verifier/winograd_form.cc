#include "verifier/winograd_form.h"

#include "graph/error.h"

namespace tessera::verifier {

const WinogradForm& winograd_form(int m) {
  static const WinogradForm f2{2, 2,
                               {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
                               {{2, 0, 0}, {1, 1, 1}, {1, -1, 1}, {0, 0, 2}},
                               {{1, 1, 1, 0}, {0, 1, -1, -1}}};
  static const WinogradForm f4{4, 24,
                               {{4, 0, -5, 0, 1, 0},
                                {0, -4, -4, 1, 1, 0},
                                {0, 4, -4, -1, 1, 0},
                                {0, -2, -1, 2, 1, 0},
                                {0, 2, -1, -2, 1, 0},
                                {0, 4, 0, -5, 0, 1}},
                               {{6, 0, 0}, {-4, -4, -4}, {-4, 4, -4}, {1, 2, 4}, {1, -2, 4}, {0, 0, 24}},
                               {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}}};
  if (m == 2) return f2;
  if (m == 4) return f4;
  TESSERA_THROW(ErrorKind::kInternal, "no Winograd form F(" << m << "x" << m << ", 3x3)");
}

}  // namespace tessera::verifier
