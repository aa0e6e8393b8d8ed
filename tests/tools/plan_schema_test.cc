// The plan schema (docs/plan.schema.json) and its validator (tests/
// plan_schema.h): plans that `tessera optimize` writes match it, in both
// forms; an edit of a real plan that breaks each keyword the schema uses is
// reported at the place it breaks; the validator refuses keywords it does
// not know.
#include "tests/plan_schema.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTessera = std::string(TESSERA_BINARY_DIR) + "/bin/tessera";
const std::string kExamples = std::string(TESSERA_SOURCE_DIR) + "/examples";
// The tiny transformer split as Megatron does (it is too small for the
// search to split it by itself).
const std::string kMegatron =
    " --shard 'qkv_w_5=[S(1)]' --shard 'fc1_w_131=[S(1)]' --shard 'fc2_w_150=[S(0)]' --shard 'proj_w_101=[S(0)]'";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

class PlanSchemaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("tessera_plan_schema_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::string quiet = " >" + (root_ / "log").string() + " 2>&1";
    ASSERT_EQ(std::system((kTessera + " optimize " + kExamples + "/tiny_cnn.onnx -o " + (root_ / "single").string() +
                           " --budget 10 --device h100" + quiet).c_str()), 0);
    ASSERT_EQ(std::system((kTessera + " optimize " + kExamples + "/tiny_transformer.onnx -o " +
                           (root_ / "mesh").string() + " --mesh tp=2 --device h100" + kMegatron + quiet).c_str()), 0);
    single_ = read_json(root_ / "single" / "plan.json");
    mesh_ = read_json(root_ / "mesh" / "plan.json");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // The errors of `doc`; EXPECTs that one of them names `where` and `what`.
  static void expect_error(const json& doc, const std::string& where, const std::string& what) {
    std::vector<std::string> errors = schema_errors(plan_schema(), doc);
    bool found = false;
    for (const std::string& e : errors) found = found || (e.find(where + ": ") != std::string::npos && e.find(what) != std::string::npos);
    EXPECT_TRUE(found) << "no error at " << where << " saying '" << what << "' in:\n" << joined(errors);
  }

  static fs::path root_;
  static json single_, mesh_;
};
fs::path PlanSchemaTest::root_;
json PlanSchemaTest::single_, PlanSchemaTest::mesh_;

TEST_F(PlanSchemaTest, WrittenPlansMatch) {
  EXPECT_PLAN_MATCHES_SCHEMA(root_ / "single");
  EXPECT_PLAN_MATCHES_SCHEMA(root_ / "mesh");
  EXPECT_TRUE(single_["files"].contains("model.onnx"));
  EXPECT_TRUE(mesh_["files"].contains("rank1.onnx"));
}

// One edit per keyword of the schema, each on a plan that matches.
TEST_F(PlanSchemaTest, EachKeywordIsEnforced) {
  json d;
  d = single_, d["seed"] = "4";
  expect_error(d, "/seed", "is string, not \"integer\"");  // type
  d = single_, d["seed"] = -1;
  expect_error(d, "/seed", "below the minimum");  // minimum
  d = single_, d["format_version"] = 1;
  expect_error(d, "/format_version", "must be 5");  // const
  d = single_, d.erase("device");
  expect_error(d, "/", "missing required property \"device\"");  // required
  d = single_, d["predicted_cost"]["guess_s"] = 1;
  expect_error(d, "/predicted_cost/guess_s", "not allowed here");  // additionalProperties: false
  d = single_, d["files"]["model.onnx"]["sha256"] = "0123";
  expect_error(d, "/files/model.onnx/sha256", "does not match");  // pattern
  d = single_, d["files"]["weights.bin"] = d["files"]["model.onnx"];
  expect_error(d, "/files/weights.bin (the name)", "does not match");  // propertyNames
  d = single_, d["files"] = json::object();
  expect_error(d, "/files", "fewer than 1");  // minProperties
  d = single_, d["mutations"] = json::array({5});
  expect_error(d, "/mutations/0", "matches none of the oneOf options");  // items, oneOf
  d = mesh_, d["ranks"] = json::array();
  expect_error(d, "/ranks", "fewer than 1");  // minItems
  d = mesh_, d["collectives"] = json::array({{{"name", "x"}, {"kind", "Broadcast"}, {"mesh_axis", "tp"},
                                               {"bytes", 4}, {"predicted_s", 0}}});
  expect_error(d, "/collectives/0/kind", "is not one of");  // enum
  d = mesh_, d["ranks"][0]["file"] = "rank00.onnx";
  expect_error(d, "/ranks/0/file", "does not match");  // $ref'd mesh form, pattern
  // Neither form: a single-device plan that names a mesh.
  d = single_, d["mesh"] = "tp=2";
  expect_error(d, "/", "matches none of the oneOf options");
}

TEST(SchemaValidator, OneOfNeedsExactlyOneAndRefsResolve) {
  json schema = {{"oneOf", {{{"type", "integer"}}, {{"type", "number"}}}}};
  EXPECT_EQ(joined(schema_errors(schema, 1.5)), "");
  EXPECT_NE(joined(schema_errors(schema, 2)).find("matches 2 oneOf options"), std::string::npos);
  json refs = {{"$ref", "#/$defs/n"}, {"$defs", {{"n", {{"type", "null"}}}}}};
  EXPECT_TRUE(schema_errors(refs, nullptr).empty());
  EXPECT_FALSE(schema_errors(refs, 0).empty());
  json broken = {{"$ref", "#/$defs/missing"}};
  EXPECT_NE(joined(schema_errors(broken, 0)).find("cannot resolve $ref"), std::string::npos);
}

TEST(SchemaValidator, UnknownKeywordsAreSchemaErrors) {
  json schema = {{"type", "string"}, {"maxLength", 3}};
  EXPECT_NE(joined(schema_errors(schema, "ab")).find("keyword \"maxLength\" is not one this validator knows"),
            std::string::npos);
  // The plan schema uses only known keywords: a valid document gives no
  // schema error (checked on the empty object, which fails only on content).
  for (const std::string& e : schema_errors(plan_schema(), json::object()))
    EXPECT_EQ(e.find("schema error"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera::testing
