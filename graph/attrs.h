// Node attributes: typed values under names that each op kind declares in its
// schema (see op.h). A node's attributes are validated against that schema when
// it is made, so kernels read them without further checks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "graph/tensor.h"

namespace tessera {

enum class AttrType : uint8_t { kInt, kFloat, kString, kInts, kFloats, kTensor };
const char* attr_type_name(AttrType t);

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>,
                               std::vector<double>, Tensor>;
AttrType attr_type_of(const AttrValue& v);
bool attr_equal(const AttrValue& a, const AttrValue& b);
uint64_t attr_hash(const AttrValue& v);

class Attrs {
 public:
  using Map = std::map<std::string, AttrValue>;

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  void erase(const std::string& name) { values_.erase(name); }

  // Typed getters: the attribute must exist with that type (guaranteed after
  // schema validation for attributes with defaults).
  int64_t i(const std::string& name) const;
  double f(const std::string& name) const;
  const std::string& s(const std::string& name) const;
  const std::vector<int64_t>& ints(const std::string& name) const;
  const std::vector<double>& floats(const std::string& name) const;
  const Tensor& tensor(const std::string& name) const;

  const Map& map() const { return values_; }
  bool operator==(const Attrs& other) const;
  uint64_t hash() const;

 private:
  const AttrValue& get(const std::string& name) const;
  Map values_;
};

}  // namespace tessera
