#include "common/gpu_monitor.hpp"

#include <gtest/gtest.h>

using namespace arbiter;

TEST(GpuMonitor, WithoutNvmlThereIsNoMonitorAndNoMetric) {
  metrics_registry registry;
  EXPECT_EQ(gpu_monitor::open(registry, "/nonexistent/libnvidia-ml.so.1"), nullptr);
  EXPECT_EQ(registry.render().find("arbiter_gpu_"), std::string::npos);
}

TEST(GpuMonitor, ReadsEveryGpuAndKeepsTheGaugesCurrent) {
  metrics_registry registry;
  auto gpus = gpu_monitor::open(registry, FAKE_NVML_LIBRARY);
  ASSERT_NE(gpus, nullptr);
  EXPECT_EQ(gpus->count(), 2u);
  auto first = gpus->read();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].name, "Fake GPU 0");
  EXPECT_EQ(first[0].memory_total, 80ULL << 30);
  EXPECT_DOUBLE_EQ(first[0].utilization, 0.37);
  auto second = gpus->read();
  EXPECT_GT(second[1].memory_used, first[1].memory_used) << "each read asks NVML again";
  auto text = registry.render();
  EXPECT_NE(text.find(R"(arbiter_gpu_memory_total_bytes{gpu="1",name="Fake GPU 1"} 85899345920)"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find(R"(arbiter_gpu_utilization_ratio{gpu="0",name="Fake GPU 0"} 0.37)"),
            std::string::npos);
  gpus->set_workers({{"embedder", "cuda:1"}, {"embedder", "cuda:0"}, {"judge", "cuda:1"},
                     {"cpu-model", "cpu"}});
  text = registry.render();
  EXPECT_NE(text.find(R"(arbiter_gpu_model_workers{gpu="1",model="judge"} 1)"), std::string::npos)
    << text;
  EXPECT_NE(text.find(R"(arbiter_gpu_model_workers{gpu="0",model="embedder"} 1)"),
            std::string::npos);
  EXPECT_EQ(text.find("cpu-model"), std::string::npos);
}
