// DeepSeek-V4 chat special tokens and DSML markers, as text (dsv4-model.md §9). Shared by the chat encoder and
// the output parsers so both sides spell them identically.
#pragma once

#include <string_view>

namespace onecard::dsv4 {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

// DSML tags as they open (`<｜DSML｜`) or close (`</｜DSML｜`); element names follow.
inline constexpr std::string_view kDsmlOpen = "<｜DSML｜";
inline constexpr std::string_view kDsmlClose = "</｜DSML｜";
inline constexpr std::string_view kToolCallsBlock = "tool_calls";  // V4 wrapper (V3.2 used "function_calls")

}  // namespace onecard::dsv4
