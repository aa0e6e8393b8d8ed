#include "graph/attrs.h"

#include <cstring>

#include "graph/error.h"

namespace tessera {

const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::kInt: return "int";
    case AttrType::kFloat: return "float";
    case AttrType::kString: return "string";
    case AttrType::kInts: return "ints";
    case AttrType::kFloats: return "floats";
    case AttrType::kTensor: return "tensor";
  }
  return "?";
}

AttrType attr_type_of(const AttrValue& v) { return static_cast<AttrType>(v.index()); }

bool attr_equal(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (auto* t = std::get_if<Tensor>(&a)) return t->identical(std::get<Tensor>(b));
  if (auto* d = std::get_if<double>(&a)) {  // bitwise, so NaN attributes compare equal
    double e = std::get<double>(b);
    return std::memcmp(d, &e, sizeof(double)) == 0;
  }
  if (auto* ds = std::get_if<std::vector<double>>(&a)) {
    const auto& es = std::get<std::vector<double>>(b);
    return ds->size() == es.size() &&
           (ds->empty() || std::memcmp(ds->data(), es.data(), ds->size() * sizeof(double)) == 0);
  }
  return std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, Tensor>) return false;  // handled above
        else return x == std::get<X>(b);
      },
      a);
}

uint64_t attr_hash(const AttrValue& v) {
  uint64_t h = 1469598103934665603ull ^ v.index();
  auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  auto bits = [](double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; };
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, int64_t>) mix(static_cast<uint64_t>(x));
        else if constexpr (std::is_same_v<X, double>) mix(bits(x));
        else if constexpr (std::is_same_v<X, std::string>) for (char c : x) mix(static_cast<uint8_t>(c));
        else if constexpr (std::is_same_v<X, std::vector<int64_t>>) for (int64_t e : x) mix(static_cast<uint64_t>(e));
        else if constexpr (std::is_same_v<X, std::vector<double>>) for (double e : x) mix(bits(e));
        else mix(x.hash());
      },
      v);
  return h;
}

const AttrValue& Attrs::get(const std::string& name) const {
  auto it = values_.find(name);
  TESSERA_CHECK(it != values_.end(), "missing attribute '" << name << "'");
  return it->second;
}

template <class T>
static const T& typed(const AttrValue& v, const std::string& name) {
  const T* p = std::get_if<T>(&v);
  TESSERA_CHECK(p != nullptr, "attribute '" << name << "' has type " << attr_type_name(attr_type_of(v)));
  return *p;
}

int64_t Attrs::i(const std::string& name) const { return typed<int64_t>(get(name), name); }
double Attrs::f(const std::string& name) const { return typed<double>(get(name), name); }
const std::string& Attrs::s(const std::string& name) const { return typed<std::string>(get(name), name); }
const std::vector<int64_t>& Attrs::ints(const std::string& name) const {
  return typed<std::vector<int64_t>>(get(name), name);
}
const std::vector<double>& Attrs::floats(const std::string& name) const {
  return typed<std::vector<double>>(get(name), name);
}
const Tensor& Attrs::tensor(const std::string& name) const { return typed<Tensor>(get(name), name); }

bool Attrs::operator==(const Attrs& other) const {
  if (values_.size() != other.values_.size()) return false;
  for (auto a = values_.begin(), b = other.values_.begin(); a != values_.end(); ++a, ++b)
    if (a->first != b->first || !attr_equal(a->second, b->second)) return false;
  return true;
}

uint64_t Attrs::hash() const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const auto& [k, v] : values_) {
    for (char c : k) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    h = (h ^ attr_hash(v)) * 1099511628211ull;
  }
  return h;
}

}  // namespace tessera
