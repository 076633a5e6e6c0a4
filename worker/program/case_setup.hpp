// What a case is run with: its backend, communicator and trainer, made from the options; and
// the failures that end a case with a reason rather than a crash.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "backend.hpp"
#include "communicator.hpp"
#include "input/pretraining_shards.hpp"
#include "input_resize_route.hpp"
#include "program/options.hpp"
#include "trainer.hpp"

namespace dlbench::worker {

// The case's precision cannot run on this backend: Failed, reason Unsupported (never retried).
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The backend could not be set up (no GPU, say): the case fails with why.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The backend the options ask for. On the GPU each rank takes the device of its local rank.
std::unique_ptr<Backend> make_backend(const Options& o);

// auto under mpirun: NCCL when the ranks train on GPUs, MPI otherwise.
std::unique_ptr<Communicator> make_communicator(const Options& o, int* argc, char*** argv, Backend* backend);

// Why this worker cannot run the case's precision on its backend, or nothing when it can. The API
// admits every precision; a case that lands where its precision cannot run ends as a Failed
// result with reason Unsupported, not as a usage error.
std::optional<std::string> unsupported_precision(const Options& o, const Backend* backend);
// Whether an imagefolder case's decoding threads hand their crops to the device to resize
// (DLBENCH_INPUT_RESIZE=device, and unset on a backend that overlaps host copies: a GPU) or resize
// them themselves (host, and unset on the CPU): false for other data. "device" on a backend that
// does not overlap host copies (the CPU's) is refused naming the variable.
bool input_resized_on_device(const Options& o, const Backend& backend);
// The same route, and whether DLBENCH_INPUT_RESIZE asked for it (a default the device's ring does
// not fit in memory gives way to the threads: open_on_resize_route).
struct InputResizeChoice {
  InputResize where = InputResize::host;
  bool asked = false;
};
InputResizeChoice input_resize_choice(const Options& o, const Backend& backend);
// Why this case's step graph cannot run on `backend` (one that cannot capture), or nothing.
std::optional<std::string> unsupported_step_graph(const Options& o, const Backend* backend);

// The case's trainer: its model, batch, precision and optimizer, from the seed's weights or
// --init-from's. Owned by pointer: the trainer's arena holds its buffers' addresses, so it never
// moves. `keep_every_buffer`: no memory shared between buffers (--record-step reads them after).
// `max_predictions`: BERT's masked-LM slots per sequence, the pretraining shards' (0: the
// synthetic batch's 15% of the tokens). `share`: the part of the seed's weights this rank draws,
// the rest left zero for the ranks' sum (all of them by default; --init-from's file is read whole).
std::unique_ptr<Trainer> make_trainer(const Options& o, Backend& device, int rank, bool keep_every_buffer = false,
                                      std::int64_t max_predictions = 0, ParameterStore::Share share = {});

// --data bertpretraining: the shards at --data-path, checked against the case's sequence length.
// Throws input::DataUnavailable naming the path and what is wrong.
input::PretrainingShards open_pretraining_shards(const Options& o);
// The shard reader's settings for `rank` of `world`: the case's batch, seed and model's vocabulary.
input::PretrainingReaderConfig pretraining_reader_config(const Options& o, int rank = 0, int world = 1);

}  // namespace dlbench::worker
