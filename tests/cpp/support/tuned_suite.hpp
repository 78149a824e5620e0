// GPU test fixtures whose every test runs under the default row tuning as
// kTune changes it, the defaults restored after each test: Tuned for plain
// tests (TEST_F), TunedSuite for parametrised suites (TEST_P).
#pragma once

#include <gtest/gtest.h>

#include "quack/core/config.hpp"

namespace quack {
namespace test {

template <void (*kTune)(RowTuning&), class Base = testing::Test>
class Tuned : public Base {
 protected:
  void SetUp() override {
    RowTuning t = default_row_tuning();
    kTune(t);
    set_row_tuning(&t);
  }
  void TearDown() override { set_row_tuning(nullptr); }
};

template <class Param, void (*kTune)(RowTuning&)>
using TunedSuite = Tuned<kTune, testing::TestWithParam<Param>>;

}  // namespace test
}  // namespace quack
