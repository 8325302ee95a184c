// Where a program's sends complete, and what a GPU holds instruction by instruction.

#include "plan/program_memory.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mplan = madpipe::plan;
namespace ms = madpipe::schedule;

namespace {

// GPipe with two micro-batches, stage 0 on GPU 0 and stage 1 (the last) on GPU 1; receives in
// arenas of 128 and 256 bytes.
mplan::Program two_gpu_gpipe() {
  mplan::Program program;
  program.micro_batches = 2;
  const std::vector<std::vector<std::string>> tokens = {
      {"F0.0", "SEND_ACT0.0>1", "F0.1", "SEND_ACT0.1>1", "POST_RECV_GRAD0.0<1",
       "POST_RECV_GRAD0.1<1", "RECV_GRAD0.0<1", "B0.0", "RECV_GRAD0.1<1", "B0.1"},
      {"POST_RECV_ACT0.0<0", "POST_RECV_ACT0.1<0", "RECV_ACT0.0<0", "F1.0", "RECV_ACT0.1<0", "F1.1",
       "B1.0", "SEND_GRAD0.0>0", "B1.1", "SEND_GRAD0.1>0"},
  };
  program.per_gpu.resize(2);
  program.receive_buffers.resize(2);
  for (int g = 0; g < 2; ++g) {
    for (const std::string& token : tokens[g]) {
      mplan::Instr instr = mplan::instr_from_string(token);
      if (mplan::is_send(instr.kind) || mplan::is_post(instr.kind) || mplan::is_wait(instr.kind)) {
        instr.peer = 1 - g;
        instr.sequence = instr.micro_batch;  // one kind of message per direction here
      }
      program.per_gpu[g].push_back(instr);
    }
  }
  program.arena_bytes = {128, 256};
  program.slots = {2, 2};
  return program;
}

mplan::Plan two_stage_plan(std::int64_t last_stage_weights) {
  mplan::Plan plan;
  plan.platform.gpus = 2;
  plan.platform.weight_copies = 3;
  ms::Stage first;
  first.id = 0;
  first.gpu = 0;
  first.weight_bytes = 100;
  first.stored_bytes = 1000;
  first.output_bytes = 50;
  first.workspace_bytes = 7;
  ms::Stage last;
  last.id = 1;
  last.first_layer = last.last_layer = 1;
  last.gpu = 1;
  last.weight_bytes = last_stage_weights;
  last.stored_bytes = 3000;
  last.output_bytes = 4;
  last.workspace_bytes = 11;
  plan.stages = {first, last};
  return plan;
}

}  // namespace

TEST(SendCompletions, BeforeTheNextMessageOfTheirKindOrAfterThePeersAnswer) {
  const mplan::Program program = two_gpu_gpipe();
  const std::vector<std::vector<int>> done = mplan::send_completions(program);
  // SEND_ACT0.0 completes before F0.1 makes the next activation (GPU 1 posted its receives at
  // the start). F0.1 is the last forward: SEND_ACT0.1 completes where GPU 0 has the gradient of
  // micro-batch 0, which GPU 1 sent after it had received both. SEND_GRAD0.0 completes before
  // B1.1 makes the next gradient, SEND_GRAD0.1 at the end.
  EXPECT_EQ(done[0], (std::vector<int>{-1, 1, -1, 6, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(done[1], (std::vector<int>{-1, -1, -1, -1, -1, -1, -1, 7, -1, 10}));
}

// Three GPUs; GPU 1 posts the receive of GPU 0's first activation only once GPU 2 has passed on
// GPU 0's second message. Completing the first send before F0.1 would deadlock (the dry run
// says so), so it completes where it no longer waits on anybody: at the end.
TEST(SendCompletions, WaitOnlyWhereTheProgramStillRuns) {
  mplan::Program program;
  const std::vector<std::vector<std::string>> tokens = {
      {"SEND_ACT0.0>1", "F0.1", "SEND_ACT1.0>2"},
      {"POST_RECV_ACT2.0<2", "RECV_ACT2.0<2", "POST_RECV_ACT0.0<0", "RECV_ACT0.0<0"},
      {"POST_RECV_ACT1.0<0", "RECV_ACT1.0<0", "SEND_ACT2.0>1"},
  };
  const std::vector<std::vector<int>> peers = {{1, -1, 2}, {2, 2, 0, 0}, {0, 0, 1}};
  program.per_gpu.resize(3);
  for (int g = 0; g < 3; ++g)
    for (std::size_t k = 0; k < tokens[g].size(); ++k) {
      mplan::Instr instr = mplan::instr_from_string(tokens[g][k]);
      instr.peer = peers[g][k];
      if (instr.peer >= 0) instr.sequence = 0;
      program.per_gpu[g].push_back(instr);
    }
  EXPECT_EQ(mplan::dry_run(program), "");
  mplan::Program waiting = program;
  waiting.send_completions = {{0, -1, -1}, {-1, -1, -1, -1}, {-1, -1, 3}};
  EXPECT_NE(mplan::dry_run(waiting).find("program deadlocks"), std::string::npos)
      << mplan::dry_run(waiting);
  const std::vector<std::vector<int>> done = mplan::send_completions(program);
  EXPECT_EQ(done[0], (std::vector<int>{3, -1, 3}));
  program.send_completions = done;
  EXPECT_EQ(mplan::dry_run(program), "");
}

TEST(ProgramMemory, AddsUpWhatEachInstructionHolds) {
  const mplan::Program program = two_gpu_gpipe();
  const std::vector<mplan::ProgramMemory> memory =
      mplan::program_memory(two_stage_plan(200), program);
  ASSERT_EQ(memory.size(), 2u);
  // GPU 0 at F0.1: two micro-batches stored, one output in flight (the first one's send
  // completed before F0.1), stage 0's workspace.
  EXPECT_EQ(memory[0].weights, 300);
  EXPECT_EQ(memory[0].receives, 128);
  EXPECT_EQ(memory[0].peak_at, 2);
  EXPECT_EQ(memory[0].in_flight, 2 * 1000 + 50);
  EXPECT_EQ(memory[0].transient, 7);
  EXPECT_EQ(memory[0].peak_bytes, 300 + 128 + 2050 + 7);
  // GPU 1 at B1.0: two micro-batches stored and the gradient it sends (until B1.1).
  EXPECT_EQ(memory[1].peak_at, 6);
  EXPECT_EQ(memory[1].in_flight, 2 * 3000 + 50);
  EXPECT_EQ(memory[1].peak_bytes, 600 + 256 + 6050 + 11);
  // A micro-batch's data is made during the forwards of the first and the last stage.
  const std::vector<mplan::ProgramMemory> with_data =
      mplan::program_memory(two_stage_plan(200), program, 5);
  EXPECT_EQ(with_data[0].transient, 7 + 5);
  EXPECT_EQ(with_data[0].peak_bytes, memory[0].peak_bytes + 5);
  EXPECT_EQ(with_data[1].peak_bytes, memory[1].peak_bytes);  // its peak is a backward
}

TEST(ProgramMemory, TheOptimizerStepBetweenProgramsCanBeThePeak) {
  mplan::Program program = two_gpu_gpipe();
  const std::vector<mplan::ProgramMemory> memory =
      mplan::program_memory(two_stage_plan(10000), program);
  EXPECT_EQ(memory[1].peak_at, -1);
  EXPECT_EQ(memory[1].in_flight, 0);
  EXPECT_EQ(memory[1].transient, 20000);
  EXPECT_EQ(memory[1].peak_bytes, 30000 + 256 + 20000);
  // Inside the program (two weight versions step there), the step counts where it runs.
  program.update_micro_batches = 2;
  mplan::Instr step = mplan::instr_from_string("OPT1.0");
  program.per_gpu[1].push_back(step);
  const std::vector<mplan::ProgramMemory> in_program =
      mplan::program_memory(two_stage_plan(10000), program);
  EXPECT_EQ(in_program[1].peak_at, 10);
  EXPECT_EQ(in_program[1].transient, 20000);
  EXPECT_EQ(in_program[1].in_flight, 50);  // the last gradient: sent, not known to be received
}
