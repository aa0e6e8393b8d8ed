// The Winograd transforms F(m x m, 3 x 3) of Lavin & Gray, written once: the
// conv-winograd rule builds its kernels from them and the Z3 obligation
// proves the identity for these same matrices, so that the proof is of the
// rule as it is applied. Y = A^T [(G g G^T) . (B^T d B)] A, with G = G' / s.
#pragma once

#include <vector>

namespace tessera::verifier {

struct WinogradForm {
  int m;                              // outputs per tile side
  int s;                              // G' = s G is integral
  std::vector<std::vector<int>> bt;   // B^T, (m+2) x (m+2)
  std::vector<std::vector<int>> g;    // G', (m+2) x 3
  std::vector<std::vector<int>> at;   // A^T, m x (m+2)
};

// m = 2 or 4; throws Error(kInternal) otherwise.
const WinogradForm& winograd_form(int m);

}  // namespace tessera::verifier
