// The end-to-end plan check must catch what it is for: a wrong mutation the
// per-mutation checks missed, on inputs drawn as the model reads them.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "verifier/input_ranges.h"
#include "verifier/plan_check.h"
#include "verifier/program.h"

namespace tessera::verifier {
namespace {

constexpr int64_t kTableRows = 50, kTableWidth = 4, kIdCount = 8;

// out = table[ids] * mask: a token embedding scaled by an attention mask,
// as exporters write it (ids reshaped on the way, the mask cast to float).
// `shift_from_row` >= 0 adds 1 to the table's rows from that one on: the
// planted wrong mutation.
Graph embedding(int64_t shift_from_row = -1) {
  Graph g;
  ValueId ids = g.add_input("input_ids", TensorType{DType::kI64, {1, kIdCount}});
  ValueId mask = g.add_input("attention_mask", TensorType{DType::kI64, {1, kIdCount}});
  std::vector<double> rows(static_cast<size_t>(kTableRows * kTableWidth));
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = 0.01 * static_cast<double>(i % 97) - 0.3;
    if (shift_from_row >= 0 && static_cast<int64_t>(i) / kTableWidth >= shift_from_row) rows[i] += 1.0;
  }
  ValueId table = g.add_constant("wte.weight", Tensor::from_doubles(DType::kF32, {kTableRows, kTableWidth}, rows));
  Attrs flat_shape, column_shape;
  flat_shape.set("shape", std::vector<int64_t>{kIdCount});
  column_shape.set("shape", std::vector<int64_t>{kIdCount, 1});
  ValueId flat = g.add(OpKind::kReshape, {ids}, flat_shape);
  Attrs axis;
  axis.set("axis", int64_t{0});
  ValueId looked_up = g.add(OpKind::kGather, {table, flat}, axis, "/wte/Gather");
  Attrs to_float;
  to_float.set("to", std::string(dtype_name(DType::kF32)));
  ValueId m = g.add(OpKind::kCast, {g.add(OpKind::kReshape, {mask}, column_shape)}, to_float);
  g.set_outputs({g.add(OpKind::kMul, {looked_up, m})});
  return g;
}

TEST(InputRanges, TokenIdsCoverTheTableAndMasksAreBoolean) {
  Graph g = embedding();
  std::vector<IntRange> r = integer_input_ranges(g);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].lo, 0);
  EXPECT_EQ(r[0].hi, kTableRows);
  EXPECT_NE(r[0].why.find("/wte/Gather"), std::string::npos) << r[0].why;
  EXPECT_EQ(r[1].hi - r[1].lo, 2);
  EXPECT_EQ(r[1].why, "mask");
  std::string d = describe_ranges(g, r);
  EXPECT_NE(d.find("input_ids over [0, 50)"), std::string::npos) << d;
  EXPECT_NE(d.find("attention_mask over {0, 1}"), std::string::npos) << d;
}

// A static KV cache: cache_position, expanded over the new entry, is the
// index ScatterElements writes along the cache's 64 positions, so the check
// draws it over [0, 64), not as a mask; a scatter without reduction passes
// its data's and updates' values on (a bound further on still holds).
TEST(InputRanges, CachePositionCoversTheCacheAScatterWrites) {
  Graph g;
  ValueId pos = g.add_input("cache_position", TensorType{DType::kI64, {1}});
  ValueId cache = g.add_input("cache", TensorType{DType::kF32, {1, 2, 64, 4}});
  ValueId kv = g.add_input("kv", TensorType{DType::kF32, {1, 2, 1, 4}});
  ValueId ids = g.add_input("ids", TensorType{DType::kI64, {1, 3}});
  ValueId table = g.add_input("table", TensorType{DType::kI64, {1, 3}});
  Attrs shape, expand, axis2, axis1, axis0;
  shape.set("shape", std::vector<int64_t>{1, 1, 1, 1});
  expand.set("shape", std::vector<int64_t>{1, 2, 1, 4});
  axis2.set("axis", int64_t{2});
  axis1.set("axis", int64_t{1});
  axis0.set("axis", int64_t{0});
  ValueId at = g.add(OpKind::kExpand, {g.add(OpKind::kReshape, {pos}, shape)}, expand);
  ValueId present = g.add(OpKind::kScatterElements, {cache, at, kv}, axis2, "write");
  // ids written into `table` at columns 0..2, then looked up in 10 rows.
  ValueId cols = g.add_constant("cols", Tensor::from_ints(DType::kI64, {1, 3}, {0, 1, 2}));
  ValueId merged = g.add(OpKind::kScatterElements, {table, cols, ids}, axis1, "merge");
  ValueId rows = g.add_constant("rows", Tensor::from_doubles(DType::kF32, {10, 2}, std::vector<double>(20, 1.0)));
  ValueId looked_up = g.add(OpKind::kGather, {rows, merged}, axis0, "lookup");
  g.set_outputs({present, looked_up});
  std::vector<IntRange> r = integer_input_ranges(g);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].lo, 0);
  EXPECT_EQ(r[0].hi, 64);
  EXPECT_EQ(r[0].why, "indexes write (64 entries)");
  EXPECT_EQ(r[3].hi, 10) << r[3].why;  // ids: through the scatter's updates
  EXPECT_EQ(r[4].hi, 10) << r[4].why;  // table: through its data
}

TEST(PlanCheck, CatchesAWrongMutationOfEmbeddingRowsFromTwoOn) {
  Graph original = embedding(), wrong = embedding(/*shift_from_row=*/2);
  EndToEndReport r = check_end_to_end(Program(original), Program(wrong));
  EXPECT_FALSE(r.passed) << r.summary();
  EXPECT_GT(r.mismatches, 0);
  EXPECT_GE(r.trials, 3);
  EXPECT_NE(r.summary().find("input_ids over [0, 50)"), std::string::npos) << r.summary();
}

// Three sets at once need three sets' values; under a memory limit that
// holds one set but not three, the check runs them one after another and
// still catches the planted error.
TEST(PlanCheck, SetsThatDoNotFitTogetherRunOneAfterAnother) {
  std::vector<double> w(256 * 256);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.001 * static_cast<double>(i % 13);
  auto product = [&](double planted) {
    Graph g;
    ValueId x = g.add_input("x", TensorType{DType::kF32, {64, 256}});
    Tensor wt = Tensor::from_doubles(DType::kF32, {256, 256}, w);
    wt.set_double(5, wt.get_double(5) + planted);
    g.set_outputs({g.add(OpKind::kMatMul, {x, g.add_constant("w", wt)}, {}, "mm")});
    return g;
  };
  Graph g = product(0), wrong = product(1);
  int64_t before = memory_limit();
  // One set: x and y (64 KiB each) and w (256 KiB); three sets need 3x.
  set_memory_limit(600 << 10);
  EndToEndReport same, caught;
  try {
    same = check_end_to_end(Program(g), Program(g));
    caught = check_end_to_end(Program(g), Program(wrong));
  } catch (...) {
    set_memory_limit(before);
    throw;
  }
  set_memory_limit(before);
  EXPECT_TRUE(same.passed) << same.summary();
  EXPECT_EQ(same.trials, 3);
  EXPECT_FALSE(caught.passed) << caught.summary();
}

TEST(PlanCheck, PassesTheSameProgram) {
  EndToEndReport r = check_end_to_end(Program(embedding()), Program(embedding()));
  EXPECT_TRUE(r.passed) << r.summary();
  EXPECT_EQ(r.max_abs_error, 0.0);
}

TEST(PlanCheck, RunsTheGivenInputSetsAndRefusesOnesOfAnotherType) {
  Graph original = embedding(), wrong = embedding(/*shift_from_row=*/2);
  EndToEndOptions o;
  o.trials = 0;  // only the given set: row 3 looked up, unmasked
  std::vector<int64_t> ids(kIdCount, 3), ones(kIdCount, 1);
  o.given_inputs.push_back({Tensor::from_ints(DType::kI64, {1, kIdCount}, ids),
                            Tensor::from_ints(DType::kI64, {1, kIdCount}, ones)});
  EndToEndReport r = check_end_to_end(Program(original), Program(wrong), o);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.given, 1);
  std::vector<int64_t> zeros(kIdCount, 0);  // rows 0 only: the wrong rows are not read
  o.given_inputs[0][0] = Tensor::from_ints(DType::kI64, {1, kIdCount}, zeros);
  EXPECT_TRUE(check_end_to_end(Program(original), Program(wrong), o).passed);
  o.given_inputs[0][0] = Tensor::from_ints(DType::kI32, {1, kIdCount}, zeros);
  EXPECT_THROW(check_end_to_end(Program(original), Program(wrong), o), Error);
}

// y = x . W + b over K = 64 in a 16-bit type; with `split`, the product is
// two half-K products (each rounded to the type) added: the same value,
// rounded at other points, as a correct plan that splits K computes it.
// `column_scale` != 1 multiplies W's first column: a planted error.
Graph low_precision_product(DType dt, bool split, double column_scale = 1.0) {
  constexpr int64_t kM = 8, kK = 64, kN = 32;
  Graph g;
  ValueId x = g.add_input("x", TensorType{dt, {kM, kK}});
  std::vector<double> w(static_cast<size_t>(kK * kN)), b(static_cast<size_t>(kN));
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = 0.37 * std::sin(static_cast<double>(i) * 1.7);
    if (i % kN == 0) w[i] *= column_scale;
  }
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1 * std::cos(static_cast<double>(i));
  ValueId bias = g.add_constant("b", Tensor::from_doubles(dt, {kN}, b));
  ValueId y;
  if (!split) {
    y = g.add(OpKind::kMatMul, {x, g.add_constant("w", Tensor::from_doubles(dt, {kK, kN}, w))});
  } else {
    auto half = [&](int64_t lo) {
      Attrs a;
      a.set("starts", std::vector<int64_t>{lo});
      a.set("ends", std::vector<int64_t>{lo + kK / 2});
      a.set("axes", std::vector<int64_t>{1});
      a.set("steps", std::vector<int64_t>{1});
      std::vector<double> rows(w.begin() + lo * kN, w.begin() + (lo + kK / 2) * kN);
      ValueId wh = g.add_constant("w" + std::to_string(lo), Tensor::from_doubles(dt, {kK / 2, kN}, rows));
      return g.add(OpKind::kMatMul, {g.add(OpKind::kSlice, {x}, a), wh});
    };
    y = g.add(OpKind::kAdd, {half(0), half(kK / 2)});
  }
  g.set_outputs({g.add(OpKind::kAdd, {y, bias})});
  return g;
}

// The tolerance knows the precision: a correct 16-bit plan that rounds at
// other points passes (and the bf16 one fails the f32 tolerance, as fp16
// ResNet-50 did before), and the summary states the rule.
TEST(PlanCheck, SixteenBitToleranceComesFromTheTypeAndReductionLength) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Graph original = low_precision_product(dt, false), reordered = low_precision_product(dt, true);
    EndToEndReport r = check_end_to_end(Program(original), Program(reordered));
    EXPECT_TRUE(r.passed) << r.summary();
    EXPECT_GT(r.max_abs_error, 0.0) << "the two programs should round differently";
    EXPECT_NE(r.summary().find("K = 64"), std::string::npos) << r.summary();
    EXPECT_NE(r.summary().find("eps = u sqrt(K) / 2"), std::string::npos) << r.summary();
    // eps = u sqrt(64) / 2 = 4 u (f16's 0.00195 is above the f32 floor too).
    double u = dt == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    EXPECT_DOUBLE_EQ(r.rtol, 4 * u);
    EXPECT_DOUBLE_EQ(r.atol, 4 * u);
  }
  EndToEndOptions f32_floor;
  f32_floor.from_precision = false;
  EndToEndReport strict = check_end_to_end(Program(low_precision_product(DType::kBF16, false)),
                                           Program(low_precision_product(DType::kBF16, true)), f32_floor);
  EXPECT_FALSE(strict.passed) << strict.summary();
}

TEST(PlanCheck, SixteenBitToleranceStillCatchesAPlantedError) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Graph original = low_precision_product(dt, false), wrong = low_precision_product(dt, true, 1.25);
    EndToEndReport r = check_end_to_end(Program(original), Program(wrong));
    EXPECT_FALSE(r.passed) << dtype_name(dt) << ": " << r.summary();
    EXPECT_GT(r.mismatches, 0);
  }
}

// An f32 graph keeps the f32 tolerance (the floor), and says nothing more.
TEST(PlanCheck, F32ToleranceIsUnchanged) {
  EndToEndReport r = check_end_to_end(Program(embedding()), Program(embedding()));
  EXPECT_EQ(r.rtol, 1e-3);
  EXPECT_EQ(r.atol, 1e-4);
  EXPECT_EQ(r.scale_rtol, 1e-5);
  EXPECT_TRUE(r.tolerance_rule.empty()) << r.tolerance_rule;
}

}  // namespace
}  // namespace tessera::verifier
