#include "report/plan_picture.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/tensor.h"
#include "mutator/mutation.h"
#include "report/report_svg.h"
#include "mutator/sharding/structure.h"

namespace tessera::report {

using mutator::role_labels;
using mutator::spliced_subprogram;

std::vector<PictureBlock> collapse_repeats(const std::vector<uint64_t>& labels, size_t min_saved,
                                           const std::vector<bool>& cut) {
  TESSERA_CHECK(cut.empty() || cut.size() == labels.size() + 1, "collapse_repeats: cut needs one flag per boundary");
  // The most copies from `first` whose every boundary may be cut.
  auto cuttable = [&](size_t first, size_t length, size_t times) {
    if (cut.empty()) return times;
    size_t ok = 0;
    while (ok <= times && cut[first + ok * length]) ++ok;
    return ok == 0 ? 0 : ok - 1;
  };
  std::vector<PictureBlock> out;
  // Greedy: the repeat covering most entries in [lo, hi), then the same on
  // both sides. run[i]: how many entries from i on equal the entry p later.
  std::function<void(size_t, size_t)> go = [&](size_t lo, size_t hi) {
    size_t best_cover = 0, best_first = 0, best_length = 0;
    std::vector<size_t> run(hi - lo + 1, 0);
    for (size_t p = 1; 2 * p <= hi - lo; ++p) {
      run[hi - lo - p] = 0;
      for (size_t i = hi - p; i-- > lo;) run[i - lo] = labels[i] == labels[i + p] ? run[i - lo + 1] + 1 : 0;
      for (size_t s = lo; s + 2 * p <= hi; ++s) {
        // Fewer copies where the last one would end inside a subprogram.
        size_t times = cuttable(s, p, 1 + run[s - lo] / p);
        size_t cover = times * p;
        if (times >= 2 && (times - 1) * p >= min_saved && cover > best_cover) {
          best_cover = cover;
          best_first = s;
          best_length = p;
        }
      }
    }
    if (best_cover == 0) {
      for (size_t i = lo; i < hi; ++i) out.push_back({i, 1, 1});
      return;
    }
    go(lo, best_first);
    out.push_back({best_first, best_length, static_cast<int>(best_cover / best_length)});
    go(best_first + best_cover, hi);
  };
  if (!labels.empty()) go(0, labels.size());
  return out;
}

namespace {

constexpr double kRowH = 20, kBoxH = 16, kEdgeMargin = 22, kLaneGap = 26, kMaxWidth = 1360;
// Rows per column: at least kRowsPerColumn, more (up to kMaxRowsPerColumn)
// so that the longest repeated block fits in one column.
constexpr size_t kRowsPerColumn = 46, kMaxRowsPerColumn = 90;

// One row of the picture.
struct Row {
  enum class Kind { kNode, kLabel, kBlockStart, kBlockEnd } kind = Kind::kNode;
  size_t entry = 0;                // kNode: position in lane 0's topological order
  std::vector<size_t> copies;      // kNode: the same op in the repeats (entries), drawn once
  int subprogram = -1;             // kNode, kLabel
  std::vector<int> subprograms;    // kLabel: the subprogram and its copies'
  int times = 1;                   // kBlockStart
  size_t block_rows = 0;           // kBlockStart: rows up to its kBlockEnd
};

std::string short_shape(const Shape& s) {
  if (s.empty()) return "scalar";
  std::ostringstream os;
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "x" : "") << s[i];
  return os.str();
}

std::string mb(int64_t bytes) {
  char buf[32];
  if (bytes >= 1000000)
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(bytes) / 1e3);
  return buf;
}

// What the box says: the op and its first output's shape (local shapes on a
// rank); a collective also its axis and bytes.
std::string box_text(const Graph& g, const Node& n) {
  std::ostringstream t;
  t << op_name(n.kind);
  if (op_def(n.kind).is_collective() && !n.inputs.empty()) {
    t << " " << CollectiveAttrs::of(n).mesh_axis;
    t << " " << mb(g.type(n.inputs[0]).nbytes());
  } else if (!n.outputs.empty()) {
    t << " " << short_shape(g.type(n.outputs[0]).shape);
  }
  return t.str();
}

std::string tooltip(const Graph& g, const Node& n, const std::vector<std::string>& copies) {
  std::ostringstream os;
  os << n.name << ": " << op_name(n.kind);
  for (ValueId v : n.inputs)
    if (v != kNoValue) os << "\nin  " << g.value(v).name << " " << type_str(g.type(v));
  for (ValueId v : n.outputs) os << "\nout " << g.value(v).name << " " << type_str(g.type(v));
  if (!copies.empty()) {
    os << "\nthe same op in the " << copies.size() << " repeat" << (copies.size() == 1 ? "" : "s") << ":";
    for (const std::string& c : copies) os << " " << c;
  }
  return os.str();
}

class Layout {
 public:
  explicit Layout(const PictureInput& in) : in_(in), g0_(*in.lanes[0]) {
    order_ = g0_.topo_order();
    entry_of_.assign(static_cast<size_t>(g0_.num_nodes()), -1);
    for (size_t k = 0; k < order_.size(); ++k) entry_of_[static_cast<size_t>(order_[k])] = static_cast<int64_t>(k);
    for (const Graph* g : in.lanes) {
      std::unordered_map<std::string, NodeId> byname;
      for (NodeId n = 0; n < g->num_nodes(); ++n) byname[g->node(n).name] = n;
      by_name_.push_back(std::move(byname));
    }
    build_rows();
  }

  std::string svg();

 private:
  int subprogram_of(size_t entry) const {
    int s = spliced_subprogram(g0_.node(order_[entry]).name);
    return in_.subprograms.count(s) ? s : -1;
  }
  std::vector<uint64_t> labels() const;
  void build_rows();
  void add_nodes(size_t first, size_t length, int times);
  void place();
  void draw_band_headers(std::ostringstream& os) const;
  void draw_row(std::ostringstream& os, size_t r) const;
  void draw_edges(std::ostringstream& os) const;
  double lane_x(size_t column, size_t lane) const {
    return column_x_[column] + kEdgeMargin + static_cast<double>(lane) * (lane_w_ + kLaneGap);
  }

  const PictureInput& in_;
  const Graph& g0_;
  std::vector<NodeId> order_;
  std::vector<int64_t> entry_of_;  // by NodeId of lane 0
  std::vector<std::unordered_map<std::string, NodeId>> by_name_;
  std::vector<Row> rows_;
  // Placement.
  std::vector<size_t> row_column_, row_slot_;
  std::vector<double> column_x_, column_y_;
  std::vector<int64_t> drawn_row_of_entry_;  // -1 when not drawn
  double lane_w_ = 190, header_h_ = 0, width_ = 0, height_ = 0;
  int open_subprogram_ = -2;  // the subprogram of the last node row added (-2: none yet, or a frame since)
};

std::vector<uint64_t> Layout::labels() const {
  std::vector<uint64_t> role = role_labels(g0_, 1);
  std::vector<uint64_t> out;
  std::hash<std::string> h;
  for (size_t k = 0; k < order_.size(); ++k) {
    uint64_t l = role[static_cast<size_t>(order_[k])];
    int s = subprogram_of(k);
    if (s >= 0) l = l * 1000003u ^ h(in_.subprograms.at(s).rules);
    out.push_back(l);
  }
  return out;
}

void Layout::add_nodes(size_t first, size_t length, int times) {
  int& open = open_subprogram_;
  for (size_t j = 0; j < length; ++j) {
    size_t e = first + j;
    int s = subprogram_of(e);
    if (s >= 0 && s != open) {
      Row label;
      label.kind = Row::Kind::kLabel;
      label.subprogram = s;
      for (int c = 0; c < times; ++c) {
        int cs = subprogram_of(e + static_cast<size_t>(c) * length);
        if (cs >= 0 && std::find(label.subprograms.begin(), label.subprograms.end(), cs) == label.subprograms.end())
          label.subprograms.push_back(cs);
      }
      rows_.push_back(label);
    }
    open = s;
    Row row;
    row.entry = e;
    row.subprogram = s;
    for (int c = 1; c < times; ++c) row.copies.push_back(e + static_cast<size_t>(c) * length);
    rows_.push_back(row);
  }
}

void Layout::build_rows() {
  // A copy of a repeated block may begin anywhere but inside the ops of one
  // rewritten subprogram.
  std::vector<bool> cut(order_.size() + 1, true);
  for (size_t i = 1; i < order_.size(); ++i) cut[i] = subprogram_of(i) < 0 || subprogram_of(i) != subprogram_of(i - 1);
  for (const PictureBlock& b : collapse_repeats(labels(), 6, cut)) {
    if (b.times == 1) {
      add_nodes(b.first, b.length, 1);
      continue;
    }
    size_t start = rows_.size();
    open_subprogram_ = -2;
    Row open;
    open.kind = Row::Kind::kBlockStart;
    open.times = b.times;
    rows_.push_back(open);
    add_nodes(b.first, b.length, b.times);
    open_subprogram_ = -2;
    Row close;
    close.kind = Row::Kind::kBlockEnd;
    rows_.push_back(close);
    rows_[start].block_rows = rows_.size() - start;
  }
}

void Layout::place() {
  const size_t lanes = in_.lanes.size();
  if (lanes > 1) lane_w_ = std::clamp((kMaxWidth - kEdgeMargin) / static_cast<double>(lanes) - kLaneGap, 110.0, 170.0);
  header_h_ = lanes > 1 ? 22 : 4;
  const double band_w = kEdgeMargin + static_cast<double>(lanes) * lane_w_ + static_cast<double>(lanes - 1) * kLaneGap + 18;
  // Columns of at most per_column rows; a repeated block, or a rewritten
  // subprogram's label and ops, that fits in a column is not split between
  // two.
  size_t per_column = kRowsPerColumn;
  for (const Row& row : rows_)
    if (row.kind == Row::Kind::kBlockStart) per_column = std::max(per_column, std::min(row.block_rows, kMaxRowsPerColumn));
  size_t column = 0, slot = 0;
  for (size_t r = 0; r < rows_.size(); ++r) {
    const Row& row = rows_[r];
    size_t need = row.kind == Row::Kind::kBlockStart ? row.block_rows : 1;
    if (row.kind == Row::Kind::kLabel)
      for (size_t k = r + 1; k < rows_.size() && rows_[k].kind == Row::Kind::kNode && rows_[k].subprogram == row.subprogram; ++k)
        ++need;
    bool fits = need > per_column || slot + need <= per_column;
    if (slot > 0 && (slot >= per_column || !fits)) ++column, slot = 0;
    row_column_.push_back(column);
    row_slot_.push_back(slot++);
  }
  const size_t columns = column + 1;
  const size_t per_band_row = std::max<size_t>(1, static_cast<size_t>(kMaxWidth / band_w));
  // Each row of bands is as tall as its longest column.
  const size_t band_rows = (columns + per_band_row - 1) / per_band_row;
  std::vector<size_t> rows_in_band_row(band_rows, 0);
  for (size_t r = 0; r < rows_.size(); ++r) {
    size_t& n = rows_in_band_row[row_column_[r] / per_band_row];
    n = std::max(n, row_slot_[r] + 1);
  }
  std::vector<double> band_row_y(band_rows + 1, 8);
  for (size_t k = 0; k < band_rows; ++k)
    band_row_y[k + 1] = band_row_y[k] + header_h_ + static_cast<double>(rows_in_band_row[k]) * kRowH + 16;
  for (size_t c = 0; c < columns; ++c) {
    column_x_.push_back(8 + static_cast<double>(c % per_band_row) * band_w);
    column_y_.push_back(band_row_y[c / per_band_row]);
  }
  width_ = 16 + static_cast<double>(std::min(columns, per_band_row)) * band_w;
  height_ = 8 + band_row_y[band_rows];
  drawn_row_of_entry_.assign(order_.size(), -1);
  for (size_t r = 0; r < rows_.size(); ++r)
    if (rows_[r].kind == Row::Kind::kNode) drawn_row_of_entry_[rows_[r].entry] = static_cast<int64_t>(r);
}

void Layout::draw_band_headers(std::ostringstream& os) const {
  if (in_.lanes.size() < 2) return;
  for (size_t c = 0; c < column_x_.size(); ++c)
    for (size_t l = 0; l < in_.lanes.size(); ++l)
      os << svg_text(lane_x(c, l) + lane_w_ / 2, column_y_[c] + 14, in_.lane_titles[l], "lane-title", "middle");
}

void Layout::draw_row(std::ostringstream& os, size_t r) const {
  const Row& row = rows_[r];
  const size_t c = row_column_[r];
  const double y = column_y_[c] + header_h_ + static_cast<double>(row_slot_[r]) * kRowH;
  const size_t lanes = in_.lanes.size();
  const double x0 = lane_x(c, 0), x1 = lane_x(c, lanes - 1) + lane_w_;
  if (row.kind == Row::Kind::kBlockStart || row.kind == Row::Kind::kBlockEnd) {
    // The frame, from the start row to the end row: one piece per column
    // when the block is longer than a column.
    if (row.kind == Row::Kind::kBlockEnd) return;
    const size_t last = r + row.block_rows - 1;
    for (size_t from = r; from <= last;) {
      size_t to = from;
      while (to < last && row_column_[to + 1] == row_column_[from]) ++to;
      const size_t col = row_column_[from];
      const double top = column_y_[col] + header_h_ + static_cast<double>(row_slot_[from]) * kRowH;
      // The end row only closes the frame: half a row of it is enough.
      const double h = static_cast<double>(row_slot_[to] - row_slot_[from] + 1) * kRowH - (to == last ? kRowH / 2 : 4);
      const double left = lane_x(col, 0) - 6;
      os << "<rect class=\"repeat\" x=\"" << num(left) << "\" y=\"" << num(top + 2) << "\" width=\""
         << num(x1 - x0 + 12) << "\" height=\"" << num(h) << "\" rx=\"6\"/>\n";
      std::string title = from == r ? "repeated " + std::to_string(row.times) + " times (drawn once)"
                                    : "(the repeated block, continued)";
      os << svg_text(left + 6, top + 14, title, "repeat-title") << "\n";
      from = to + 1;
    }
    return;
  }
  if (row.kind == Row::Kind::kLabel) {
    const PictureInput::Mark& m = in_.subprograms.at(row.subprogram);
    // The table rows of the subprogram and of its copies in the repeats.
    std::string ids;
    int lo = m.number, hi = m.number;
    for (int s : row.subprograms) {
      if (!ids.empty()) ids += ' ';
      ids += std::to_string(s);
      lo = std::min(lo, in_.subprograms.at(s).number);
      hi = std::max(hi, in_.subprograms.at(s).number);
    }
    std::ostringstream text;
    text << "#" << lo;
    if (row.subprograms.size() > 1) {
      if (hi - lo + 1 == static_cast<int>(row.subprograms.size()))
        text << "-#" << hi;
      else
        text << " and " << row.subprograms.size() - 1 << " more";
    }
    text << " " << m.rules;
    os << "<g class=\"mutation\" data-subprograms=\"" << ids << "\"><title>subprogram" << (row.subprograms.size() > 1 ? "s " : " ")
       << ids << ": " << xml_escape(m.rules) << "</title>"
       << svg_text(x0 + 2, y + 14, fit_text(text.str(), x1 - x0 - 4), "mutation-label") << "</g>\n";
    return;
  }
  const Node& n0 = g0_.node(order_[row.entry]);
  const bool collective = op_def(n0.kind).is_collective();
  if (collective && lanes > 1)  // the bar across the lanes, under their boxes
    os << "<rect class=\"collective-bar\" x=\"" << num(x0 - 4) << "\" y=\"" << num(y + kBoxH / 2 - 3)
       << "\" width=\"" << num(x1 - x0 + 8) << "\" height=\"6\"/>\n";
  for (size_t l = 0; l < lanes; ++l) {
    auto it = by_name_[l].find(n0.name);
    if (it == by_name_[l].end()) continue;
    const Graph& g = *in_.lanes[l];
    const Node& n = g.node(it->second);
    std::vector<std::string> copies;
    for (size_t e : row.copies) copies.push_back(g0_.node(order_[e]).name);
    const char* cls = collective ? "op collective" : row.subprogram >= 0 ? "op changed" : "op";
    double x = lane_x(c, l);
    os << "<g class=\"" << cls << "\"><title>" << xml_escape(tooltip(g, n, copies)) << "</title><rect x=\"" << num(x)
       << "\" y=\"" << num(y) << "\" width=\"" << num(lane_w_) << "\" height=\"" << num(kBoxH) << "\" rx=\"3\"/>"
       << svg_text(x + 4, y + 11.5, fit_text(box_text(g, n), lane_w_ - 8), "op-text") << "</g>\n";
    if (collective && l + 1 < lanes)
      os << "<path class=\"collective-arrow\" d=\"M" << num(x + lane_w_ + 3) << " " << num(y + kBoxH / 2) << " H"
         << num(x + lane_w_ + kLaneGap - 3) << "\"/>\n";
  }
}

void Layout::draw_edges(std::ostringstream& os) const {
  // Per lane 0's rows: an edge whose producer is the previous op row is a
  // short link; others curve along the lane's left edge. Edges between
  // columns are left out (the order, column by column, carries them).
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (rows_[r].kind != Row::Kind::kNode) continue;
    const Node& n = g0_.node(order_[rows_[r].entry]);
    std::set<int64_t> from;
    for (ValueId v : n.inputs)
      if (v != kNoValue && g0_.value(v).producer >= 0) {
        int64_t e = entry_of_[static_cast<size_t>(g0_.value(v).producer)];
        if (e >= 0 && drawn_row_of_entry_[static_cast<size_t>(e)] >= 0) from.insert(drawn_row_of_entry_[static_cast<size_t>(e)]);
      }
    for (int64_t pr : from) {
      size_t p = static_cast<size_t>(pr);
      if (p >= r || row_column_[p] != row_column_[r]) continue;
      size_t c = row_column_[r];
      double yp = column_y_[c] + header_h_ + static_cast<double>(row_slot_[p]) * kRowH;
      double yc = column_y_[c] + header_h_ + static_cast<double>(row_slot_[r]) * kRowH;
      bool adjacent = true;
      for (size_t k = p + 1; k < r; ++k) adjacent = adjacent && rows_[k].kind != Row::Kind::kNode;
      for (size_t l = 0; l < in_.lanes.size(); ++l) {
        double x = lane_x(c, l);
        if (adjacent) {
          os << "<path class=\"edge\" d=\"M" << num(x + lane_w_ / 2) << " " << num(yp + kBoxH) << " V" << num(yc)
             << "\"/>\n";
        } else {
          double bend = std::min(kEdgeMargin - 4, 5 + 0.6 * static_cast<double>(row_slot_[r] - row_slot_[p]));
          os << "<path class=\"edge skip\" d=\"M" << num(x) << " " << num(yp + kBoxH / 2) << " C" << num(x - bend)
             << " " << num(yp + kBoxH / 2) << " " << num(x - bend) << " " << num(yc + kBoxH / 2) << " " << num(x)
             << " " << num(yc + kBoxH / 2) << "\"/>\n";
        }
      }
    }
  }
}

std::string Layout::svg() {
  place();
  std::ostringstream body;
  draw_band_headers(body);
  // Frames first, so that the boxes are drawn over them.
  for (size_t r = 0; r < rows_.size(); ++r)
    if (rows_[r].kind == Row::Kind::kBlockStart) draw_row(body, r);
  draw_edges(body);
  for (size_t r = 0; r < rows_.size(); ++r)
    if (rows_[r].kind != Row::Kind::kBlockStart) draw_row(body, r);
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plan\" width=\"" << num(width_) << "\" height=\""
     << num(height_) << "\" viewBox=\"0 0 " << num(width_) << " " << num(height_) << "\">\n"
     << body.str() << "</svg>\n";
  return os.str();
}

}  // namespace

std::string plan_svg(const PictureInput& in) {
  TESSERA_CHECK(!in.lanes.empty() && in.lanes.size() == in.lane_titles.size(), "plan_svg needs one title per lane");
  return Layout(in).svg();
}

}  // namespace tessera::report
