// oneDNN kernels: a kernel is a short list of primitive executions (an input
// reorder, the op, ...) whose arguments are bound to plan values, to regions
// of the kernel's scratch (which the memory planner places in the arena), or
// to memory the kernel owns (prepacked weights). Primitives are created once
// per plan; oneDNN's own primitive cache shares identical ones across plans.
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "runtime/fusion.h"
#include "runtime/kernel.h"

namespace tessera::runtime::cpu {

struct Onednn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

using Md = dnnl::memory::desc;

// Row-major f32 descriptor of `shape` (a scalar is {1}).
Md plain_md(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
bool is_plain(const Md& md, const Shape& shape);
dnnl::memory::dims to_dims(const Shape& shape);
// `shape` with leading 1s up to `rank`.
Shape pad_front(const Shape& shape, size_t rank);

class OnednnKernel : public Kernel {
 public:
  // `weights_from`: a kernel whose prepacked constants prepack() returns
  // instead of a new copy when the source and the format agree.
  explicit OnednnKernel(std::shared_ptr<Onednn> dnn, const OnednnKernel* weights_from = nullptr)
      : dnn_(std::move(dnn)), weights_from_(weights_from) {}

  void run(ExecContext& ctx) override;
  // A kernel whose main step is ours (add_native_step) names itself "native:...".
  std::string impl() const override { return impl_.rfind("native:", 0) == 0 ? impl_ : "onednn:" + impl_; }
  int64_t scratch_bytes() const override { return scratch_; }
  int64_t weight_bytes() const override { return weight_bytes_; }

  // Building (at plan compile).
  int64_t alloc_scratch(int64_t bytes);
  // Adds a primitive; `pd` gives its scratchpad size. Returns the step index.
  size_t add_step(dnnl::primitive prim, const dnnl::primitive_desc_base& pd);
  // Adds a step of our own: `fn` runs with the step's arguments, bound as a
  // primitive's are (their data handles set for the run). Returns its index.
  using NativeStep = std::function<void(const std::unordered_map<int, dnnl::memory>& args)>;
  size_t add_native_step(NativeStep fn);
  void bind_value(size_t step, int arg, ValueId v, const Md& md);
  void bind_scratch(size_t step, int arg, int64_t offset, const Md& md);
  void bind_fixed(size_t step, int arg, const dnnl::memory& mem);
  // Reorders a constant (plain `from`) into `to` once; the kernel keeps it.
  // A mapped constant's pages then leave the process's memory: the packed
  // copy replaces the mapped weight rather than adding to it (TinyLlama f32,
  // 4.1 GiB of weights, `tessera run`: peak RSS 7.9 GiB -> 4.3 GiB).
  dnnl::memory prepack(const Tensor& t, const Md& from, const Md& to);
  // The same for a packing of our own (`format` names it): `pack` runs once
  // per constant and format, its bytes counted as the kernel's weights.
  // `pack` returns the packed form and its size.
  using NativePack = std::function<std::pair<std::shared_ptr<const void>, int64_t>()>;
  std::shared_ptr<const void> prepack_native(const Tensor& t, const std::string& format, const NativePack& pack);
  void set_impl(const std::string& s) { impl_ = s; }
  // Names a step of our own that follows the op's ("+native_swish").
  void add_impl_suffix(const std::string& s) { impl_ += s; }
  // The step does nothing in a run where values a and b share a buffer (a
  // copy of the residual into the output that in-place placement made moot).
  void skip_when_same(size_t step, ValueId a, ValueId b) { steps_[step].same = {a, b}; }
  // Reads `to` wherever the kernel was built to read `from`.
  void remap_value(ValueId from, ValueId to);
  // Whether a run reads v's buffer (a prepacked constant is not read).
  bool reads(ValueId v) const;
  // Takes `other` (the same group built under one thread) as the form that
  // runs when ExecContext::one_thread; it shares this kernel's prepacked
  // weights. oneDNN fixes a primitive's thread count at creation, so a plan
  // that must drop to one thread at run time needs primitives made for it.
  // False (nothing taken) when their steps or fixed arguments differ.
  bool adopt_one_thread_form(OnednnKernel& other);
  Onednn& dnn() { return *dnn_; }

 private:
  struct Binding {
    enum class Source : uint8_t { kValue, kScratch, kFixed } source;
    ValueId value = kNoValue;
    int64_t offset = 0;
    dnnl::memory mem;
  };
  struct Step {
    dnnl::primitive prim;
    NativeStep native;  // set: runs instead of prim
    std::vector<Binding> bindings;
    std::unordered_map<int, dnnl::memory> args;
    std::pair<ValueId, ValueId> same{kNoValue, kNoValue};
  };

  std::shared_ptr<Onednn> dnn_;
  std::vector<Step> steps_;
  std::vector<Step> one_thread_steps_;  // empty: steps_ serve both
  std::vector<dnnl::memory> owned_;
  std::vector<const void*> owned_sources_;  // the constant each owned_ entry was packed from
  struct NativePacked {
    const void* source;
    std::string format;
    std::shared_ptr<const void> packed;
  };
  std::vector<NativePacked> native_owned_;
  const OnednnKernel* weights_from_ = nullptr;
  int64_t scratch_ = 0;
  int64_t weight_bytes_ = 0;
  std::string impl_;
};

// The oneDNN eltwise algorithm of a unary op (fusion.h's post-op set).
struct EltwiseSpec {
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
};
std::optional<EltwiseSpec> eltwise_spec(const Node& node);

// Post-ops of a fused group, appended to `attr`; binary operands are bound to
// `kernel` at step `step` by post-op position. `dst_rank` pads operand dims.
// md_of gives a value's current layout (operands with the chain's dims may
// share its blocked layout).
struct PostOpsPlan {
  dnnl::post_ops ops;
  std::vector<std::pair<int, ValueId>> binary_args;  // (post-op index, value)
  std::vector<Md> binary_mds;
};
// Post-op `sum_index` (an Add whose operand the caller places in dst) becomes
// oneDNN's sum post-op; -1 for none.
// `dt`: the type of broadcast operands (the data's).
PostOpsPlan make_post_ops(const Graph& g, const FusedGroup& grp, const Shape& dst_shape,
                          const std::function<Md(ValueId)>& md_of, int sum_index = -1,
                          dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
void bind_post_ops(OnednnKernel& k, size_t step, const PostOpsPlan& p);

}  // namespace tessera::runtime::cpu
