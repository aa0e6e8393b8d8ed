#include "runtime/cuda/library_ops.h"

#include <map>
#include <mutex>
#include <sstream>

#include "graph/error.h"
#include "runtime/cuda/cuda_util.h"

namespace tessera::runtime::cuda {
namespace {

cudaDataType_t blas_type(DType d) {
  switch (d) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: TESSERA_THROW(ErrorKind::kUnsupported, "cuBLASLt matmul on " << dtype_name(d));
  }
}

cudnnDataType_t dnn_type(DType d) {
  switch (d) {
    case DType::kF32: return CUDNN_DATA_FLOAT;
    case DType::kF16: return CUDNN_DATA_HALF;
    case DType::kBF16: return CUDNN_DATA_BFLOAT16;  // cuDNN 8.1+, tensor cores from Ampere on
    default: TESSERA_THROW(ErrorKind::kUnsupported, "cuDNN op on " << dtype_name(d));
  }
}

// ---- cuBLASLt ----

struct LtLayout {
  cublasLtMatrixLayout_t h = nullptr;
  LtLayout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    TESSERA_CUBLAS(cublasLtMatrixLayoutCreate(&h, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
    int32_t count = static_cast<int32_t>(batch);
    TESSERA_CUBLAS(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TESSERA_CUBLAS(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                    sizeof(stride)));
  }
  ~LtLayout() { cublasLtMatrixLayoutDestroy(h); }
  LtLayout(const LtLayout&) = delete;
  LtLayout& operator=(const LtLayout&) = delete;
};

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's
// first operand is our B, its second our A, and the result is n x m.
class MatmulOp : public DeviceOp {
 public:
  MatmulOp(const DeviceContext& dc, const GemmPlan& p, DType dtype) : p_(p), elem_(dtype_size(dtype)) {
    cudaDataType_t t = blas_type(dtype);
    cublasComputeType_t compute =
        dtype == DType::kF32 && dc.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    TESSERA_CUBLAS(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    cublasOperation_t op_first = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_second = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    TESSERA_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    TESSERA_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    first_ = std::make_unique<LtLayout>(t, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n,
                                        p.batch, p.stride_b);
    second_ = std::make_unique<LtLayout>(t, p.trans_a ? p.m : p.k, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k,
                                         p.batch, p.stride_a);
    out_ = std::make_unique<LtLayout>(t, p.n, p.m, p.n, p.batch, p.stride_c);
    cublasLtMatmulPreference_t pref;
    TESSERA_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = dc.lt_workspace_bytes;
    TESSERA_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(dc.lt, desc_, first_->h, second_->h, out_->h, out_->h, pref, 1,
                                                      &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0)
      TESSERA_THROW(ErrorKind::kUnsupported, "cuBLASLt has no algorithm for a " << p.m << "x" << p.k << "x" << p.n
                                                                                 << " matmul (" << cublasLtGetStatusString(s) << ")");
    algo_ = result.algo;
  }
  ~MatmulOp() override { cublasLtMatmulDescDestroy(desc_); }

  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    if (p_.m == 0 || p_.n == 0) return;
    const uint8_t* a = ptr[reads[0]];
    const uint8_t* b = ptr[reads[1]];
    uint8_t* d = ptr[writes[0]];
    for (size_t c = 0; c < p_.off_a.size(); ++c) {
      const void* first = b + p_.off_b[c] * static_cast<int64_t>(elem_);
      const void* second = a + p_.off_a[c] * static_cast<int64_t>(elem_);
      void* out = d + p_.off_c[c] * static_cast<int64_t>(elem_);
      TESSERA_CUBLAS(cublasLtMatmul(dc.lt, desc_, &p_.alpha, first, first_->h, second, second_->h, &p_.beta, out,
                                    out_->h, out, out_->h, &algo_, dc.lt_workspace, dc.lt_workspace_bytes, dc.stream));
    }
  }
  std::string impl() const override { return "cublasLt"; }

 private:
  GemmPlan p_;
  size_t elem_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  std::unique_ptr<LtLayout> first_, second_, out_;
  cublasLtMatmulAlgo_t algo_{};
};

// ---- cuDNN ----

struct TensorDesc {
  cudnnTensorDescriptor_t h = nullptr;
  TensorDesc(cudnnDataType_t t, const std::vector<int>& dims) {
    TESSERA_CUDNN(cudnnCreateTensorDescriptor(&h));
    TESSERA_CUDNN(cudnnSetTensorNdDescriptorEx(h, CUDNN_TENSOR_NCHW, t, static_cast<int>(dims.size()), dims.data()));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(h); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

// cuDNN's heuristics choose per shape once per process: plans compiled for
// the same convolution (a benchmark's repeats, the ranks of one machine)
// share the choice.
std::mutex algo_mutex;
std::map<std::string, cudnnConvolutionFwdAlgo_t>& algo_cache() {
  static std::map<std::string, cudnnConvolutionFwdAlgo_t> cache;
  return cache;
}

constexpr size_t kMaxConvWorkspace = size_t{512} << 20;

class ConvOp : public DeviceOp {
 public:
  ConvOp(const DeviceContext& dc, const WindowGeometry& w, DType dtype) {
    TESSERA_CHECK(w.symmetric(), "cuDNN convolution needs symmetric padding");
    cudnnDataType_t t = dnn_type(dtype);
    x_ = std::make_unique<TensorDesc>(t, w.cudnn_dims(w.in, w.n, w.c));
    y_ = std::make_unique<TensorDesc>(t, w.cudnn_dims(w.out, w.n, w.k));
    TESSERA_CUDNN(cudnnCreateFilterDescriptor(&f_));
    std::vector<int> fdims = w.cudnn_dims(w.kernel, w.k, w.c / w.group);
    TESSERA_CUDNN(cudnnSetFilterNdDescriptor(f_, t, CUDNN_TENSOR_NCHW, static_cast<int>(fdims.size()), fdims.data()));
    TESSERA_CUDNN(cudnnCreateConvolutionDescriptor(&conv_));
    std::vector<int> pads = w.cudnn_vec(w.pad_begin, 0), strides = w.cudnn_vec(w.strides, 1),
                     dil = w.cudnn_vec(w.dilations, 1);
    TESSERA_CUDNN(cudnnSetConvolutionNdDescriptor(conv_, static_cast<int>(pads.size()), pads.data(), strides.data(),
                                                  dil.data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    TESSERA_CUDNN(cudnnSetConvolutionGroupCount(conv_, static_cast<int>(w.group)));
    // f32 stays exact unless TF32 is allowed; f16 and bf16 use tensor cores
    // (accumulating in f32: the convolution descriptor's CUDNN_DATA_FLOAT).
    cudnnMathType_t math = dtype == DType::kF16 || dtype == DType::kBF16 ? CUDNN_TENSOR_OP_MATH
                           : dc.allow_tf32      ? CUDNN_DEFAULT_MATH
                                                : CUDNN_FMA_MATH;
    TESSERA_CUDNN(cudnnSetConvolutionMathType(conv_, math));
    std::vector<int> got(fdims.size());
    TESSERA_CUDNN(cudnnGetConvolutionNdForwardOutputDim(conv_, x_->h, f_, static_cast<int>(got.size()), got.data()));
    if (got != w.cudnn_dims(w.out, w.n, w.k))
      TESSERA_THROW(ErrorKind::kInternal, "cuDNN and shape inference disagree on a convolution's output shape");
    std::ostringstream key;
    key << dtype_name(dtype) << ' ' << static_cast<int>(math) << " g" << w.group;
    for (auto* v : {&w.in, &w.kernel, &w.strides, &w.dilations, &w.pad_begin})
      for (int64_t x : *v) key << ' ' << x;
    key << " n" << w.n << " c" << w.c << " k" << w.k;
    std::lock_guard<std::mutex> lock(algo_mutex);
    auto it = algo_cache().find(key.str());
    if (it != algo_cache().end()) {
      algo_ = it->second;
    } else {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int found = 0;
      TESSERA_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(dc.dnn, x_->h, f_, conv_, y_->h,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
      bool ok = false;
      for (int i = 0; i < found && !ok; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxConvWorkspace) {
          algo_ = perf[i].algo;
          ok = true;
        }
      if (!ok) TESSERA_THROW(ErrorKind::kUnsupported, "cuDNN has no forward algorithm for this convolution");
      algo_cache()[key.str()] = algo_;
    }
    size_t ws = 0;
    TESSERA_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(dc.dnn, x_->h, f_, conv_, y_->h, algo_, &ws));
    workspace_ = static_cast<int64_t>(ws);
  }
  ~ConvOp() override {
    cudnnDestroyFilterDescriptor(f_);
    cudnnDestroyConvolutionDescriptor(conv_);
  }

  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t* workspace) override {
    float one = 1.0f, zero = 0.0f;
    TESSERA_CUDNN(cudnnConvolutionForward(dc.dnn, &one, x_->h, ptr[reads[0]], f_, ptr[reads[1]], conv_, algo_,
                                          workspace, static_cast<size_t>(workspace_), &zero, y_->h, ptr[writes[0]]));
  }
  std::string impl() const override { return "cudnn:algo" + std::to_string(static_cast<int>(algo_)); }
  int64_t workspace_bytes() const override { return workspace_; }

 private:
  std::unique_ptr<TensorDesc> x_, y_;
  cudnnFilterDescriptor_t f_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  int64_t workspace_ = 0;
};

class PoolOp : public DeviceOp {
 public:
  PoolOp(const WindowGeometry& w, DType dtype, bool max, bool count_include_pad) {
    cudnnDataType_t t = dnn_type(dtype);
    x_ = std::make_unique<TensorDesc>(t, w.cudnn_dims(w.in, w.n, w.c));
    y_ = std::make_unique<TensorDesc>(t, w.cudnn_dims(w.out, w.n, w.c));
    TESSERA_CUDNN(cudnnCreatePoolingDescriptor(&pool_));
    cudnnPoolingMode_t mode = max                 ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    std::vector<int> win = w.cudnn_vec(w.kernel, 1), pads = w.cudnn_vec(w.pad_begin, 0),
                     strides = w.cudnn_vec(w.strides, 1);
    TESSERA_CUDNN(cudnnSetPoolingNdDescriptor(pool_, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(win.size()),
                                              win.data(), pads.data(), strides.data()));
  }
  ~PoolOp() override { cudnnDestroyPoolingDescriptor(pool_); }
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    float one = 1.0f, zero = 0.0f;
    TESSERA_CUDNN(cudnnPoolingForward(dc.dnn, pool_, &one, x_->h, ptr[reads[0]], &zero, y_->h, ptr[writes[0]]));
  }
  std::string impl() const override { return "cudnn"; }

 private:
  std::unique_ptr<TensorDesc> x_, y_;
  cudnnPoolingDescriptor_t pool_ = nullptr;
};

class SoftmaxOp : public DeviceOp {
 public:
  SoftmaxOp(const SoftmaxGeometry& s, DType dtype) : log_(s.log) {
    desc_ = std::make_unique<TensorDesc>(dnn_type(dtype), std::vector<int>{static_cast<int>(s.outer),
                                                                           static_cast<int>(s.axis),
                                                                           static_cast<int>(s.inner), 1});
  }
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    float one = 1.0f, zero = 0.0f;
    TESSERA_CUDNN(cudnnSoftmaxForward(dc.dnn, log_ ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                      CUDNN_SOFTMAX_MODE_CHANNEL, &one, desc_->h, ptr[reads[0]], &zero, desc_->h,
                                      ptr[writes[0]]));
  }
  std::string impl() const override { return "cudnn"; }

 private:
  bool log_;
  std::unique_ptr<TensorDesc> desc_;
};

}  // namespace

[[noreturn]] void throw_cuda(cudaError_t e, const char* call) {
  ErrorKind kind = e == cudaErrorMemoryAllocation ? ErrorKind::kResource : ErrorKind::kInternal;
  TESSERA_THROW(kind, "CUDA: " << call << ": " << cudaGetErrorString(e));
}
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call) {
  ErrorKind kind = s == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::kResource : ErrorKind::kInternal;
  TESSERA_THROW(kind, "cuBLASLt: " << call << ": " << cublasLtGetStatusString(s));
}
[[noreturn]] void throw_cudnn(cudnnStatus_t s, const char* call) {
  ErrorKind kind = s == CUDNN_STATUS_NOT_SUPPORTED ? ErrorKind::kUnsupported : ErrorKind::kInternal;
  TESSERA_THROW(kind, "cuDNN: " << call << ": " << cudnnGetErrorString(s));
}

std::unique_ptr<DeviceOp> make_matmul_op(const DeviceContext& dc, const GemmPlan& plan, DType dtype, ValueId a,
                                         ValueId b, ValueId d) {
  auto op = std::make_unique<MatmulOp>(dc, plan, dtype);
  op->reads = {a, b};
  op->writes = {d};
  return op;
}

std::unique_ptr<DeviceOp> make_conv_op(const DeviceContext& dc, const WindowGeometry& w, DType dtype, ValueId x,
                                       ValueId wt, ValueId y) {
  auto op = std::make_unique<ConvOp>(dc, w, dtype);
  op->reads = {x, wt};
  op->writes = {y};
  return op;
}

std::unique_ptr<DeviceOp> make_pool_op(const DeviceContext&, const WindowGeometry& w, DType dtype, bool max,
                                       bool count_include_pad, ValueId x, ValueId y) {
  auto op = std::make_unique<PoolOp>(w, dtype, max, count_include_pad);
  op->reads = {x};
  op->writes = {y};
  return op;
}

std::unique_ptr<DeviceOp> make_softmax_op(const SoftmaxGeometry& s, DType dtype, ValueId x, ValueId y) {
  auto op = std::make_unique<SoftmaxOp>(s, dtype);
  op->reads = {x};
  op->writes = {y};
  return op;
}

}  // namespace tessera::runtime::cuda
