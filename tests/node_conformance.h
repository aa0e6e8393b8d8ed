// The ONNX backend node test harness, shared by the reference interpreter's
// run (tests/onnx_import/node_conformance_test.cc) and the CPU runtime's
// (tests/runtime/node_conformance_cpu_test.cc): both must pass exactly the same
// cases, so the case loader, the comparison and the expected-failure list
// live here once.
//
// tests/data/generate_node_tests.py writes the cases (from the installed onnx
// package) into the build folder; every case whose ops are all ops Tessera
// claims is imported, evaluated and compared with ONNX's expected outputs. A
// failure must be fixed or listed in expected_failures() with a reason, and a
// listed case that passes fails the test so the list stays honest.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "graph/op.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/onnx_import.h"
#include "onnx_import/tensor_proto.h"

namespace tessera::node_conformance {

namespace fs = std::filesystem;

// Reasons shared by several expected failures.
inline constexpr char kTrainBatchNorm[] =
    "BatchNormalization training_mode=1 (batch statistics, running-mean "
    "outputs): the IR is inference-only";
inline constexpr char kWindow[] =
    "window size is a graph input: the Range limit and so the output shape "
    "are data-dependent";
inline constexpr char kCrop[] =
    "target shape is a graph input: the pads/slice bounds and so the output "
    "shape are data-dependent";
inline constexpr char kTrainDropout[] =
    "training_mode is a graph input: training-mode Dropout is random, and the "
    "importer accepts only a constant-false training_mode";
inline constexpr char kTrainDropoutMask[] =
    "training-mode Dropout with its mask output: random, outside the "
    "inference IR";
inline constexpr char kArgmax[] =
    "MaxPool's Indices output is not in the IR (MaxPool has one output)";
inline constexpr char kBoolReduce[] =
    "ReduceMax/ReduceMin on bool inputs (opset 20) are rejected: the IR "
    "reduces numeric dtypes only";
inline constexpr char kEmptyReduce[] =
    "reduction over an empty axis (ONNX: the identity, -inf/+inf) is rejected"
    " by the IR's Reduce";

// Cases that fail for a reason Tessera accepts (or that an owning engineer is
// fixing). Each needs its reason; the test fails if one of them passes.
inline const std::map<std::string, std::string>& expected_failures() {
  static const std::map<std::string, std::string> kExpectedFailures = {
      {"test_batchnorm_epsilon_training_mode", kTrainBatchNorm},
      {"test_batchnorm_example_training_mode", kTrainBatchNorm},
      {"test_blackmanwindow_expanded", kWindow},
      {"test_blackmanwindow_symmetric_expanded", kWindow},
      {"test_center_crop_pad_crop_and_pad_expanded", kCrop},
      {"test_center_crop_pad_crop_axes_chw_expanded", kCrop},
      {"test_center_crop_pad_crop_axes_hwc_expanded", kCrop},
      {"test_center_crop_pad_crop_expanded", kCrop},
      {"test_center_crop_pad_crop_negative_axes_hwc_expanded", kCrop},
      {"test_center_crop_pad_pad_expanded", kCrop},
      {"test_hammingwindow_expanded", kWindow},
      {"test_hammingwindow_symmetric_expanded", kWindow},
      {"test_hannwindow_expanded", kWindow},
      {"test_hannwindow_symmetric_expanded", kWindow},
      {"test_maxpool_2d_uint8", "MaxPool on u8: the IR pools floating dtypes only"},
      {"test_maxpool_with_argmax_2d_precomputed_pads", kArgmax},
      {"test_maxpool_with_argmax_2d_precomputed_strides", kArgmax},
      {"test_reduce_max_bool_inputs", kBoolReduce},
      {"test_reduce_max_empty_set", kEmptyReduce},
      {"test_reduce_max_empty_set_bool", kBoolReduce},
      {"test_reduce_min_bool_inputs", kBoolReduce},
      {"test_reduce_min_empty_set", kEmptyReduce},
      {"test_training_dropout", kTrainDropout},
      {"test_training_dropout_default", kTrainDropout},
      {"test_training_dropout_default_mask", kTrainDropoutMask},
      {"test_training_dropout_mask", kTrainDropoutMask},
      {"test_training_dropout_zero_ratio", kTrainDropout},
      {"test_training_dropout_zero_ratio_mask", kTrainDropoutMask},
      {"test_wrap_pad", "Pad mode 'wrap' (opset 19): the IR's Pad has constant, reflect and edge"},
  };
  return kExpectedFailures;
}

// ONNX op types Tessera claims besides the IR's own kinds: the importer folds
// Constant, drops Dropout, maps CastLike to Cast and the old Scatter to
// ScatterElements, and chains the variadic Sum and Mean.
inline const std::set<std::string> kImporterOps = {"Constant", "Dropout",      "CastLike",     "Sum",
                                                  "Mean",     "DepthToSpace", "SpaceToDepth", "Scatter"};

// Inputs that Tessera's static-shape IR needs as constants (they become
// attributes at import). Node tests feed them as graph inputs; the harness
// binds them to the test data as initializers, which is what a user's model
// holds. Maps op type to the input positions.
inline const std::map<std::string, std::vector<int>> kConstantOperands = {
    {"Reshape", {1}},       {"Squeeze", {1}},       {"Unsqueeze", {1}},
    {"Split", {1}},         {"Slice", {1, 2, 3, 4}}, {"Pad", {1, 2, 3}},
    {"Expand", {1}},        {"Tile", {1}},          {"Trilu", {1}},
    {"Clip", {1, 2}},       {"CumSum", {1}},        {"ConstantOfShape", {0}},
    {"Range", {0, 1, 2}},   {"ReduceSum", {1}},     {"ReduceMean", {1}},
    {"ReduceMax", {1}},     {"ReduceMin", {1}},     {"ReduceProd", {1}},
    {"ReduceL2", {1}},      {"ReduceSumSquare", {1}},  {"Resize", {1, 2, 3}},
};

inline constexpr double kRtol = 1e-3;
inline constexpr double kAtol = 1e-5;

// Relative tolerance for an output dtype: ONNX's runner value, widened for
// 16-bit floats to 4 units in the last place, since Tessera rounds every
// intermediate result to the graph's dtype (as a device storing f16/bf16
// would) while ONNX's reference outputs round once at the end.
inline double rtol_for(DType t) {
  if (t == DType::kF16) return std::max(kRtol, 4 * 0x1p-10);
  if (t == DType::kBF16) return std::max(kRtol, 4 * 0x1p-7);
  return kRtol;
}

enum class Outcome { kPassed, kFailed, kSkipped };

struct CaseResult {
  Outcome outcome = Outcome::kFailed;
  std::string message;
};

inline onnx::ModelProto read_model(const fs::path& path) {
  onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  if (!in || !model.ParseFromIstream(&in)) {
    TESSERA_THROW(ErrorKind::kParse, "cannot parse " << path.string());
  }
  return model;
}

// Empty when every op is one Tessera claims; otherwise the first that is not.
inline std::string unsupported_op(const onnx::ModelProto& model) {
  for (const auto& node : model.graph().node()) {
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      return node.domain() + "." + node.op_type();
    }
    if (kImporterOps.count(node.op_type())) continue;
    if (!op_from_name(node.op_type())) return node.op_type();
  }
  return "";
}

// Empty when all graph inputs and outputs have dtypes Tessera has.
inline std::string unsupported_dtype(const onnx::ModelProto& model) {
  auto check = [](const onnx::ValueInfoProto& v) -> std::string {
    try {
      dtype_from_onnx(v.type().tensor_type().elem_type());
      return "";
    } catch (const Error&) {
      return v.name() + " has ONNX elem_type " + std::to_string(v.type().tensor_type().elem_type());
    }
  };
  for (const auto& v : model.graph().input()) {
    if (std::string why = check(v); !why.empty()) return why;
  }
  for (const auto& v : model.graph().output()) {
    if (std::string why = check(v); !why.empty()) return why;
  }
  return "";
}

// Moves the graph inputs that feed constant operands into the initializers,
// with the test data's values. Returns the indices of the inputs that remain.
inline std::vector<int> bind_constant_operands(onnx::ModelProto& model, const fs::path& data_dir) {
  std::set<std::string> to_bind;
  for (const auto& node : model.graph().node()) {
    auto it = kConstantOperands.find(node.op_type());
    if (it == kConstantOperands.end()) continue;
    for (int pos : it->second) {
      if (pos < node.input_size() && !node.input(pos).empty()) to_bind.insert(node.input(pos));
    }
  }
  std::vector<int> kept;
  onnx::GraphProto* graph = model.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> remaining;
  for (int i = 0; i < graph->input_size(); ++i) {
    const onnx::ValueInfoProto& in = graph->input(i);
    if (!to_bind.count(in.name())) {
      kept.push_back(i);
      *remaining.Add() = in;
      continue;
    }
    onnx::TensorProto value;
    fs::path file = data_dir / ("input_" + std::to_string(i) + ".pb");
    std::ifstream f(file, std::ios::binary);
    if (!f || !value.ParseFromIstream(&f)) {
      TESSERA_THROW(ErrorKind::kParse, "cannot parse " << file.string());
    }
    value.set_name(in.name());
    *graph->add_initializer() = value;
  }
  graph->mutable_input()->Swap(&remaining);
  return kept;
}

inline bool uses_f64(const onnx::ModelProto& model) {
  constexpr int kOnnxDouble = onnx::TensorProto::DOUBLE;
  for (const auto& v : model.graph().input()) {
    if (v.type().tensor_type().elem_type() == kOnnxDouble) return true;
  }
  for (const auto& v : model.graph().output()) {
    if (v.type().tensor_type().elem_type() == kOnnxDouble) return true;
  }
  return false;
}

// Empty when `got` matches `want` (ONNX runner tolerances for floats, exact
// otherwise); else what differs.
inline std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return "got " + type_str(got.type()) + ", expected " + type_str(want.type());
  }
  if (!is_float(want.dtype())) {
    std::vector<int64_t> g = got.to_ints(), w = want.to_ints();
    for (size_t i = 0; i < w.size(); ++i) {
      if (g[i] != w[i]) {
        return "element " + std::to_string(i) + ": got " + std::to_string(g[i]) + ", expected " +
               std::to_string(w[i]);
      }
    }
    return "";
  }
  std::vector<double> g = got.to_doubles(), w = want.to_doubles();
  double rtol = rtol_for(want.dtype());
  for (size_t i = 0; i < w.size(); ++i) {
    bool ok = (std::isnan(w[i]) && std::isnan(g[i])) || g[i] == w[i] ||
              std::abs(g[i] - w[i]) <= kAtol + rtol * std::abs(w[i]);
    if (!ok) {
      std::ostringstream os;
      os << "element " << i << ": got " << g[i] << ", expected " << w[i];
      return os.str();
    }
  }
  return "";
}

// What runs an imported case: the reference interpreter, or a runtime
// backend. `f64` is true when the case's inputs or outputs are f64.
using Evaluator = std::function<std::vector<Tensor>(const Graph& g, const std::vector<Tensor>& inputs, bool f64)>;

inline CaseResult run_case_in_process(const fs::path& case_dir, const Evaluator& evaluate_case) {
  onnx::ModelProto model = read_model(case_dir / "model.onnx");
  if (std::string op = unsupported_op(model); !op.empty()) {
    return {Outcome::kSkipped, "op " + op};
  }
  if (std::string why = unsupported_dtype(model); !why.empty()) {
    return {Outcome::kSkipped, why};
  }
  fs::path data_dir = case_dir / "test_data_set_0";
  std::vector<int> kept = bind_constant_operands(model, data_dir);
  // As ONNX Runtime runs them: a few node tests (CastLike's expanded forms)
  // keep an input their function body no longer reads.
  ImportOptions import;
  import.allow_unused_inputs = true;
  Graph g = import_onnx_model(model, import, case_dir.string(), case_dir.filename().string());

  std::vector<Tensor> inputs;
  for (int i : kept) {
    inputs.push_back(read_tensor_file((data_dir / ("input_" + std::to_string(i) + ".pb")).string()));
  }
  std::vector<Tensor> outputs = evaluate_case(g, inputs, uses_f64(model));

  int num_expected = model.graph().output_size();
  if (static_cast<int>(outputs.size()) != num_expected) {
    return {Outcome::kFailed, "got " + std::to_string(outputs.size()) + " outputs, expected " +
                                  std::to_string(num_expected)};
  }
  for (int j = 0; j < num_expected; ++j) {
    Tensor want = read_tensor_file((data_dir / ("output_" + std::to_string(j) + ".pb")).string());
    if (std::string diff = compare(outputs[j], want); !diff.empty()) {
      return {Outcome::kFailed, "output " + std::to_string(j) + ": " + diff};
    }
  }
  return {Outcome::kPassed, ""};
}

// Runs one case in a child process so that a crash or a hang in one kernel is
// reported as that case's failure instead of ending the whole run.
inline CaseResult run_case(const fs::path& case_dir, const Evaluator& evaluate_case) {
  int fds[2];
  if (pipe(fds) != 0) return {Outcome::kFailed, "pipe() failed"};
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return {Outcome::kFailed, "fork() failed"};
  }
  if (pid == 0) {
    close(fds[0]);
    alarm(60);
    CaseResult r;
    try {
      r = run_case_in_process(case_dir, evaluate_case);
    } catch (const std::exception& e) {
      r = {Outcome::kFailed, e.what()};
    }
    std::string msg = std::to_string(static_cast<int>(r.outcome)) + r.message;
    ssize_t ignored = write(fds[1], msg.data(), msg.size());
    (void)ignored;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    return {Outcome::kFailed, std::string("crashed with signal ") + strsignal(WTERMSIG(status))};
  }
  if (msg.empty()) return {Outcome::kFailed, "no result from the child process"};
  CaseResult r;
  r.outcome = static_cast<Outcome>(msg[0] - '0');
  r.message = msg.substr(1);
  std::replace(r.message.begin(), r.message.end(), '\n', ' ');
  return r;
}

// Generates the data if needed into the build folder. Returns the script's
// exit status: 0 ready, 2 onnx missing, 127 python3 missing.
inline int generate_node_tests(const fs::path& out) {
  std::string cmd = "python3 '" + std::string(TESSERA_SOURCE_DIR) +
                    "/tests/data/generate_node_tests.py' -o '" + out.string() + "'";
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs every case with `evaluate_case` and reports through GoogleTest: an
// unlisted failure, a listed case that passes, and a listed case that no
// longer runs each fail the calling test. `label` names the evaluator in the
// summary line.
inline void run_all_cases(const Evaluator& evaluate_case, const std::string& label) {
  fs::path dir = fs::path(TESSERA_BINARY_DIR) / "node_tests";
  int status = generate_node_tests(dir);
  if (status == 2 || status == 127) {
    GTEST_SKIP() << "python3 with the onnx package is needed to generate ONNX's node tests";
  }
  ASSERT_EQ(status, 0) << "tests/data/generate_node_tests.py failed";

  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && fs::exists(entry.path() / "model.onnx")) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_GT(cases.size(), 1000u) << "the node test data in " << dir << " looks incomplete";

  int passed = 0, failed = 0, skipped_ops = 0, skipped_dtypes = 0;
  std::vector<std::string> unexpected_failures, unexpected_passes;
  std::set<std::string> seen;
  const auto& expected = expected_failures();
  for (const fs::path& c : cases) {
    std::string name = c.filename().string();
    CaseResult r = run_case(c, evaluate_case);
    if (r.outcome == Outcome::kSkipped) {
      ++(r.message.rfind("op ", 0) == 0 ? skipped_ops : skipped_dtypes);
      continue;
    }
    seen.insert(name);
    bool listed = expected.count(name) > 0;
    if (r.outcome == Outcome::kPassed) {
      ++passed;
      if (listed) unexpected_passes.push_back(name);
    } else {
      ++failed;
      std::cout << "  FAIL " << name << ": " << r.message
                << (listed ? " [expected: " + expected.at(name) + "]" : std::string()) << "\n";
      if (!listed) unexpected_failures.push_back(name + ": " + r.message);
    }
  }
  // Worded so that CI does not mistake it for the test runner's own summary.
  std::cout << "ONNX node tests (" << label << "): pass " << passed << ", fail " << failed << " (listed: " << expected.size()
            << "), skip " << skipped_ops + skipped_dtypes << " (unsupported ops " << skipped_ops
            << ", unsupported dtypes " << skipped_dtypes << ")\n";

  for (const auto& [name, reason] : expected) {
    EXPECT_TRUE(seen.count(name)) << "expected failure " << name
                                  << " no longer runs (missing or skipped): remove it from the list";
  }
  for (const std::string& f : unexpected_failures) ADD_FAILURE() << "unexpected failure " << f;
  for (const std::string& p : unexpected_passes) {
    ADD_FAILURE() << "expected failure " << p << " now passes: remove it from kExpectedFailures";
  }
}

}  // namespace tessera::node_conformance
