// Every verb's --help fits a terminal page and names the pages of the user
// guide that say the rest (tools/cli/cli_util.h: kHelpLines, kHelpColumns);
// each page it names exists, with the section it links to.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "tests/tools/cli_run.h"
#include "tools/cli/cli_util.h"

namespace {

using tessera::testing::read_file;
using tessera::testing::run_cli;

// A heading's anchor as GitHub makes it: lower case, punctuation but '-'
// and '_' dropped, spaces as '-'.
std::string anchor_of(const std::string& heading) {
  std::string out;
  for (char c : heading) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (c == ' ')
      out += '-';
  }
  return out;
}

bool page_has_section(const std::string& page, const std::string& anchor) {
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    size_t hashes = line.find_first_not_of('#');
    if (hashes == 0 || hashes == std::string::npos || line[hashes] != ' ') continue;
    if (anchor_of(line.substr(hashes + 1)) == anchor) return true;
  }
  return false;
}

TEST(CliHelp, EveryVerbFitsATerminalPageAndNamesItsGuidePages) {
  namespace fs = std::filesystem;
  for (const char* verb : {"", "inspect", "run", "optimize", "verify", "cost", "generate"}) {
    SCOPED_TRACE(std::string("tessera ") + verb + " --help");
    auto r = run_cli(std::string(verb) + " --help");
    ASSERT_EQ(r.code, 0) << r.err;
    std::istringstream lines(r.out);
    int count = 0;
    for (std::string line; std::getline(lines, line); ++count)
      EXPECT_LE(static_cast<int>(line.size()), tessera::cli::kHelpColumns) << line;
    EXPECT_LE(count, tessera::cli::kHelpLines) << r.out;

    std::smatch m;
    std::string rest = r.out;
    int pages = 0;
    for (std::regex link(R"(((?:docs/)?[A-Za-z_]+\.md)(?:#([a-z0-9_-]+))?)"); std::regex_search(rest, m, link);
         rest = m.suffix()) {
      fs::path page = fs::path(TESSERA_SOURCE_DIR) / m[1].str();
      ASSERT_TRUE(fs::exists(page)) << page;
      if (m[2].matched) {
        EXPECT_TRUE(page_has_section(read_file(page), m[2].str())) << m[0];
      }
      ++pages;
    }
    EXPECT_GE(pages, 1) << "no page of the user guide named:\n" << r.out;
  }
}

TEST(CliHelp, AnchorsAreGitHubs) {
  EXPECT_EQ(anchor_of("The host CPU profile (`--device cpu`)"), "the-host-cpu-profile---device-cpu");
  EXPECT_EQ(anchor_of("`tessera verify`"), "tessera-verify");
  EXPECT_FALSE(page_has_section("# A\n## Running the ranks\n", "running-ranks"));
  EXPECT_TRUE(page_has_section("# A\n## Running the ranks\n", "running-the-ranks"));
}

}  // namespace
