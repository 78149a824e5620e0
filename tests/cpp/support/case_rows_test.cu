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

TEST(CaseRows, CapsAtTheElementsOverTheColumnsAndNeverBelowOne) {
  MaxElems e("1048576");
  EXPECT_EQ(test::case_rows(300, 70000), 14);       // 1048576 / 70000
  EXPECT_EQ(test::case_rows(8192, 4096), 256);      // at the cap
  EXPECT_EQ(test::case_rows(200, 4096), 200);       // under it: unchanged
  EXPECT_EQ(test::case_rows(64, 262144), 4);
  EXPECT_EQ(test::case_rows(40, 524288), 2);        // half the cap a row: two rows
  EXPECT_EQ(test::case_rows(5, 1048576), 1);        // the cap a row: one
  EXPECT_EQ(test::case_rows(3, 4194304), 1);        // a row over the cap: still one
  EXPECT_EQ(test::case_rows(0, 1000), 0);
  EXPECT_EQ(test::case_rows(7, 0), 7);              // no columns: nothing to scale by
}

}  // namespace
}  // namespace quack
