#include "tests/plan_schema.h"

#include <fstream>
#include <regex>
#include <set>

namespace tessera::testing {

namespace {

using nlohmann::json;

class Validator {
 public:
  explicit Validator(const json& root) : root_(root) {}

  void check(const json& schema, const json& doc, const std::string& path) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) fail(path, "not allowed here");
      return;
    }
    if (!schema.is_object()) return fail(path, "schema error: a schema is an object or a boolean");
    for (const auto& [key, value] : schema.items())
      if (!kKnown.count(key)) fail(path, "schema error: keyword \"" + key + "\" is not one this validator knows");
    if (schema.contains("$ref")) check(resolve(schema["$ref"].get<std::string>()), doc, path);
    if (schema.contains("type") && !type_matches(schema["type"], doc))
      fail(path, "is " + std::string(doc.type_name()) + ", not " + schema["type"].dump());
    if (schema.contains("const") && doc != schema["const"]) fail(path, "must be " + schema["const"].dump());
    if (schema.contains("enum")) {
      bool any = false;
      for (const json& e : schema["enum"]) any = any || e == doc;
      if (!any) fail(path, doc.dump() + " is not one of " + schema["enum"].dump());
    }
    if (schema.contains("minimum") && doc.is_number() && doc.get<double>() < schema["minimum"].get<double>())
      fail(path, doc.dump() + " is below the minimum " + schema["minimum"].dump());
    if (schema.contains("pattern") && doc.is_string() &&
        !std::regex_search(doc.get<std::string>(), std::regex(schema["pattern"].get<std::string>())))
      fail(path, doc.dump() + " does not match " + schema["pattern"].dump());
    if (doc.is_object()) check_object(schema, doc, path);
    if (doc.is_array()) check_array(schema, doc, path);
    if (schema.contains("oneOf")) check_one_of(schema["oneOf"], doc, path);
  }

  std::vector<std::string> errors;

 private:
  inline static const std::set<std::string> kKnown = {
      "$schema", "title", "description", "$defs", "$ref", "type", "properties", "required",
      "additionalProperties", "propertyNames", "minProperties", "items", "minItems", "enum", "const",
      "minimum", "pattern", "oneOf"};

  void fail(const std::string& path, const std::string& what) { errors.push_back((path.empty() ? "/" : path) + ": " + what); }

  const json& resolve(const std::string& ref) {
    const std::string prefix = "#/$defs/";
    if (ref.compare(0, prefix.size(), prefix) != 0 || !root_.contains("$defs") ||
        !root_["$defs"].contains(ref.substr(prefix.size()))) {
      fail("", "schema error: cannot resolve $ref " + ref);
      static const json kAny = json::object();
      return kAny;
    }
    return root_["$defs"][ref.substr(prefix.size())];
  }

  static bool type_is(const std::string& t, const json& doc) {
    if (t == "object") return doc.is_object();
    if (t == "array") return doc.is_array();
    if (t == "string") return doc.is_string();
    if (t == "boolean") return doc.is_boolean();
    if (t == "null") return doc.is_null();
    if (t == "number") return doc.is_number();
    // JSON Schema: a number with a zero fractional part is an integer.
    if (t == "integer")
      return doc.is_number_integer() || (doc.is_number_float() && doc.get<double>() == static_cast<double>(static_cast<int64_t>(doc.get<double>())));
    return false;
  }
  static bool type_matches(const json& type, const json& doc) {
    if (type.is_string()) return type_is(type.get<std::string>(), doc);
    for (const json& t : type)
      if (type_is(t.get<std::string>(), doc)) return true;
    return false;
  }

  void check_object(const json& schema, const json& doc, const std::string& path) {
    if (schema.contains("required"))
      for (const json& r : schema["required"])
        if (!doc.contains(r.get<std::string>())) fail(path, "missing required property \"" + r.get<std::string>() + "\"");
    if (schema.contains("minProperties") && doc.size() < schema["minProperties"].get<size_t>())
      fail(path, "has " + std::to_string(doc.size()) + " properties, fewer than " + schema["minProperties"].dump());
    const json props = schema.value("properties", json::object());
    for (const auto& [key, value] : doc.items()) {
      std::string at = path + "/" + key;
      if (schema.contains("propertyNames")) check(schema["propertyNames"], json(key), at + " (the name)");
      if (props.contains(key))
        check(props[key], value, at);
      else if (schema.contains("additionalProperties"))
        check(schema["additionalProperties"], value, at);
    }
  }

  void check_array(const json& schema, const json& doc, const std::string& path) {
    if (schema.contains("minItems") && doc.size() < schema["minItems"].get<size_t>())
      fail(path, "has " + std::to_string(doc.size()) + " items, fewer than " + schema["minItems"].dump());
    if (schema.contains("items"))
      for (size_t i = 0; i < doc.size(); ++i) check(schema["items"], doc[i], path + "/" + std::to_string(i));
  }

  void check_one_of(const json& options, const json& doc, const std::string& path) {
    int matched = 0;
    std::vector<std::string> why;
    for (size_t i = 0; i < options.size(); ++i) {
      Validator v(root_);
      v.check(options[i], doc, path);
      if (v.errors.empty()) {
        ++matched;
      } else {
        // The first few lines of each option's failure, to say why none matched.
        for (size_t k = 0; k < v.errors.size() && k < 3; ++k) why.push_back("option " + std::to_string(i) + ": " + v.errors[k]);
      }
    }
    if (matched == 1) return;
    if (matched == 0) {
      fail(path, "matches none of the oneOf options");
      for (const std::string& w : why) errors.push_back("  " + w);
    } else {
      fail(path, "matches " + std::to_string(matched) + " oneOf options, not exactly one");
    }
  }

  const json& root_;
};

}  // namespace

std::vector<std::string> schema_errors(const json& schema, const json& doc) {
  Validator v(schema);
  v.check(schema, doc, "");
  return v.errors;
}

const json& plan_schema() {
  static const json schema = [] {
    std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/docs/plan.schema.json");
    return json::parse(in);
  }();
  return schema;
}

std::vector<std::string> plan_schema_errors(const std::filesystem::path& plan_dir) {
  std::ifstream in(plan_dir / "plan.json");
  if (!in) return {"cannot read " + (plan_dir / "plan.json").string()};
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return {"not JSON"};
  return schema_errors(plan_schema(), doc);
}

}  // namespace tessera::testing
