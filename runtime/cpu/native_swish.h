// SiLU (x * sigmoid(x)) as a pass of our own over a convolution's result,
// instead of oneDNN's swish post-op. oneDNN 2.6's swish (an exp, a divide
// and the sign handling of its logistic, ~25 instructions a vector) made the
// fused Conv+Swish compute-bound where the convolution itself is not:
// EfficientNet-B0's 16->96 1x1 convolution at 112x112 (AMD EPYC Zen 4, one
// thread, best of 60) 0.39 ms alone, 1.06-1.13 ms with the post-op, 0.72 ms
// followed by this pass; 24->144 at 56x56 0.45 -> 0.33 ms; 112->672 at
// 14x14 0.33 -> 0.29 ms. Two threads, the 112x112 one: 0.43-0.50 -> 0.37 ms.
#pragma once

#include <cstdint>

namespace tessera::runtime::cpu {

// Whether this host runs the pass (AVX-512F); otherwise the caller keeps
// oneDNN's post-op (swish_in_place is only for hosts where this holds).
bool native_swish_available();

// p[i] = p[i] * sigmoid(p[i]) for i < n, over the current OpenMP threads.
// The sigmoid is ONNX Runtime's (MLAS's) rational form, 0.5 + x P(x^2) /
// Q(x^2) with x clamped to [-18, 18]: within 3e-6 absolute of the exact
// x * sigmoid(x) over [-30, 30].
void swish_in_place(float* p, int64_t n);

}  // namespace tessera::runtime::cpu
