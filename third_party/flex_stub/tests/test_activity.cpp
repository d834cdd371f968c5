// Activity records (flex/activity.hpp).
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <vector>

#include "flex/activity.hpp"
#include "util.hpp"

using flex::RuntimeStream;
using flex::activity::Kind;
using flex::activity::Record;

namespace {

const Record& only(const std::vector<Record>& records, Kind kind) {
  const Record* found = nullptr;
  for (const Record& r : records) {
    if (r.kind == kind) {
      if (found) harness::fail(__FILE__, __LINE__, "two records of one kind");
      found = &r;
    }
  }
  if (!found) harness::fail(__FILE__, __LINE__, "no record of the kind");
  return *found;
}

}  // namespace

TEST(activity_records_every_kind_with_launch_and_correlation) {
  util::setEnv("SPYRE_DEVICES", "2");
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  RuntimeStream* high = context->createStream(flex::RuntimeStreamPriority::HIGH);
  util::callback(stream, [] {});  // before enable(): not recorded
  stream->synchronize();

  flex::activity::enable();
  CHECK(flex::activity::enabled());
  void* dev = context->allocate(4096);
  std::vector<uint8_t> host(4096, 1);
  flex::CompositeAddress address(dev, 4096);
  flex::DmaParams up(host.data(), 4096, true, &address);
  flex::activity::pushUserCorrelationId(9);
  flex::activity::pushCorrelationId(41);
  flex::activity::pushCorrelationId(42);
  const int64_t before = flex::activity::timestampNs();
  stream->launchOperationH2D(&up);
  flex::activity::popCorrelationId();
  flex::ComputeParams kernel;
  kernel.fn = [] {};
  kernel.name = "my_kernel";
  kernel.bytes = 777;
  stream->launchOperationCompute(&kernel);
  flex::activity::popCorrelationId();
  flex::activity::popUserCorrelationId();
  stream->fillAsync(&address, 0, flex::DataFormats::FP32);  // no id pushed
  stream->launchOperationDelay(std::chrono::milliseconds(2));
  flex::RuntimeEvent event;
  event.record(stream);
  event.wait(high);
  flex::test::Gate gate;
  gate.enqueueOn(high);
  WAIT_UNTIL(gate.blockedStreams() == 1);
  gate.release();
  stream->synchronize();
  high->synchronize();
  flex::activity::disable();
  CHECK(!flex::activity::enabled());

  const std::vector<Record> records = flex::activity::flush();
  CHECK_EQ(records.size(), 7u);
  const Record& h2d = only(records, Kind::H2D);
  CHECK_EQ(h2d.bytes, 4096u);
  CHECK_EQ(h2d.correlation_id, 42u);
  CHECK_EQ(h2d.name, std::string("h2d"));
  CHECK_EQ(h2d.device, 0);
  CHECK_EQ(h2d.stream_id, stream->streamId());
  CHECK_EQ(h2d.launch_thread, static_cast<uint64_t>(::syscall(SYS_gettid)));
  CHECK(h2d.launch_start_ns >= before);
  CHECK(h2d.launch_start_ns <= h2d.launch_end_ns);
  CHECK(h2d.launch_end_ns <= h2d.end_ns);
  CHECK(h2d.start_ns <= h2d.end_ns);
  const Record& compute = only(records, Kind::Compute);
  CHECK_EQ(compute.name, std::string("my_kernel"));
  CHECK_EQ(compute.bytes, 777u);
  CHECK_EQ(compute.correlation_id, 41u);
  CHECK(compute.start_ns >= h2d.end_ns);  // stream order
  CHECK_EQ(h2d.user_correlation_id, 9u);
  CHECK_EQ(compute.user_correlation_id, 9u);
  CHECK_EQ(only(records, Kind::Fill).correlation_id, 0u);
  CHECK_EQ(only(records, Kind::Fill).user_correlation_id, 0u);
  const Record& delay = only(records, Kind::Delay);
  CHECK(delay.end_ns - delay.start_ns >= 2000000);
  const Record& wait = only(records, Kind::EventWait);
  CHECK_EQ(wait.stream_id, high->streamId());
  CHECK(wait.priority == flex::RuntimeStreamPriority::HIGH);
  CHECK(only(records, Kind::Gate).stream_id == high->streamId());
  CHECK(only(records, Kind::EventRecord).end_ns >= delay.end_ns);
  std::vector<uint64_t> ids;
  for (const Record& r : records) {
    CHECK(!r.failed);
    ids.push_back(r.launch_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  CHECK(ids.front() != 0u);
  CHECK(flex::activity::flush().empty());
}

TEST(activity_off_records_nothing_and_enable_clears) {
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  util::callback(stream, [] {});
  stream->synchronize();
  CHECK(flex::activity::flush().empty());
  flex::activity::enable();
  util::callback(stream, [] {});
  stream->synchronize();
  flex::activity::enable();  // drops the unflushed record
  flex::activity::disable();
  CHECK(flex::activity::flush().empty());
  flex::activity::popCorrelationId();  // empty stack: harmless
}

TEST(activity_failed_operation_is_marked) {
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  flex::activity::enable();
  flex::ComputeParams kernel;
  kernel.fn = [] { throw std::runtime_error("kernel fault"); };
  kernel.name = "bad_kernel";
  stream->launchOperationCompute(&kernel);
  CHECK_THROWS_MSG(stream->synchronize(), "kernel fault");
  flex::activity::disable();
  const std::vector<Record> records = flex::activity::flush();
  CHECK_EQ(records.size(), 1u);
  CHECK(records[0].failed);
  CHECK_EQ(records[0].name, std::string("bad_kernel"));
}

TEST(activity_and_chrome_trace_record_independently) {
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  flex::activity::enable();
  flex::test::startTrace();
  util::callback(stream, [] {});
  stream->synchronize();
  const std::string path = "/tmp/flex_stub_test_" + std::to_string(getpid()) + "_both.json";
  CHECK_EQ(flex::test::stopTrace(path), 1u);
  std::remove(path.c_str());
  util::callback(stream, [] {});  // the activity consumer still records
  stream->synchronize();
  flex::activity::disable();
  CHECK_EQ(flex::activity::flush().size(), 2u);
  CHECK_EQ(std::string(flex::activity::kindName(Kind::EventWait)), std::string("event_wait"));
}

TEST(activity_injected_fault_records_the_dropped_operation_as_failed) {
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  flex::activity::enable();
  flex::test::injectFault(stream, "injected");
  flex::ComputeParams kernel;
  kernel.fn = [] {};
  kernel.name = "never_runs";
  stream->launchOperationCompute(&kernel);
  CHECK_THROWS_MSG(stream->synchronize(), "injected");
  flex::activity::disable();
  const std::vector<Record> records = flex::activity::flush();
  CHECK_EQ(records.size(), 1u);
  CHECK(records[0].failed);
  CHECK_EQ(records[0].name, std::string("never_runs"));
  CHECK_EQ(records[0].start_ns, records[0].end_ns);
}

TEST(activity_enable_drops_ids_a_previous_profile_left_pushed) {
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  flex::activity::enable();
  flex::activity::pushCorrelationId(7);  // the profile stops before the pop
  flex::activity::disable();
  flex::activity::enable();
  util::callback(stream, [] {});
  stream->synchronize();
  flex::activity::disable();
  const std::vector<Record> records = flex::activity::flush();
  CHECK_EQ(records.size(), 1u);
  CHECK_EQ(records[0].correlation_id, 0u);
}
