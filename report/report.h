// report/: what a person and a program read of a Plan (mutator/optimize.h),
// one writer per format for every plan, one device or a mesh alike:
// plan.json (the versioned contract `tessera run` reads; schema in
// docs/plan.schema.json), report.json (plan.json and what the reports add),
// report.txt, and report.html with its picture (report_html.h).
#pragma once

#include <string>

#include "mutator/optimize.h"

namespace tessera::report {

// A measured gain, when the caller measured one (the CPU runtime, one device).
struct Measurement {
  double before_ms = 0, after_ms = 0;
  int runs = 0;
  std::string backend;
};

// The plan as versioned JSON. `timing` false leaves out the fields that
// depend on the clock (for byte comparisons). The folder's file digests are
// added when the files are written (with_plan_files, mutator/plan_files.h).
std::string plan_json(const mutator::Plan& plan, bool timing = true);
std::string report_json(const mutator::Plan& plan, const Measurement* measured);
std::string report_text(const mutator::Plan& plan, const Measurement* measured);
std::string report_html(const mutator::Plan& plan, const Measurement* measured);

}  // namespace tessera::report
