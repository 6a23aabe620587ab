#include "scheduler/source_registry.hpp"

#include <gtest/gtest.h>

using namespace arbiter::scheduler;

TEST(SourceRegistry, PicksTheLeastLoadedSourceWithTheCapability) {
  source_registry reg;
  auto a = reg.add("a", {"cpu"}, 2);
  auto b = reg.add("b", {"cpu"}, 2);
  reg.add("e", {"embed"}, 2);
  reg.on_dispatch(a);
  EXPECT_EQ(reg.pick("cpu"), b);
  reg.on_dispatch(b);
  reg.on_dispatch(b);
  EXPECT_EQ(reg.pick("cpu"), a);
  reg.on_dispatch(a);
  EXPECT_FALSE(reg.pick("cpu").has_value()) << "every cpu source is at its limit";
  reg.on_complete(b);
  EXPECT_EQ(reg.pick("cpu"), b);
}

TEST(SourceRegistry, BreaksTiesByFewestDispatches) {
  source_registry reg;
  auto a = reg.add("a", {"cpu"}, 1);
  auto b = reg.add("b", {"cpu"}, 1);
  EXPECT_EQ(reg.pick("cpu"), a);
  reg.on_dispatch(a);
  reg.on_complete(a);
  EXPECT_EQ(reg.pick("cpu"), b);
}

TEST(SourceRegistry, KnowsWhatIsServed) {
  source_registry reg;
  EXPECT_FALSE(reg.serves("cpu"));
  auto a = reg.add("a", {"cpu", "embed"}, 1);
  EXPECT_TRUE(reg.serves("embed"));
  EXPECT_EQ(reg.count("cpu"), 1u);
  EXPECT_FALSE(reg.pick("nli").has_value());
  EXPECT_TRUE(reg.remove(a));
  EXPECT_FALSE(reg.remove(a));
  EXPECT_FALSE(reg.serves("cpu"));
}
