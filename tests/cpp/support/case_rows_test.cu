// test::case_rows, the row cap of the sanitizer runs: needs no GPU, so it runs
// wherever the GPU suite is built (CI included).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "support/cuda_test.hpp"

namespace quack {
namespace {

// Sets QUACK_TEST_MAX_ELEMS for one test and restores what was there.
class MaxElems {
 public:
  explicit MaxElems(const char* v) {
    const char* old = std::getenv("QUACK_TEST_MAX_ELEMS");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (v) setenv("QUACK_TEST_MAX_ELEMS", v, 1);
    else unsetenv("QUACK_TEST_MAX_ELEMS");
  }
  ~MaxElems() {
    if (had_) setenv("QUACK_TEST_MAX_ELEMS", old_.c_str(), 1);
    else unsetenv("QUACK_TEST_MAX_ELEMS");
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(CaseRows, UnsetEmptyOrNonPositiveLeavesTheRows) {
  for (const char* v : {static_cast<const char*>(nullptr), "", "0", "-5", "junk"}) {
    MaxElems e(v);
    EXPECT_EQ(test::case_rows(300, 70000), 300) << (v ? v : "(unset)");
    EXPECT_EQ(test::case_rows(8192, 1), 8192) << (v ? v : "(unset)");
  }
}

TEST(CaseRows, CapsAtTheElementsOverTheColumnsAndNeverBelowTwo) {
  MaxElems e("4194304");
  EXPECT_EQ(test::case_rows(300, 70000), 59);       // 4194304 / 70000
  EXPECT_EQ(test::case_rows(8192, 4096), 1024);     // exactly the cap
  EXPECT_EQ(test::case_rows(1000, 4096), 1000);     // under it: unchanged
  EXPECT_EQ(test::case_rows(64, 262144), 16);
  EXPECT_EQ(test::case_rows(3, 4194304), 2);        // one row is the cap: two still run
  EXPECT_EQ(test::case_rows(5, 16777216), 2);       // a row over the cap: two
  EXPECT_EQ(test::case_rows(1, 16777216), 1);       // never more than the case's own
  EXPECT_EQ(test::case_rows(0, 1000), 0);
  EXPECT_EQ(test::case_rows(7, 0), 7);              // no columns: nothing to scale by
}

}  // namespace
}  // namespace quack
