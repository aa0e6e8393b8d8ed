// report.html: the report a person reads, one self-contained file (inline
// SVG and CSS, no script, nothing fetched). It shows the picture of the plan
// (plan_picture.h: the changed subprograms highlighted and labelled with
// their mutations; for a mesh the ranks side by side with the collectives
// between them), the predicted time per kernel class before and after, for
// a mesh the degree curve, the mutation table with each mutation's
// verification and bound, and the end-to-end check with its tolerance.
// Made from the same plan data as plan.json and report.txt.
#pragma once

#include <string>

#include "mutator/optimize.h"
#include "mutator/sharding/sharded_plan.h"

namespace tessera::mutator {

std::string report_html(const Plan& plan, const Measurement* measured);
std::string sharded_report_html(const ShardedPlan& plan);

}  // namespace tessera::mutator
