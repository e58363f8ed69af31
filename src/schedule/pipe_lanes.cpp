#include "pipetrain/schedule/pipe_lanes.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "schedule/pair_order.h"

namespace pipetrain::schedule {
namespace {

std::vector<PairTransfer> on_channel(const std::vector<PairTransfer>& transfers, Channel channel) {
  std::vector<PairTransfer> kept;
  std::copy_if(transfers.begin(), transfers.end(), std::back_inserter(kept),
               [&](const PairTransfer& t) { return t.channel == channel; });
  return kept;
}

std::set<Channel> channels_of(const PairTransfers& transfers) {
  std::set<Channel> channels;
  for (const auto* list : {&transfers.sent, &transfers.received})
    for (const PairTransfer& t : *list) channels.insert(t.channel);
  return channels;
}

// Whether each of `pair`'s channels keeps its own transfers in order.
bool channels_in_order(const std::pair<int, int>& pair, const PairTransfers& transfers) {
  for (const Channel channel : channels_of(transfers)) {
    if (first_order_mismatch(pair, on_channel(transfers.sent, channel),
                             on_channel(transfers.received, channel)))
      return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<PipeLane>> pipe_lanes(const std::vector<PipelinePlan>& plans) {
  // Per ordered pair: the channels it carries, and whether one lane keeps them in order.
  std::map<std::pair<int, int>, std::set<Channel>> channels;
  std::map<std::pair<int, int>, bool> one_lane;
  for (const PipelinePlan& plan : plans) {
    for (const auto& [pair, transfers] : transfers_by_pair(plan)) {
      if (!channels_in_order(pair, transfers)) return std::nullopt;
      const auto more = channels_of(transfers);
      channels[pair].insert(more.begin(), more.end());
      const bool agree = !first_order_mismatch(pair, transfers.sent, transfers.received);
      one_lane[pair] = one_lane.count(pair) ? one_lane[pair] && agree : agree;
    }
  }
  std::vector<PipeLane> lanes;
  for (const auto& [pair, carried] : channels) {
    if (one_lane[pair]) {
      lanes.push_back({pair.first, pair.second, std::nullopt});
      continue;
    }
    for (const Channel channel : carried) lanes.push_back({pair.first, pair.second, channel});
  }
  std::sort(lanes.begin(), lanes.end());
  return lanes;
}

bool lanes_carry(const std::vector<PipeLane>& lanes, const PipelinePlan& plan) {
  const auto has = [&](const PipeLane& lane) {
    return std::find(lanes.begin(), lanes.end(), lane) != lanes.end();
  };
  for (const auto& [pair, transfers] : transfers_by_pair(plan)) {
    if (has({pair.first, pair.second, std::nullopt})) {
      if (first_order_mismatch(pair, transfers.sent, transfers.received)) return false;
      continue;
    }
    if (!channels_in_order(pair, transfers)) return false;
    for (const Channel channel : channels_of(transfers))
      if (!has({pair.first, pair.second, channel})) return false;
  }
  return true;
}

}  // namespace pipetrain::schedule
