#pragma once

#include "core/profile.hpp"
#include "remat/remat_graph.hpp"

namespace madpipe::remat {

// Training graphs of a pipeline stage holding layers [first, last] of a chain profile, for graph
// rematerialization (moccasin.hpp). Both list, in this input order:
//   "input"        the activation the stage receives (not recomputable, takes no time)
//   forward nodes  layer by layer
//   "grad_output"  the gradient the stage receives for its output (not recomputable)
//   backward nodes "B:<forward node>", in reverse order
// The backward node of a forward op u reads the gradient of u's output (the backward nodes of u's
// consumers, or grad_output for the stage's last op) and what u's backward needs from the forward
// (u's inputs, its output, both or nothing, by kind of op); its output is the gradient of u's
// input, of one output's size for an addition (one buffer serves both branches), 0 for the stage
// input of the first stage (nothing to send back). An op with several inputs that is not an
// addition (attention's attn_v) has one backward node per input, "B:<u>:<input>", sharing u's
// backward time. Weights, their gradients and workspaces are not modelled.

// One forward and one backward node per layer: forward "<layer>" keeps output_bytes +
// saved_bytes (what F^all keeps for its backward), backward "B:<layer>" reads the gradient, the
// layer's input and its forward node, and outputs the gradient of the layer's input (the previous
// layer's output_bytes). A training chain: moccasin's hint uses ROTOR on it.
RematGraph layer_chain_graph(const Profile& profile, int first, int last);

// Layers expanded into operators, with durations and sizes distributed over them:
//   ResNet bottleneck "layerX.Y": conv1 bn1 relu1 conv2 bn2 relu2 conv3 bn3 [downsample.conv
//     downsample.bn for Y = 0] add relu, the add reading the block input (or the downsample)
//   GPT block "h.N": ln1 qkv scores softmax attn_v proj add1 ln2 fc1 gelu fc2 add2, add1 reading
//     the block input and add2 reading add1
//   any other layer: one node, or ".saved" then the layer when it has saved_bytes
// Each op has a fixed time share (FLOP-heavy ops most) that splits the layer's forward_ms, and the
// same share of its backward_ms goes to its backward node; the last op outputs output_bytes and the
// others split saved_bytes in proportion to fixed relative tensor sizes (docs/planner.md).
RematGraph stage_graph(const Profile& profile, int first, int last);

}  // namespace madpipe::remat
