// The recipe's enumerated run settings that are not algorithm rows: where
// tensors live (launch.device), the precision of a role's weights
// (roles.NAME.dtype) and the learning-rate schedule (roles.NAME.lr_scheduler).
// The schema admits their names; the plan resolves each once into these
// enums, which `meshrun plan` prints back by name and the runtime switches
// on. Torch-free.
//
// Invariants: each table has one row per enum value and the names are the
// recipe's (tests walk the tables); a name that is no row's is refused by
// the schema before a plan is made, so `*_named` failing at plan time is a
// bug (std::logic_error).
#pragma once

#include <optional>
#include <string_view>

namespace meshrun {

enum class DeviceKind { cpu, cuda };

// A role's weights and compute: 2 bytes an element but fp32.
enum class Precision { bf16, fp16, fp32 };

// The learning rate after warmup (include/meshrun/train/lr_schedule.hpp).
enum class LrScheduleKind { constant, linear, cosine };

template <class Id>
struct SettingRow {
  Id id;
  std::string_view name;
};

inline constexpr SettingRow<DeviceKind> kDeviceKinds[] = {{DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}};
inline constexpr SettingRow<Precision> kPrecisions[] = {
    {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}, {Precision::fp32, "fp32"}};
inline constexpr SettingRow<LrScheduleKind> kLrScheduleKinds[] = {
    {LrScheduleKind::constant, "constant"}, {LrScheduleKind::linear, "linear"}, {LrScheduleKind::cosine, "cosine"}};

namespace settings_detail {
template <class Id, std::size_t N>
constexpr std::string_view name_in(const SettingRow<Id> (&rows)[N], Id id) {
  for (const auto& row : rows)
    if (row.id == id) return row.name;
  return "?";
}
template <class Id, std::size_t N>
constexpr std::optional<Id> id_in(const SettingRow<Id> (&rows)[N], std::string_view name) {
  for (const auto& row : rows)
    if (row.name == name) return row.id;
  return std::nullopt;
}
}  // namespace settings_detail

constexpr std::string_view setting_name(DeviceKind id) { return settings_detail::name_in(kDeviceKinds, id); }
constexpr std::string_view setting_name(Precision id) { return settings_detail::name_in(kPrecisions, id); }
constexpr std::string_view setting_name(LrScheduleKind id) { return settings_detail::name_in(kLrScheduleKinds, id); }

constexpr std::optional<DeviceKind> device_kind_named(std::string_view name) {
  return settings_detail::id_in(kDeviceKinds, name);
}
constexpr std::optional<Precision> precision_named(std::string_view name) {
  return settings_detail::id_in(kPrecisions, name);
}
constexpr std::optional<LrScheduleKind> lr_schedule_kind_named(std::string_view name) {
  return settings_detail::id_in(kLrScheduleKinds, name);
}

// Bytes of one weight element on the device.
constexpr int element_bytes(Precision precision) { return precision == Precision::fp32 ? 4 : 2; }

}  // namespace meshrun
