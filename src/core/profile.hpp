#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace madpipe {

// A backward split in two (zero-bubble schedules): the input gradient I, which the previous
// stage waits for, and the weight gradient W, which nobody waits for. Optional in a profile.
struct SplitBackward {
  double input_ms = 0;          // backward_input_ms
  double weight_ms = 0;         // backward_weight_ms; input_ms + weight_ms = backward_ms
  std::int64_t kept_bytes = 0;  // backward_weight_kept_bytes: kept from I until W
};
bool operator==(const SplitBackward& a, const SplitBackward& b);

// One layer of the chain, fields named as in madpipe.profile/1 (FORMATS.md).
struct Layer {
  std::string name;
  double forward_ms = 0;   // u_F
  double backward_ms = 0;  // u_B
  std::int64_t weight_bytes = 0;
  std::int64_t output_bytes = 0;  // a_l (delta_l has the same size)
  std::int64_t saved_bytes = 0;   // kept from F until B besides input and output
  std::int64_t forward_workspace_bytes = 0;
  std::int64_t backward_workspace_bytes = 0;
  std::optional<SplitBackward> split_backward;  // when the profile measured the split
};

// A weight that several layers share (a tied embedding and output head). Each of those layers
// counts it in its weight_bytes, as when profiled alone; a GPU that holds several of them holds
// it once.
struct TiedWeight {
  std::vector<int> layers;  // ascending indices into Profile::layers, at least two
  std::int64_t bytes = 0;   // the shared weight's bytes, at most each layer's weight_bytes
};
bool operator==(const TiedWeight& a, const TiedWeight& b);

struct Profile {
  std::string name;
  std::string device;
  std::string dtype;
  int batch = 0;
  std::int64_t input_bytes = 0;  // a_0
  std::vector<Layer> layers;
  std::string source;  // free text: how the costs were obtained; empty: not said
  int seq = 0;         // tokens per sample the costs are for; 0: not said (or not a sequence)
  std::vector<TiedWeight> tied_weights;  // a layer is in at most one group
};

bool operator==(const Layer& a, const Layer& b);
bool operator==(const Profile& a, const Profile& b);

inline constexpr const char* kProfileFormat = "madpipe.profile/1";

// Reads and validates a madpipe.profile/1 file. Every problem throws Error{InvalidInput} naming
// the file, the JSON pointer of the field and the problem; I/O failures throw Error{Io}.
Profile read_profile(const std::string& path);
// Same, from parsed JSON; `file` is only used in messages.
Profile profile_from_json(const nlohmann::json& j, const std::string& file = "");
nlohmann::json profile_to_json(const Profile& profile);
void write_profile(const Profile& profile, const std::string& path);

// Sets the layer's backward time, its split (if any) keeping its proportions.
void set_backward_ms(Layer& layer, double backward_ms);

// Size of the activation entering layer l (a_{l-1}): input_bytes for l = 0.
std::int64_t input_bytes_of_layer(const Profile& profile, int layer);

}  // namespace madpipe
