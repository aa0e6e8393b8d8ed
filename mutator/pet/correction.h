// Correction kernels for partially equivalent mutants: where the verifier
// reports output boxes on which a mutant differs from the original program,
// the original is recomputed on exactly those boxes (its input windows
// sliced, zero padding made explicit, its ops run on the windows) and the
// results overwrite the boxes (Slice + Concat around each box). Everything is
// plain IR of standard ONNX ops, so it runs in Tessera's runtime and in ONNX
// Runtime alike, and the cost model sees the corrections like any other op.
#pragma once

#include <vector>

#include "mutator/mutation.h"
#include "verifier/verdict.h"

namespace tessera::mutator::pet {

// Ops the recomputation follows backwards from a box: Conv, MatMul,
// element-wise ops (with broadcasting), Transpose, Identity.
//
// On success m.replacement computes the original on `differing` and the
// mutant elsewhere, m.corrections = differing, m.id.kind = kPartial, and
// the result still needs verifying (the search does). Returns false, leaving
// m unchanged, when the boxes cover more than `max_fraction` of an output
// (the mutant is then more wrong than right), or when the original cannot be
// recomputed on a box.
bool add_corrections(Mutation& m, const std::vector<verifier::OutputRegion>& differing, double max_fraction = 0.25);

// The box of `t` (a copy).
Tensor slice_tensor(const Tensor& t, const verifier::Box& box);

}  // namespace tessera::mutator::pet
