// Instructions of lowered programs (program.hpp) and their tokens.

#include "plan/program.hpp"

#include "core/error.hpp"

#include <array>
#include <regex>
#include <set>
#include <tuple>

namespace {
struct InstrName {
  madpipe::plan::InstrKind kind;
  const char* name;
  char peer_mark;  // '>' to, '<' from, 0 none
};
using madpipe::plan::InstrKind;
constexpr std::array<InstrName, 12> kInstrNames{{
    {InstrKind::Forward, "F", 0},
    {InstrKind::Backward, "B", 0},
    {InstrKind::HandAct, "HAND_ACT", 0},
    {InstrKind::HandGrad, "HAND_GRAD", 0},
    {InstrKind::SendAct, "SEND_ACT", '>'},
    {InstrKind::SendGrad, "SEND_GRAD", '>'},
    {InstrKind::PostRecvAct, "POST_RECV_ACT", '<'},
    {InstrKind::PostRecvGrad, "POST_RECV_GRAD", '<'},
    {InstrKind::RecvAct, "RECV_ACT", '<'},
    {InstrKind::RecvGrad, "RECV_GRAD", '<'},
    {InstrKind::OptimizerStep, "OPT", 0},
    {InstrKind::BackwardWeight, "W", 0},
}};

const InstrName& instr_name(madpipe::plan::InstrKind kind) {
  for (const InstrName& entry : kInstrNames)
    if (entry.kind == kind) return entry;
  MADPIPE_UNREACHABLE("unknown instruction kind");
}

}  // namespace

bool madpipe::plan::operator==(const Instr& a, const Instr& b) {
  return std::tie(a.kind, a.stage, a.micro_batch, a.peer, a.slot, a.buffer, a.sequence) ==
         std::tie(b.kind, b.stage, b.micro_batch, b.peer, b.slot, b.buffer, b.sequence);
}

std::string madpipe::plan::to_string(const Instr& instr) {
  const InstrName& entry = instr_name(instr.kind);
  std::string token =
      entry.name + std::to_string(instr.stage) + "." + std::to_string(instr.micro_batch);
  if (entry.peer_mark) token += entry.peer_mark + std::to_string(instr.peer);
  return token;
}

madpipe::plan::Instr madpipe::plan::instr_from_string(const std::string& token) {
  static const std::regex pattern(R"(^([A-Z_]+?)(\d+)\.(\d+)(?:([<>])(\d+))?$)");
  std::smatch m;
  if (std::regex_match(token, m, pattern)) {
    for (const InstrName& entry : kInstrNames) {
      if (m[1] != entry.name) continue;
      if (m[4].matched != (entry.peer_mark != 0)) break;
      if (m[4].matched && m[4].str()[0] != entry.peer_mark) break;
      Instr instr;
      instr.kind = entry.kind;
      instr.stage = std::stoi(m[2]);
      instr.micro_batch = std::stoi(m[3]);
      if (m[5].matched) instr.peer = std::stoi(m[5]);
      return instr;
    }
  }
  throw Error(ErrorKind::InvalidInput, "", "instruction",
              "cannot parse '" + token +
                  "' (examples: F2.7, HAND_ACT2.7, SEND_ACT2.7>1, POST_RECV_GRAD0.3<1, "
                  "RECV_GRAD0.3<1, OPT2.0)");
}

std::vector<std::pair<int, int>> madpipe::plan::message_channels(const Plan& plan) {
  std::set<std::pair<int, int>> channels;
  for (std::size_t s = 0; s + 1 < plan.stages.size(); ++s) {
    const int a = plan.stages[s].gpu;
    const int b = plan.stages[s + 1].gpu;
    if (a == b) continue;
    channels.insert({a, b});
    channels.insert({b, a});
  }
  return {channels.begin(), channels.end()};
}
