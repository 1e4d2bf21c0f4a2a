// MPNet's relative position bias (transformers' MPNetEncoder): a learned
// table of [buckets, heads] values, indexed by the bucket of each key's
// offset from its query, added to every layer's scaled attention scores.
#pragma once

#include <cstdint>
#include <vector>

namespace ffn::models {

// The bucket of key offset rel = j − i (MPNet's relative_position_bucket,
// bidirectional): half the buckets for keys before the query and half for
// those after; within each half, offsets below a quarter of the buckets
// exactly, then log-spaced up to max_distance, then the last bucket. As
// transformers computes it, in float32.
int64_t relative_bucket(int64_t rel, int64_t buckets, int64_t max_distance);

// The encoder's position_bias table (EncoderRunOptions::position_bias) for
// sequences of up to `span` positions: [heads, 2·span − 1], offset
// −(span − 1) first, from the file's weight [buckets, heads].
std::vector<float> relative_bias_table(const std::vector<float>& weight, int64_t buckets, int64_t heads,
                                       int64_t max_distance, int64_t span);

}  // namespace ffn::models
