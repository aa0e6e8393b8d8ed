// Typed views of node attributes, generated from attr_views.def, the one list
// of every op's attribute schema. A view is a plain struct with one field per
// attribute (GeluAttrs{approximate}, ConvAttrs{kernel_shape, ..., group}):
//
//   ConvAttrs a = ConvAttrs::of(node);   // reads each attribute once, applies
//                                        // the schema's defaults; a wrong type,
//                                        // a missing required attribute or a
//                                        // node of a kind the view does not
//                                        // cover fails a check
//   ConvAttrs::covers(OpKind::kConv);    // the kinds the view reads
//   ConvAttrs::schema();                 // the AttrSpecs the op table installs
//
// Code outside graph/ reads attributes through these views, never by string
// name, so an attribute's name, type and default are written once.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/op.h"
#include "graph/tensor.h"

namespace tessera {

struct Node;

// The default column's marker for an attribute without a default.
struct RequiredAttr {};
inline constexpr RequiredAttr kRequired{};

namespace attr_view_detail {

template <AttrType T>
struct Cpp;
template <>
struct Cpp<AttrType::kInt> { using type = int64_t; };
template <>
struct Cpp<AttrType::kFloat> { using type = double; };
template <>
struct Cpp<AttrType::kString> { using type = std::string; };
template <>
struct Cpp<AttrType::kInts> { using type = std::vector<int64_t>; };
template <>
struct Cpp<AttrType::kFloats> { using type = std::vector<double>; };
template <>
struct Cpp<AttrType::kTensor> { using type = Tensor; };

template <class C>
std::optional<AttrValue> default_value(RequiredAttr) { return std::nullopt; }
template <class C, class V>
std::optional<AttrValue> default_value(const V& v) { return AttrValue{C(v)}; }

// The attribute's value, checked to have type C (Attrs' typed getters).
template <class C>
C get(const Attrs& a, const std::string& name) {
  if constexpr (std::is_same_v<C, int64_t>) return a.i(name);
  else if constexpr (std::is_same_v<C, double>) return a.f(name);
  else if constexpr (std::is_same_v<C, std::string>) return a.s(name);
  else if constexpr (std::is_same_v<C, std::vector<int64_t>>) return a.ints(name);
  else if constexpr (std::is_same_v<C, std::vector<double>>) return a.floats(name);
  else return a.tensor(name);
}
template <class C>
C read(const Attrs& a, const std::string& name, RequiredAttr) { return get<C>(a, name); }
template <class C, class V>
C read(const Attrs& a, const std::string& name, const V& def) { return a.has(name) ? get<C>(a, name) : C(def); }

// Fails a check naming the view when `kind` is not one it covers.
void check_covers(bool covered, const char* view, OpKind kind);

}  // namespace attr_view_detail

#define TESSERA_ATTR_VIEW(View, ...) struct View {
#define TESSERA_ATTR_FAMILY(View, ...) struct View {
#define TESSERA_ATTR(name, Type, def) attr_view_detail::Cpp<AttrType::k##Type>::type name{};
#define TESSERA_ATTR_END(View)                           \
  static View of(const Node& node);                      \
  /* For attributes not yet on a node (import, rules). */ \
  static View from(const Attrs& attrs);                  \
  static bool covers(OpKind kind);                       \
  static const std::vector<AttrSpec>& schema();          \
  }                                                      \
  ;
#include "graph/attr_views.def"
#undef TESSERA_ATTR_VIEW
#undef TESSERA_ATTR_FAMILY
#undef TESSERA_ATTR
#undef TESSERA_ATTR_END

// One row per view, for tests and tools that walk them all.
struct AttrViewInfo {
  const char* name;
  bool family;  // a shared part (WindowAttrs), not a kind's whole schema
  bool (*covers)(OpKind);
  const std::vector<AttrSpec>& (*schema)();
};
const std::vector<AttrViewInfo>& attr_views();

// Gelu's tanh approximation (approximate="tanh") or the exact erf form: the
// one place the attribute's spelling is interpreted, for the reference, both
// runtimes and export.
inline bool gelu_tanh_form(const GeluAttrs& a) { return a.approximate == "tanh"; }

}  // namespace tessera
