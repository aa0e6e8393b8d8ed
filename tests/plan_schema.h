// The plan.json schema (docs/plan.schema.json) and a validator for exactly
// the JSON Schema keywords it uses: type, properties, required,
// additionalProperties, propertyNames, minProperties, items, minItems,
// enum, const, minimum, pattern, oneOf and local $ref into $defs
// ($schema, title and description are annotations). A schema with any other
// keyword is an error, so the schema cannot come to rely on a keyword this
// validator would silently ignore. No JSON Schema library is among the
// project's dependencies; tests/tools/plan_schema_test.cc gives the
// validator a document that breaks each keyword.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::testing {

// Where `doc` breaks `schema`: one line per violation, "PATH: what"
// (PATH a JSON pointer into doc). Empty when doc is valid.
std::vector<std::string> schema_errors(const nlohmann::json& schema, const nlohmann::json& doc);

const nlohmann::json& plan_schema();

// Violations of plan_dir/plan.json against the plan schema, plus a line if
// it cannot be read or parsed.
std::vector<std::string> plan_schema_errors(const std::filesystem::path& plan_dir);

}  // namespace tessera::testing

// Every test that writes a plan folder checks it with this.
#define EXPECT_PLAN_MATCHES_SCHEMA(dir)                                                            \
  do {                                                                                             \
    auto tessera_schema_errors_ = ::tessera::testing::plan_schema_errors(dir);                     \
    std::string tessera_schema_text_;                                                              \
    for (const std::string& e : tessera_schema_errors_) tessera_schema_text_ += "\n  " + e;        \
    EXPECT_TRUE(tessera_schema_errors_.empty()) << (dir) << "/plan.json:" << tessera_schema_text_; \
  } while (0)
