"""The names a profile's GPU health thresholds are written in: NVML's clock event reasons, its NVLink
error counters, and the suite's classes of Xid events. facts/ parses the driver's answers into these
names; config/profile.py accepts only these."""

from __future__ import annotations

# nvmlClocksEventReason* bits (nvml.h)
CLOCK_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")

CLASSES = ("fatal", "reset", "service", "application", "informational", "unknown")
