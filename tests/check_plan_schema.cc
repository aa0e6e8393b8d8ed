// check_plan_schema PLAN_DIR...: the plan schema check of tests/plan_schema.h
// for the tests written in Python. Exit 0 when every plan.json matches.
#include <cstdio>

#include "tests/plan_schema.h"

int main(int argc, char** argv) {
  int bad = 0;
  for (int i = 1; i < argc; ++i)
    for (const std::string& e : tessera::testing::plan_schema_errors(argv[i])) {
      std::fprintf(stderr, "%s/plan.json: %s\n", argv[i], e.c_str());
      bad = 1;
    }
  return argc < 2 ? 2 : bad;
}
