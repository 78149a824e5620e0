// A parametrised GPU suite whose every test runs under the default row
// tuning as kTune changes it, the defaults restored after each test.
#pragma once

#include <gtest/gtest.h>

#include "quack/core/config.hpp"

namespace quack {
namespace test {

template <class Param, void (*kTune)(RowTuning&)>
class TunedSuite : public testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    RowTuning t = default_row_tuning();
    kTune(t);
    set_row_tuning(&t);
  }
  void TearDown() override { set_row_tuning(nullptr); }
};

}  // namespace test
}  // namespace quack
