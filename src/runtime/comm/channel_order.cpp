#include "runtime/comm/channel_order.hpp"

#include "core/error.hpp"

namespace {
void check_next(std::map<int, int>& next, int peer, const madpipe::runtime::MessageKey& key,
                const char* side) {
  int& expected = next[peer];
  if (key.sequence != expected)
    throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                         std::string(side) + " rank " + std::to_string(peer) + ": the " +
                             madpipe::runtime::message_name(key) + " carries sequence number " +
                             std::to_string(key.sequence) + " but the channel's next is " +
                             std::to_string(expected) +
                             " (an ordered transport would match it with another message)");
  ++expected;
}
}  // namespace

void madpipe::runtime::ChannelOrder::send(int peer, const MessageKey& key) {
  check_next(next_send_, peer, key, "send to");
}

void madpipe::runtime::ChannelOrder::receive(int peer, const MessageKey& key) {
  check_next(next_receive_, peer, key, "receive from");
}

void madpipe::runtime::ChannelOrder::restart() {
  next_send_.clear();
  next_receive_.clear();
}

std::string madpipe::runtime::message_name(const MessageKey& key) {
  return std::string(key.direction == Direction::Activation ? "activation" : "gradient") +
         " of stage " + std::to_string(key.stage) + ", micro-batch " +
         std::to_string(key.micro_batch);
}
