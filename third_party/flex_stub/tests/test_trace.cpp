// Chrome trace output.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "util.hpp"

using flex::RuntimeStream;

namespace {

std::string readFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

size_t countOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

std::string tracePath(const char* name) {
  return "/tmp/flex_stub_test_" + std::to_string(getpid()) + "_" + name + ".json";
}

// Launches one operation of every kind; returns how many.
int launchEveryKind(flex::RuntimeContext* context, RuntimeStream* stream, RuntimeStream* high) {
  void* dev = context->allocate(4096);
  static std::vector<uint8_t> host(4096, 1);
  flex::CompositeAddress address(dev, 4096);
  flex::DmaParams up(host.data(), 4096, true, &address);
  flex::DmaParams down(host.data(), 4096, false, &address);
  stream->launchOperationH2D(&up);
  stream->launchOperationD2H(&down);
  flex::D2DParams copy;
  copy.src = address;
  copy.dst = address;
  copy.size = 1024;
  stream->launchOperationD2D(&copy);
  stream->fillAsync(&address, 0, flex::DataFormats::FP32);
  flex::ComputeParams kernel;
  kernel.fn = [] {};
  kernel.name = "my_kernel";
  kernel.bytes = 777;
  stream->launchOperationCompute(&kernel);
  util::callback(stream, [] {});
  stream->launchOperationDelay(std::chrono::milliseconds(1));
  flex::RuntimeEvent event;
  event.record(stream);
  event.wait(high);
  flex::test::Gate gate;
  gate.enqueueOn(high);
  gate.release();
  stream->synchronize();
  high->synchronize();
  return 10;
}

}  // namespace

TEST(trace_start_stop_writes_chrome_json) {
  util::setEnv("SPYRE_DEVICES", "3");
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  RuntimeStream* high = context->createStream(flex::RuntimeStreamPriority::HIGH);
  util::callback(stream, [] {});  // before startTrace: not recorded
  stream->synchronize();
  flex::test::startTrace();
  const int launched = launchEveryKind(context, stream, high);
  const std::string path = tracePath("start_stop");
  CHECK_EQ(flex::test::stopTrace(path), static_cast<size_t>(launched));
  const std::string json = readFile(path);
  std::remove(path.c_str());
  CHECK(json.rfind("{\"traceEvents\":[", 0) == 0);
  CHECK_EQ(countOf(json, "\"ph\":\"X\""), static_cast<size_t>(launched));
  for (const char* kind : {"h2d", "d2h", "d2d", "fill", "compute", "host_callback", "delay",
                           "event_record", "event_wait", "gate"}) {
    CHECK(json.find(std::string("\"cat\":\"") + kind + "\"") != std::string::npos);
  }
  // The card's names: copies and fills; a kernel that took time is "<name> Cmpt Exec"
  // with its cycle counters (the 1 ms delay surely did).
  for (const char* name : {"Memcpy (HtoD)", "Memcpy (DtoH)", "Memcpy (DtoD)", "Memset (Device)"}) {
    CHECK(json.find(std::string("\"name\":\"") + name + "\"") != std::string::npos);
  }
  CHECK(json.find("\"name\":\"my_kernel") != std::string::npos);
  const size_t delay = json.find("\"name\":\"delay Cmpt Exec\"");
  CHECK(delay != std::string::npos);
  CHECK(json.find("\"TS1\":\"", delay) < json.find("\n", delay));
  CHECK_EQ(countOf(json, "Cmpt Exec"), countOf(json, "\"TS5\":\""));
  CHECK(json.find("\"bytes\":777") != std::string::npos);
  CHECK(json.find("\"bytes\":4096") != std::string::npos);
  CHECK(json.find("\"pid\":3,\"tid\":1") != std::string::npos);
  CHECK(json.find("\"name\":\"stream 1 (NORMAL)\"") != std::string::npos);
  CHECK(json.find("\"name\":\"stream 2 (HIGH)\"") != std::string::npos);
  CHECK(json.find("\"dur\":") != std::string::npos);
  CHECK(json.find("\"ts\":") != std::string::npos);
}

TEST(trace_stop_without_start_writes_nothing_recorded) {
  RuntimeStream* stream = util::context()->createStream();
  util::callback(stream, [] {});
  stream->synchronize();
  const std::string path = tracePath("empty");
  CHECK_EQ(flex::test::stopTrace(path), 0u);
  CHECK(readFile(path).find("\"traceEvents\"") != std::string::npos);
  std::remove(path.c_str());
}

TEST(trace_unwritable_path_is_an_error) {
  util::context();
  flex::test::startTrace();
  CHECK_THROWS_MSG(flex::test::stopTrace("/nonexistent-dir/x.json"),
                   "cannot write the trace to '/nonexistent-dir/x.json'");
}

TEST(trace_env_variable_writes_at_exit) {
  const std::string path = tracePath("env");
  const int status = util::runInChild([&path] {
    util::setEnv("FLEX_STUB_TRACE", path.c_str());
    auto* context = util::context();
    RuntimeStream* stream = context->createStream();
    RuntimeStream* high = context->createStream(flex::RuntimeStreamPriority::HIGH);
    launchEveryKind(context, stream, high);
    std::exit(0);  // the shutdown guard writes the trace
    return 1;
  });
  CHECK_EQ(status, 0);
  const std::string json = readFile(path);
  std::remove(path.c_str());
  CHECK_EQ(countOf(json, "\"ph\":\"X\""), 10u);
  CHECK(json.find("\"name\":\"stream 2 (HIGH)\"") != std::string::npos);
}
