// ffn — the Transformer's position-wise feed-forward sublayer: the core of
// the library's public API in one include (the encoder, sentence embeddings,
// training and MPI have headers of their own, listed below).
//
//   ffn/types.hpp         settings, parameters, shapes, run options, Error
//   ffn/parallel.hpp      how d_ff shards and data-parallel rows are split (same bits)
//   ffn/feed_forward.hpp  the feed-forward sublayer (ffn::FeedForward), loading and saving it
//   ffn/io.hpp            .npy and safetensors files, atomic writes
//   ffn/diagnostics.hpp   the CPU, its measured peak, the kernels a run uses,
//                         comparisons of results, how numbers are printed
//   ffn/random.hpp        the counter-based generator of init and dropout
//   ffn/encoder.hpp       the encoder layer and stack
//   ffn/decoder.hpp       the decoder layer and stack, generation state
//   ffn/sentence.hpp      sentence embeddings (BERT checkpoints)
//   ffn/translation.hpp   translation with MarianMT checkpoints (greedy and beam search)
// and, in their own libraries: ffn/train.hpp (ffn_train), ffn/mpi.hpp (ffn_dist, MPI).
#pragma once

#include "ffn/diagnostics.hpp"
#include "ffn/feed_forward.hpp"
#include "ffn/io.hpp"
#include "ffn/parallel.hpp"
#include "ffn/random.hpp"
#include "ffn/types.hpp"
