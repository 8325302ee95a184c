#pragma once

#include "runtime/comm/message_key.hpp"

#include <map>
#include <string>

namespace madpipe::runtime {

// The order of the messages on each channel of an ordered transport. NCCL matches the k-th send
// from a to b with the k-th receive b posts from a, whatever they carry, so both sides must issue
// a channel's messages in the order the program numbered them (MessageKey::sequence, from 0 in
// each program run).
class ChannelOrder {
 public:
  // Checks that a send to (a receive from) `peer` is the next message of its channel; throws
  // Error{Internal} naming the message and both numbers when it is not.
  void send(int peer, const MessageKey& key);
  void receive(int peer, const MessageKey& key);
  // A new program run: every channel's numbering restarts.
  void restart();

 private:
  std::map<int, int> next_send_, next_receive_;  // by peer
};

// "activation of stage 2, micro-batch 5" (or "gradient of ...").
std::string message_name(const MessageKey& key);

}  // namespace madpipe::runtime
