// Device enumeration from FLEX_STUB_CARDS, SPYRE_DEVICES (SPYRE_VISIBLE_DEVICES), AIU_WORLD_SIZE and
// LOCAL_WORLD_SIZE. No context is created: getNumDevices() does not need one.
#include "util.hpp"

using flex::getCardIndex;
using flex::getNumDevices;

TEST(devices_default_is_every_card) {
  CHECK_EQ(getNumDevices(), 8);
  CHECK_EQ(getCardIndex(0), 0);
  CHECK_EQ(getCardIndex(7), 7);
  CHECK_THROWS_MSG(getCardIndex(8), "logical device 8 is out of range: 8 device(s) visible");
  util::setEnv("FLEX_STUB_CARDS", "3");
  CHECK_EQ(getNumDevices(), 3);
  CHECK(flex::RuntimeContext::get() == nullptr);
}

TEST(devices_spyre_devices_dedups_drops_out_of_range_tolerates_spaces) {
  util::setEnv("SPYRE_DEVICES", " 3, 1,3 , 9,-1 ,1");
  CHECK_EQ(getNumDevices(), 2);
  CHECK_EQ(getCardIndex(0), 3);
  CHECK_EQ(getCardIndex(1), 1);
  util::setEnv("FLEX_STUB_CARDS", "10");
  CHECK_EQ(getNumDevices(), 3);
  CHECK_EQ(getCardIndex(2), 9);
}

TEST(devices_spyre_devices_wins_over_world_sizes) {
  util::setEnv("AIU_WORLD_SIZE", "4");
  util::setEnv("LOCAL_WORLD_SIZE", "6");
  util::setEnv("SPYRE_DEVICES", "7");
  CHECK_EQ(getNumDevices(), 1);
  CHECK_EQ(getCardIndex(0), 7);
}

TEST(devices_spyre_visible_devices_is_an_alias_spyre_devices_wins) {
  util::setEnv("AIU_WORLD_SIZE", "4");
  util::setEnv("SPYRE_VISIBLE_DEVICES", "5,2,5");
  CHECK_EQ(getNumDevices(), 2);
  CHECK_EQ(getCardIndex(0), 5);
  CHECK_EQ(getCardIndex(1), 2);
  util::setEnv("SPYRE_VISIBLE_DEVICES", "1,y");
  CHECK_THROWS_MSG(getNumDevices(), "SPYRE_VISIBLE_DEVICES='1,y' has a non-integer entry 'y'");
  util::setEnv("SPYRE_DEVICES", "6");  // wins: the alias is not read
  CHECK_EQ(getNumDevices(), 1);
  CHECK_EQ(getCardIndex(0), 6);
}

TEST(devices_spyre_devices_rejects_non_integer_entries) {
  util::setEnv("SPYRE_DEVICES", "0,x");
  CHECK_THROWS_MSG(getNumDevices(), "SPYRE_DEVICES='0,x' has a non-integer entry 'x'");
  util::setEnv("SPYRE_DEVICES", "1,2x");
  CHECK_THROWS_MSG(getNumDevices(), "SPYRE_DEVICES='1,2x' has a non-integer entry '2x'");
  util::setEnv("SPYRE_DEVICES", "0,,1");
  CHECK_THROWS_MSG(getNumDevices(), "SPYRE_DEVICES='0,,1' has a non-integer entry ''");
  util::setEnv("SPYRE_DEVICES", "");
  CHECK_THROWS_MSG(getNumDevices(), "SPYRE_DEVICES='' has an empty entry");
  util::setEnv("SPYRE_DEVICES", "1,");
  CHECK_THROWS_MSG(getNumDevices(), "SPYRE_DEVICES='1,' has an empty entry");
}

TEST(devices_aiu_world_size_capped_at_cards) {
  util::setEnv("FLEX_STUB_CARDS", "4");
  util::setEnv("AIU_WORLD_SIZE", "20");
  CHECK_EQ(getNumDevices(), 4);
  util::setEnv("AIU_WORLD_SIZE", "3");
  util::setEnv("LOCAL_WORLD_SIZE", "1");
  CHECK_EQ(getNumDevices(), 3);
  CHECK_EQ(getCardIndex(2), 2);
}

TEST(devices_local_world_size_used_without_aiu_world_size) {
  util::setEnv("LOCAL_WORLD_SIZE", "5");
  CHECK_EQ(getNumDevices(), 5);
  util::setEnv("LOCAL_WORLD_SIZE", "50");
  CHECK_EQ(getNumDevices(), 8);
}

TEST(devices_world_size_below_one_is_an_error) {
  util::setEnv("AIU_WORLD_SIZE", "0");
  CHECK_THROWS_MSG(getNumDevices(), "AIU_WORLD_SIZE='0' is out of range: it must be >= 1");
  unsetenv("AIU_WORLD_SIZE");
  util::setEnv("LOCAL_WORLD_SIZE", "-2");
  CHECK_THROWS_MSG(getNumDevices(), "LOCAL_WORLD_SIZE='-2' is out of range: it must be >= 1");
}

TEST(devices_malformed_values_name_variable_and_value) {
  for (const char* bad : {"abc", "2x", "", " ", "1.5"}) {
    util::setEnv("AIU_WORLD_SIZE", bad);
    CHECK_THROWS_MSG(getNumDevices(),
                     std::string("flex: AIU_WORLD_SIZE='") + bad + "' is not an integer");
  }
  unsetenv("AIU_WORLD_SIZE");
  util::setEnv("LOCAL_WORLD_SIZE", "abc");
  CHECK_THROWS_MSG(getNumDevices(), "flex: LOCAL_WORLD_SIZE='abc' is not an integer");
  unsetenv("LOCAL_WORLD_SIZE");
  util::setEnv("FLEX_STUB_CARDS", "2x");
  CHECK_THROWS_MSG(getNumDevices(), "flex: FLEX_STUB_CARDS='2x' is not an integer");
  util::setEnv("AIU_WORLD_SIZE", "99999999999999999999");
  util::setEnv("FLEX_STUB_CARDS", "8");
  CHECK_THROWS_MSG(getNumDevices(), "AIU_WORLD_SIZE='99999999999999999999' is out of range");
}

TEST(devices_cards_must_be_at_least_one) {
  util::setEnv("FLEX_STUB_CARDS", "0");
  CHECK_THROWS_MSG(getNumDevices(), "FLEX_STUB_CARDS='0' is out of range: it must be >= 1");
  util::setEnv("FLEX_STUB_CARDS", " 3 ");
  util::setEnv("AIU_WORLD_SIZE", "8");
  CHECK_EQ(getNumDevices(), 3);
}

TEST(devices_card_index_range_checked) {
  util::setEnv("AIU_WORLD_SIZE", "2");
  CHECK_THROWS_MSG(getCardIndex(2), "logical device 2 is out of range: 2 device(s) visible");
  CHECK_THROWS_MSG(getCardIndex(-1), "logical device -1 is out of range");
}

TEST(devices_env_is_read_on_every_call) {
  CHECK_EQ(getNumDevices(), 8);
  util::setEnv("AIU_WORLD_SIZE", "2");
  CHECK_EQ(getNumDevices(), 2);
  util::setEnv("SPYRE_DEVICES", "4,6,5");
  CHECK_EQ(getNumDevices(), 3);
  CHECK_EQ(getCardIndex(2), 5);
  unsetenv("SPYRE_DEVICES");
  CHECK_EQ(getCardIndex(1), 1);
}
