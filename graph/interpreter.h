// The reference interpreter: evaluates a graph with each op's reference kernel,
// written once over the number type. It runs in float, double, or Z_p (for the
// verifier). Simple and obviously correct; the fast path is runtime/.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graph/graph.h"
#include "graph/op.h"
#include "graph/sharding.h"

namespace tessera {

// Converts between tensors and the interpreter's representation. Float data
// becomes T (for Z_p, see num_from_double); f16/bf16 results are rounded back.
template <class T>
RefTensor<T> to_ref(const Tensor& t);
template <class T>
Tensor from_ref(const RefTensor<T>& r);

// Evaluates `g` on `inputs` (one per graph input, in order, types must match)
// and returns the graph outputs. Throws Error naming the node that failed.
template <class T>
std::vector<RefTensor<T>> interpret(const Graph& g, const std::vector<RefTensor<T>>& inputs);

// Evaluates the same per-rank program on every rank of `mesh`:
// inputs[rank][i] is rank's i-th graph input. Collective ops exchange data
// between ranks along their mesh axis. Returns outputs[rank][j].
template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_on_mesh(
    const Graph& g, const DeviceMesh& mesh, const std::vector<std::vector<RefTensor<T>>>& inputs);

// Each rank runs its own program (graphs[rank]) in lockstep with the others:
// the programs must have the same nodes in the same order, differing only in
// constant data and attributes of local ops (what partitioning makes), so
// that their collectives meet. Throws Error(kInvalidGraph) where they do not.
template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_ranks(const std::vector<const Graph*>& graphs, const DeviceMesh& mesh,
                                                       const std::vector<std::vector<RefTensor<T>>>& inputs);

// interpret_ranks on several input sets at once: inputs[s * ranks + r] is
// rank r's inputs of set s, and so are the outputs; collectives exchange
// within a set. Every step runs for all sets before the next, so a weight
// is converted once for them all (and once for the ranks holding the same
// bytes) instead of once per set and rank.
// `steps`, where set, is called before each step (steps done, steps in all)
// and once at the end: the end-to-end check's progress.
using StepFn = std::function<void(int64_t done, int64_t total)>;
// The inputs are taken (a caller done with them moves them in) and each is
// freed after its last reader.
template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_ranks_sets(const std::vector<const Graph*>& graphs,
                                                            const DeviceMesh& mesh,
                                                            std::vector<std::vector<RefTensor<T>>> inputs,
                                                            const StepFn& steps = {});

// interpret on several input sets at once (outputs[s] for sets[s]), each
// weight converted once for all of them.
template <class T>
std::vector<std::vector<RefTensor<T>>> interpret_sets(const Graph& g, const std::vector<std::vector<RefTensor<T>>>& sets,
                                                      const StepFn& steps = {});

enum class Precision { kF32, kF64 };
// Convenience over Tensor: runs in float or double and converts back to each
// output's dtype.
std::vector<Tensor> evaluate(const Graph& g, const std::vector<Tensor>& inputs,
                             Precision precision = Precision::kF32);

// What a collective kernel sees when the graph runs on a mesh: the values of
// its input on every rank, and where this rank sits.
struct MeshEvalContext {
  const DeviceMesh* mesh = nullptr;
  int64_t rank = 0;
  // peer_inputs[r] = the collective's input tensor on rank r (type-erased: a
  // pointer to RefTensor<T> of the interpreter's T).
  std::vector<const void*> peer_inputs;
};

}  // namespace tessera
