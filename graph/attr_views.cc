// The views' functions, generated from attr_views.def (see attr_views.h).
#include "graph/attr_views.h"

#include "graph/error.h"
#include "graph/graph.h"

namespace tessera {

namespace attr_view_detail {

void check_covers(bool covered, const char* view, OpKind kind) {
  TESSERA_CHECK(covered, view << " does not cover op " << op_name(kind));
}

}  // namespace attr_view_detail

// of(node): checks the kind, then reads through from().
#define TESSERA_ATTR_VIEW(View, ...)                                  \
  View View::of(const Node& node) {                                 \
    attr_view_detail::check_covers(covers(node.kind), #View, node.kind); \
    return from(node.attrs);                                        \
  }                                                                 \
  bool View::covers(OpKind kind) {                                  \
    using enum OpKind;                                              \
    for (OpKind k : {__VA_ARGS__})                                  \
      if (k == kind) return true;                                   \
    return false;                                                   \
  }
#define TESSERA_ATTR_FAMILY(View, ...) TESSERA_ATTR_VIEW(View, __VA_ARGS__)
#define TESSERA_ATTR(name, Type, def)
#define TESSERA_ATTR_END(View)
#include "graph/attr_views.def"
#undef TESSERA_ATTR_VIEW
#undef TESSERA_ATTR_FAMILY
#undef TESSERA_ATTR
#undef TESSERA_ATTR_END

// from(attrs): one read per attribute, the default where it is absent.
#define TESSERA_ATTR_VIEW(View, ...) \
  View View::from(const Attrs& attrs) { \
    View v;
#define TESSERA_ATTR_FAMILY(View, ...) TESSERA_ATTR_VIEW(View, __VA_ARGS__)
#define TESSERA_ATTR(name, Type, def) \
  v.name = attr_view_detail::read<attr_view_detail::Cpp<AttrType::k##Type>::type>(attrs, #name, def);
#define TESSERA_ATTR_END(View) \
  return v;                    \
  }
#include "graph/attr_views.def"
#undef TESSERA_ATTR_VIEW
#undef TESSERA_ATTR_FAMILY
#undef TESSERA_ATTR
#undef TESSERA_ATTR_END

// schema(): the AttrSpecs in the .def's order.
#define TESSERA_ATTR_VIEW(View, ...)                 \
  const std::vector<AttrSpec>& View::schema() {      \
    static const std::vector<AttrSpec> kSchema = {
#define TESSERA_ATTR_FAMILY(View, ...) TESSERA_ATTR_VIEW(View, __VA_ARGS__)
#define TESSERA_ATTR(name, Type, def) \
  AttrSpec{#name, AttrType::k##Type,  \
           attr_view_detail::default_value<attr_view_detail::Cpp<AttrType::k##Type>::type>(def)},
#define TESSERA_ATTR_END(View) \
  };                           \
  return kSchema;              \
  }
#include "graph/attr_views.def"
#undef TESSERA_ATTR_VIEW
#undef TESSERA_ATTR_FAMILY
#undef TESSERA_ATTR
#undef TESSERA_ATTR_END

const std::vector<AttrViewInfo>& attr_views() {
  static const std::vector<AttrViewInfo> kViews = {
#define TESSERA_ATTR_VIEW(View, ...) {#View, false, &View::covers, &View::schema},
#define TESSERA_ATTR_FAMILY(View, ...) {#View, true, &View::covers, &View::schema},
#define TESSERA_ATTR(name, Type, def)
#define TESSERA_ATTR_END(View)
#include "graph/attr_views.def"
#undef TESSERA_ATTR_VIEW
#undef TESSERA_ATTR_FAMILY
#undef TESSERA_ATTR
#undef TESSERA_ATTR_END
  };
  return kViews;
}

}  // namespace tessera
