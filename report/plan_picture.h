// The picture of a plan in report.html: a graph drawn as inline SVG, its
// nodes in topological order, top to bottom and column by column, so that
// a model of a thousand ops fills a page instead of one column. Repeated
// blocks (a transformer's layers, a ResNet stage's bottlenecks) are drawn
// once in a frame that says how many times they repeat; two ops are the same
// op of two blocks when their neighbourhood labels agree (role_labels,
// sharding/structure.h) and they were written by the same kind of mutation.
//
// For a mesh, the lanes are the ranks' programs side by side (SPMD: the same
// ops by name on every rank), and each collective is a bar across the lanes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::report {

struct PictureInput {
  std::vector<const Graph*> lanes;  // one graph, or one per rank
  std::vector<std::string> lane_titles;
  // Subprograms the search rewrote (spliced_subprogram of their nodes): the
  // number of their first row in the report's mutation table and the rules
  // applied, drawn above their ops ("#3 conv-winograd").
  struct Mark {
    int number = 0;
    std::string rules;
  };
  std::map<int, Mark> subprograms;
};

// One entry of the picture's sequence: a node of lane 0, or a repeated
// block of `length` entries starting at `first` that stands for `times`
// consecutive copies.
struct PictureBlock {
  size_t first = 0, length = 0;
  int times = 1;
};

// Maximal runs of consecutive equal blocks in `labels`, chosen greedily
// (most entries covered first), as a partition of [0, labels.size()) into
// single entries (times 1, length 1) and repeats. A repeat is kept only when
// it saves at least `min_saved` entries, and only when every copy starts
// and ends where `cut` allows (cut[i]: a copy may begin at entry i; size
// labels.size() + 1, or empty for anywhere): the picture never cuts the ops
// of one rewritten subprogram apart.
std::vector<PictureBlock> collapse_repeats(const std::vector<uint64_t>& labels, size_t min_saved = 6,
                                           const std::vector<bool>& cut = {});

// The SVG element (an <svg> with its width and height) for `in`. Every
// node it stands for, and every subprogram label, is named in the SVG: an
// op drawn once for a repeated block lists the names of its copies in its
// tooltip, and a subprogram's mark carries data-subprograms with the
// indices of every copy.
std::string plan_svg(const PictureInput& in);

}  // namespace tessera::report
